"""A small, strict Server-Sent Events parser for tests of the stream endpoint.

Feed it bytes as they arrive; it returns whole events (blank-line ended) and
comments, as the HTML standard's parsing rules define them for the fields the
server uses (`event`, `id`, `data`, comments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SseEvent:
    name: str  # "message" unless an `event:` field named it
    event_id: str | None
    data: str | None  # None for an id-only event (no data line)
    comments: tuple[str, ...]

    def json(self) -> Any:
        assert self.data is not None, self
        return json.loads(self.data)


class SseParser:
    def __init__(self) -> None:
        self._buffer = b""
        self._fields: list[tuple[str, str]] = []
        self._comments: list[str] = []

    def feed(self, data: bytes) -> list[SseEvent]:
        self._buffer += data
        out: list[SseEvent] = []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            text = line.decode()
            if text == "":
                out.append(self._dispatch())
            elif text.startswith(":"):
                self._comments.append(text[1:].strip())
            else:
                name, _sep, value = text.partition(":")
                self._fields.append((name, value.removeprefix(" ")))
        return out

    def _dispatch(self) -> SseEvent:
        fields = dict(self._fields)
        assert len(fields) == len(self._fields), f"repeated field in {self._fields}"
        assert set(fields) <= {"event", "id", "data"}, fields
        event = SseEvent(
            fields.get("event", "message"),
            fields.get("id"),
            fields.get("data"),
            tuple(self._comments),
        )
        self._fields.clear()
        self._comments.clear()
        return event


def cursor_of(event_id: str) -> dict[int, int]:
    """`0:13,1:7` -> {0: 13, 1: 7}."""
    return {int(p): int(o) for p, o in (item.split(":") for item in event_id.split(","))}
