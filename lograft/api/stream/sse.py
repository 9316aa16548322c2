"""Server-Sent Events framing and the stream cursor carried in event ids.

Wire format (the `text/event-stream` of the HTML standard): an event is
`field: value` lines ended by a blank line. Every event here has one `data:`
line, because every payload is one line of compact JSON (orjson never emits a
newline). A line that starts with `:` is a comment: clients ignore it, and it
keeps proxies from closing a quiet connection.

Cursor: the `id:` of every event is the stream's position after that event,
for every partition of the stream, e.g. `0:13,1:7` -- the offset of the next
record to deliver per partition (Kafka's consumer *position*), partitions in
ascending order. A browser's EventSource sends the last id it saw back as
`Last-Event-ID` when it reconnects, so the new stream resumes exactly after the
last delivered record on every partition, wherever the leaders are by then.
"""

from __future__ import annotations

from collections.abc import Mapping

from lograft.api.request_ints import QUERY_INT_MAX, parse_int, parse_partition
from lograft.errors import InvalidRequestError

CONTENT_TYPE = "text/event-stream"
# Largest cursor accepted (Last-Event-ID or `last_event_id`), characters; far
# above a topic's worth of `partition:offset` pairs but bounded before parsing.
CURSOR_CHARS_MAX = 64 * 1024


def event(data: bytes, *, event_id: str | None = None, name: str | None = None) -> bytes:
    """One event; `data` must be a single line (compact JSON)."""
    assert b"\n" not in data and b"\r" not in data, "SSE data must be one line"
    head = b""
    if name is not None:
        head += b"event: " + name.encode() + b"\n"
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\n"
    return head + b"data: " + data + b"\n\n"


def id_only(event_id: str) -> bytes:
    """An event with an id and no data: EventSource records the id as its last
    event id without dispatching anything, so a stream that has delivered no
    record yet still resumes from the positions it started at."""
    return b"id: " + event_id.encode() + b"\n\n"


def comment(text: str) -> bytes:
    assert "\n" not in text and "\r" not in text
    return b": " + text.encode() + b"\n\n"


def format_cursor(positions: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{positions[p]}" for p in sorted(positions))


def cursor_template(positions: Mapping[int, int], partition: int) -> tuple[str, str]:
    """(prefix, suffix) so that `prefix + str(pos) + suffix` is the cursor with
    `partition` at `pos` and every other partition where it is now: built once
    per chunk of one partition instead of once per record."""
    text = format_cursor({**positions, partition: -1})
    marker = f"{partition}:-1"
    start = 0 if text.startswith(marker) else text.index("," + marker) + 1
    return text[: start + len(f"{partition}:")], text[start + len(marker) :]


def parse_cursor(text: str) -> dict[int, int]:
    """`0:13,1:7` -> {0: 13, 1: 7}; InvalidRequestError when malformed or out of range."""
    if len(text) > CURSOR_CHARS_MAX:
        raise InvalidRequestError(f"the stream cursor is longer than {CURSOR_CHARS_MAX} characters")
    out: dict[int, int] = {}
    for item in text.strip().split(","):
        partition_text, sep, offset_text = item.strip().partition(":")
        if not sep:
            raise InvalidRequestError(
                f"bad stream cursor {text[:100]!r}: expected partition:offset pairs "
                "separated by commas, e.g. 0:13,1:7"
            )
        try:
            partition = parse_partition(partition_text, "cursor partition")
            offset = parse_int(offset_text, "cursor offset", maximum=QUERY_INT_MAX)
        except InvalidRequestError as exc:
            raise InvalidRequestError(
                f"bad stream cursor {text[:100]!r}: {exc.message}", **exc.details
            ) from None
        if partition in out:
            raise InvalidRequestError(f"stream cursor names partition {partition} twice")
        out[partition] = offset
    return out


__all__ = [
    "CONTENT_TYPE",
    "CURSOR_CHARS_MAX",
    "comment",
    "cursor_template",
    "event",
    "format_cursor",
    "id_only",
    "parse_cursor",
]
