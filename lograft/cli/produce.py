"""`lograft produce TOPIC`: lines in, records out, as kafka-console-producer and kcat -P.

Each non-empty input line is one record. With `--key-separator SEP` the text
before the first SEP is the key and the rest the value (a line without SEP is
a value with no key, as kcat -K does). `--value-format string` sends the line
as a UTF-8 string; `json` parses it as JSON first (a bad line stops the run
and names its line number).

Lines are read on a thread into a bounded queue and sent in batches of at
most `--batch-records` records and about `--batch-bytes` bytes per request;
a batch also goes out once its first line has waited `--linger-ms`, so
`tail -f app.log | lograft produce logs` delivers lines as they come.

The first batch that fails stops the run (sending more could reorder what
follows it): the command then says which records failed and why, how many
were acknowledged, and exits 1.
"""

from __future__ import annotations

import argparse
import os
import queue
import stat
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from lograft.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    Streams,
    add_connection_args,
    client_for,
    count,
    error_text,
    non_negative_int,
    positive_int,
)
from lograft.cli.http_client import HttpClient, decode_error
from lograft.cli.progress import Progress
from lograft.errors import LograftError

BATCH_RECORDS_DEFAULT = 500
# The server's produce_records_max default; a larger batch would be refused.
BATCH_RECORDS_MAX = 10_000
BATCH_BYTES_DEFAULT = 1024 * 1024
LINGER_MS_DEFAULT = 100
# One input line may be at most this long, bytes (the request limit is 16 MiB).
LINE_BYTES_MAX = 8 * 1024 * 1024
# Lines read ahead of the sender, at most.
READ_AHEAD_LINES_MAX = 2 * BATCH_RECORDS_MAX
# JSON framing per record in a request, bytes (an estimate for --batch-bytes).
RECORD_OVERHEAD_BYTES = 32


class InputError(LograftError):
    """A line of the input cannot become a record."""

    code = "INVALID_INPUT"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce",
        help="send lines from stdin or a file as records",
        description="Send each line of stdin (or --file) as one record to TOPIC.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--file", type=Path, metavar="FILE", help="read lines from FILE, not stdin")
    p.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (kcat -K)",
    )
    p.add_argument(
        "--value-format",
        choices=("string", "json"),
        default="string",
        help="string: the line is a UTF-8 string value (default); json: the line is JSON",
    )
    p.add_argument("--partition", type=non_negative_int, metavar="P", help="send all to P")
    p.add_argument(
        "--acks", choices=("0", "1", "all"), default="all", help="acks to wait for (default all)"
    )
    p.add_argument(
        "--batch-records",
        type=_batch_records,
        default=BATCH_RECORDS_DEFAULT,
        metavar="N",
        help=f"records per request, at most (default {BATCH_RECORDS_DEFAULT})",
    )
    p.add_argument(
        "--batch-bytes",
        type=positive_int,
        default=BATCH_BYTES_DEFAULT,
        metavar="BYTES",
        help=f"about this many bytes per request, at most (default {BATCH_BYTES_DEFAULT})",
    )
    p.add_argument(
        "--linger-ms",
        type=non_negative_int,
        default=LINGER_MS_DEFAULT,
        metavar="MS",
        help=f"send a partial batch once it has waited this long (default {LINGER_MS_DEFAULT})",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal and the input "
        "is large)",
    )
    add_connection_args(p)
    p.set_defaults(func=cmd_produce, cmd_name="produce")


def _batch_records(text: str) -> int:
    value = positive_int(text)
    if value > BATCH_RECORDS_MAX:
        raise argparse.ArgumentTypeError(f"at most {BATCH_RECORDS_MAX}, got {value}")
    return value


# -- input ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineRecord:
    line_no: int
    key: str | None
    value: Any
    size: int


def parse_line(line_no: int, raw: bytes, key_sep: str | None, value_format: str) -> LineRecord:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"line {line_no} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    key: str | None = None
    if key_sep:
        head, sep, tail = text.partition(key_sep)
        if sep:
            key, text = head, tail
    value: Any = text
    if value_format == "json":
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InputError(
                f"line {line_no} is not JSON ({exc}); use --value-format string"
            ) from None
    return LineRecord(line_no, key, value, len(raw) + RECORD_OVERHEAD_BYTES)


_EOF = object()
_TIMEOUT = object()


class LineSource:
    """Reads lines on a daemon thread into a bounded queue (so a batch can be sent
    while the input is idle, and reading overlaps sending)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.bytes_read = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=READ_AHEAD_LINES_MAX)
        self._thread = threading.Thread(target=self._read, name="produce-input", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line_no in range(1, 1 << 62):
                raw = self.stream.readline(LINE_BYTES_MAX + 1)
                if not raw:
                    break
                if len(raw) > LINE_BYTES_MAX:
                    raise InputError(f"line {line_no} is longer than {LINE_BYTES_MAX} bytes")
                self._queue.put((line_no, raw))
            self._queue.put(_EOF)
        except (OSError, InputError) as exc:
            self._queue.put(exc)

    def get(self, timeout_s: float | None) -> Any:
        """(line_no, line bytes), _EOF, or _TIMEOUT; raises what reading raised."""
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return _TIMEOUT
        if isinstance(item, InputError):
            raise item
        if isinstance(item, OSError):
            raise InputError(f"reading the input failed: {item}")
        if isinstance(item, tuple):
            self.bytes_read += len(item[1])
        return item


# -- sending ----------------------------------------------------------------------------------


@dataclass
class Tally:
    sent: int = 0
    acknowledged: int = 0
    failed_lines: list[tuple[int, str]] = field(default_factory=list)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)


def request_body(batch: list[LineRecord], args: argparse.Namespace) -> dict[str, Any]:
    records = []
    for rec in batch:
        item: dict[str, Any] = {"value": rec.value}
        if rec.key is not None:
            item["key"] = rec.key
        if args.partition is not None:
            item["partition"] = args.partition
        records.append(item)
    return {"value_format": args.value_format, "key_format": "string", "records": records}


def send_batch(
    client: HttpClient, batch: list[LineRecord], args: argparse.Namespace, tally: Tally
) -> None:
    """Send one request; count what was acknowledged and what failed (and why)."""
    path = f"/v1/topics/{urllib.parse.quote(args.topic, safe='')}/records"
    reply = client.send("POST", path, query={"acks": args.acks}, json=request_body(batch, args))
    tally.sent += len(batch)
    if reply.status == 202 and args.acks == "0":
        return
    offsets = _outcomes(reply.body)
    if not isinstance(offsets, list) or len(offsets) != len(batch):
        # The whole request was refused (unknown topic, bad request, ...).
        raise decode_error(reply.status, reply.body, reply.url)
    for rec, outcome in zip(batch, offsets, strict=True):
        err = outcome.get("error") if isinstance(outcome, dict) else None
        if err is None:
            tally.acknowledged += 1
            continue
        try:
            error = LograftError.from_dict(err)
        except ValueError as exc:
            error = LograftError(f"the node answered a malformed error: {exc}")
        where = f"partition {outcome.get('partition')}: " if "partition" in outcome else ""
        tally.errors[(error.code, where + error.message)] += 1
        tally.failed_lines.append((rec.line_no, error.code))


def _outcomes(body: Any) -> Any:
    """Per-record outcomes: `offsets`, or, when every record failed, the error's
    `details.offsets` (that answer is an ordinary error body)."""
    if not isinstance(body, dict):
        return None
    if "offsets" in body:
        return body["offsets"]
    error = body.get("error")
    details = error.get("details") if isinstance(error, dict) else None
    return details.get("offsets") if isinstance(details, dict) else None


# -- the command ------------------------------------------------------------------------------


def cmd_produce(
    args: argparse.Namespace, streams: Streams, clock: Callable[[], float] = time.monotonic
) -> int:
    if args.file is not None:
        try:
            stream: BinaryIO = args.file.open("rb")
        except OSError as exc:
            streams.stderr.write(f"lograft produce: cannot read {args.file}: {exc.strerror}\n")
            return EXIT_FAILURE
    else:
        stream = streams.stdin
    progress = Progress(streams.stderr, mode=args.progress, total_bytes=_size(stream), clock=clock)
    tally = Tally()
    try:
        failure = _run(client_for(args), LineSource(stream), args, tally, progress, clock)
    except KeyboardInterrupt:
        progress.clear()
        _summary(args, tally, progress, streams, interrupted=True)
        return 130
    finally:
        if args.file is not None:
            stream.close()
    progress.clear()
    if failure is not None:
        streams.stderr.write(f"lograft produce: {failure}\n")
    _summary(args, tally, progress, streams)
    return EXIT_OK if failure is None else EXIT_FAILURE


class Pending:
    """The batch being filled: bounded by records and bytes, and by how long its
    first record may wait (`linger_s`)."""

    def __init__(self, records_max: int, bytes_max: int, linger_s: float) -> None:
        self.records_max = records_max
        self.bytes_max = bytes_max
        self.linger_s = linger_s
        self.records: list[LineRecord] = []
        self.bytes = 0
        self.first_at = 0.0

    def add(self, rec: LineRecord, now: float) -> None:
        if not self.records:
            self.first_at = now
        self.records.append(rec)
        self.bytes += rec.size

    def full(self) -> bool:
        return len(self.records) >= self.records_max or self.bytes >= self.bytes_max

    def wait_s(self, now: float) -> float | None:
        """How long the next read may block: forever while empty."""
        return None if not self.records else max(0.0, self.first_at + self.linger_s - now)

    def take(self) -> list[LineRecord]:
        batch, self.records, self.bytes = self.records, [], 0
        return batch


def _run(
    client: HttpClient,
    source: LineSource,
    args: argparse.Namespace,
    tally: Tally,
    progress: Progress,
    clock: Callable[[], float],
) -> str | None:
    """Read, batch and send until the input ends; the failure text, or None."""
    pending = Pending(args.batch_records, args.batch_bytes, args.linger_ms / 1000)

    def flush() -> str | None:
        batch = pending.take()
        try:
            send_batch(client, batch, args, tally)
        except LograftError as exc:
            return _error_text(exc, batch)
        progress.update(tally.sent, source.bytes_read)
        return _failure_text(tally) if tally.errors else None

    while True:
        try:
            item = source.get(pending.wait_s(clock()))
            rec = _record(item, args)
        except InputError as exc:
            # What came before the bad line still goes out, as it would have anyway.
            failure = flush() if pending.records else None
            return failure or f"{exc.message}\nstopped: the rest of the input was not sent."
        if rec is not None:
            pending.add(rec, clock())
        if pending.records and (item is _EOF or item is _TIMEOUT or pending.full()):
            failure = flush()
            if failure is not None:
                return failure
        if item is _EOF:
            return None


def _record(item: Any, args: argparse.Namespace) -> LineRecord | None:
    if item is _EOF or item is _TIMEOUT:
        return None
    line_no, raw = item
    line = raw.rstrip(b"\r\n")
    if not line:
        return None
    return parse_line(line_no, line, args.key_separator, args.value_format)


def _failure_text(tally: Tally) -> str:
    failed = len(tally.failed_lines)
    lines = [
        f"{count(failed, 'record')} failed in the last request (input line(s) "
        f"{_line_ranges([n for n, _ in tally.failed_lines])}):"
    ]
    lines += [
        f"  {code} ({count(n, 'record')}): {message}"
        for (code, message), n in tally.errors.most_common()
    ]
    lines.append("stopped: the rest of the input was not sent.")
    return "\n".join(lines)


def _error_text(exc: LograftError, batch: list[LineRecord]) -> str:
    lines = _line_ranges([r.line_no for r in batch])
    return (
        f"{error_text(exc)}\n(while sending input line(s) {lines}; "
        "stopped: the rest of the input was not sent.)"
    )


def _line_ranges(numbers: list[int]) -> str:
    ranges: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], -1]:
        if n == prev + 1:
            prev = n
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(ranges[:10]) + (", ..." if len(ranges) > 10 else "")


def _summary(
    args: argparse.Namespace,
    tally: Tally,
    progress: Progress,
    streams: Streams,
    *,
    interrupted: bool = False,
) -> None:
    elapsed = max(progress.clock() - progress.started, 0.0)
    done = tally.sent if args.acks == "0" else tally.acknowledged
    rate = f"{progress.rate(done):,.0f} records/s"
    if args.acks == "0":
        what = f"{count(tally.sent, 'record')} sent to {args.topic} (acks=0: not acknowledged)"
    else:
        what = (
            f"{count(tally.acknowledged, 'record')} acknowledged by {args.topic} (acks={args.acks})"
        )
        failed = len(tally.failed_lines)
        if failed:
            what += f", {failed:,} failed"
    tail = " interrupted;" if interrupted else ""
    streams.stderr.write(f"lograft produce:{tail} {what} in {elapsed:.1f} s, {rate}\n")


def _size(stream: BinaryIO) -> int | None:
    """The input's size when it is a regular file (for a percentage), else None."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
