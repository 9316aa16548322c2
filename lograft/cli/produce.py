"""`lograft produce TOPIC`: lines in, records out, as kafka-console-producer and kcat -P.

Each non-empty input line is one record. With `--key-separator SEP` the text
before the first SEP is the key and the rest the value (a line without SEP is
a value with no key, as kcat -K does). `--value-format string` sends the line
as a UTF-8 string; `json` parses it as JSON first and sends it as compact
JSON text (a bad line stops the run and names its line number).

The records go through `lograft.client.Producer`: batches per partition of at
most `--batch-records` records and about `--batch-bytes` bytes, a partial
batch sent once it has waited `--linger-ms` (so `tail -f app.log | lograft
produce logs` delivers lines as they come), keyed records on their murmur2
partition, retries of retriable errors within `--timeout-ms`, idempotence
with acks=all (a retried batch is never written twice).

The first record that fails stops the run: its callback aborts the producer
(`Producer.abort`, Kafka's `close(0)` from a callback), so no record after it
is sent; requests already in flight finish. The command then says which
records failed and why, how many were acknowledged, and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import stat
import threading
import time
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
    connection_settings,
    count,
    error_text,
    finish_parser,
    non_negative_int,
    positive_int,
)
from lograft.cli.output import print_json, wants_json
from lograft.cli.progress import REDRAW_INTERVAL_S, Progress
from lograft.errors import LograftError

BATCH_RECORDS_DEFAULT = 500
# The server's produce_records_max default: a batch of more is not useful.
BATCH_RECORDS_MAX = 10_000
BATCH_BYTES_DEFAULT = 1024 * 1024
LINGER_MS_DEFAULT = 100
# One input line may be at most this long, bytes.
LINE_BYTES_MAX = 8 * 1024 * 1024
# Lines read ahead of the producer, at most.
READ_AHEAD_LINES_MAX = 2 * BATCH_RECORDS_MAX
# The producer's memory for records not yet acknowledged, bytes (at least two
# batches' worth: see _producer_settings).
BUFFER_BYTES_MIN = 32 * 1024 * 1024
# How long Ctrl-C waits for the requests in flight before the summary, ms.
INTERRUPT_CLOSE_MS = 5_000


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
    finish_parser(p, cmd_produce, "produce")


def _batch_records(text: str) -> int:
    value = positive_int(text)
    if value > BATCH_RECORDS_MAX:
        raise argparse.ArgumentTypeError(f"at most {BATCH_RECORDS_MAX}, got {value}")
    return value


# -- input ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineRecord:
    line_no: int
    key: bytes | None
    value: bytes


def parse_line(line_no: int, raw: bytes, key_sep: str | None, value_format: str) -> LineRecord:
    """One line (without its line end) as a record's key and value bytes."""
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
    value = text.encode("utf-8")
    if value_format == "json":
        try:
            value = orjson.dumps(orjson.loads(value))
        except orjson.JSONDecodeError as exc:
            raise InputError(
                f"line {line_no} is not JSON ({exc}); use --value-format string"
            ) from None
    return LineRecord(line_no, None if key is None else key.encode("utf-8"), value)


def read_lines(stream: BinaryIO) -> Any:
    """(line number, line without its line end, bytes read) for every non-empty
    line; InputError for a line over LINE_BYTES_MAX or a read that fails."""
    line_no = 0
    while True:
        line_no += 1
        try:
            raw = stream.readline(LINE_BYTES_MAX + 1)
        except (OSError, ValueError) as exc:  # ValueError: the file was closed
            raise InputError(f"reading the input failed: {exc}") from None
        if not raw:
            return
        if len(raw) > LINE_BYTES_MAX:
            raise InputError(f"line {line_no} is longer than {LINE_BYTES_MAX} bytes")
        line = raw.rstrip(b"\r\n")
        if line:
            yield line_no, line, len(raw)


_EOF = object()
_STOP = object()


class LineSource:
    """`read_lines` on a daemon thread into a bounded queue, so the command can
    stop at a failed record while the input is idle (`tail -f | lograft
    produce` would otherwise wait in a read until the next line), and reading
    overlaps sending."""

    def __init__(self, stream: BinaryIO) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=READ_AHEAD_LINES_MAX)
        self._thread = threading.Thread(
            target=self._read, args=(stream,), name="produce-input", daemon=True
        )
        self._thread.start()

    def _read(self, stream: BinaryIO) -> None:
        try:
            for item in read_lines(stream):
                self._queue.put(item)
            self._queue.put(_EOF)
        except InputError as exc:
            self._queue.put(exc)

    def stop(self) -> None:
        """Wake a `get` waiting for input (from any thread, never blocking)."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_STOP)

    def get(self, timeout_s: float | None) -> Any:
        """(line number, line, size), _EOF, _STOP, or None after `timeout_s`;
        raises what reading raised."""
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, InputError):
            raise item
        return item


# -- outcomes ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """Record outcomes, counted by the producer's callbacks (its loop thread)."""

    sent: int = 0  # records whose request is done (acknowledged or failed)
    acknowledged: int = 0
    failed_lines: list[int] = field(default_factory=list)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def done(self, line_no: int, error: BaseException | None) -> bool:
        """Count one record's outcome; True if it is the first failure."""
        with self.lock:
            if error is None:
                self.sent += 1
                self.acknowledged += 1
                return False
            if isinstance(error, LograftError) and error.details.get("sent") is False:
                return False  # aborted after an earlier failure: never sent
            self.sent += 1
            first = not self.failed_lines
            self.failed_lines.append(line_no)
            self.errors[_reason(error)] += 1
            return first


def _reason(error: BaseException) -> tuple[str, str]:
    """(code, message) of a failed record; a delivery timeout is shown by the
    last error it retried (its cause), which says why."""
    if not isinstance(error, LograftError):
        return "ERROR", str(error) or type(error).__name__
    shown = error
    cause = error.__cause__
    if error.code == "DELIVERY_TIMEOUT" and isinstance(cause, LograftError):
        shown = cause
    partition = error.details.get("partition")
    where = f"partition {partition}: " if isinstance(partition, int) else ""
    tail = " (retried until --timeout-ms ran out)" if shown is not error else ""
    return shown.code, where + shown.message + tail


# -- the command ------------------------------------------------------------------------------


def _producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    request_bytes = max(args.batch_bytes, 1024 * 1024)
    return {
        "acks": args.acks,
        "batch_bytes": args.batch_bytes,
        "batch_records": args.batch_records,
        "linger_ms": args.linger_ms,
        # --linger-ms is the wait of every partial batch, as documented: lines
        # read together leave together (not the client's adaptive linger).
        "linger_strict": True,
        "max_request_bytes": request_bytes,
        "buffer_memory_bytes": max(BUFFER_BYTES_MIN, 2 * request_bytes),
        "request_timeout_ms": args.timeout_ms,
        "delivery_timeout_ms": args.timeout_ms + args.linger_ms,
        "max_block_ms": args.timeout_ms,
        "client_id": "lograft-cli",
        **connection_settings(args),
    }


def cmd_produce(
    args: argparse.Namespace, streams: Streams, clock: Callable[[], float] = time.monotonic
) -> int:
    from lograft.client import Producer

    if args.file is not None:
        try:
            stream: BinaryIO = args.file.open("rb")
        except OSError as exc:
            streams.stderr.write(f"lograft produce: cannot read {args.file}: {exc.strerror}\n")
            return EXIT_FAILURE
    else:
        stream = streams.stdin
    progress = Progress(
        streams.stderr, mode=args.progress, total=_size(stream), what="records sent", clock=clock
    )
    tally = Tally()
    try:
        producer = Producer(args.bootstrap, **_producer_settings(args))
        try:
            failure = _run(producer, stream, args, tally, progress)
        except KeyboardInterrupt:
            producer.abort()
            producer.close(INTERRUPT_CLOSE_MS)
            progress.clear()
            _summary(args, tally, progress, streams, interrupted=True)
            return 130
        except BaseException:
            progress.clear()  # rich hid the cursor while drawing: give it back
            producer.abort()
            producer.close(INTERRUPT_CLOSE_MS)
            raise
        producer.close()
    finally:
        if args.file is not None:
            stream.close()
    progress.clear()
    if failure is None and tally.failed_lines:
        failure = _failure_text(tally)
    if failure is not None:
        streams.stderr.write(f"lograft produce: {failure}\n")
    _summary(args, tally, progress, streams)
    return EXIT_OK if failure is None else EXIT_FAILURE


def _run(
    producer: Any, stream: BinaryIO, args: argparse.Namespace, tally: Tally, progress: Progress
) -> str | None:
    """Read and send until the input ends or a record fails; the failure text of
    what stopped it before sending (a bad line, a refused send), or None."""
    stopped = threading.Event()
    source = LineSource(stream)
    bytes_read = 0
    # While the input is idle the bar still counts acknowledgements.
    idle_s = REDRAW_INTERVAL_S if progress.enabled else None

    def on_done(line_no: int) -> Callable[[Any], None]:
        def done(fut: Any) -> None:
            if tally.done(line_no, fut.exception()):
                stopped.set()
                producer.abort()  # on the loop thread: nothing after this is sent
                source.stop()

        return done

    try:
        while not stopped.is_set():
            item = source.get(idle_s)
            if item is _EOF or item is _STOP:
                break
            if item is not None:
                line_no, line, size = item
                rec = parse_line(line_no, line, args.key_separator, args.value_format)
                try:
                    fut = producer.send(
                        args.topic, rec.value, key=rec.key, partition=args.partition
                    )
                except LograftError as exc:
                    if stopped.is_set():
                        return None  # aborted after a failure: that failure is the story
                    producer.flush()
                    return f"{error_text(exc)}\n(while sending input line {line_no}; {_STOPPED})"
                fut.add_done_callback(on_done(line_no))
                bytes_read += size
            progress.update(tally.sent, bytes_read)
    except InputError as exc:
        # What came before the bad line still goes out, as it would have anyway.
        producer.flush()
        if tally.failed_lines:
            return None
        return f"{exc.message}\n{_STOPPED}"
    producer.flush()
    progress.update(tally.sent, bytes_read)
    return None


_STOPPED = "stopped: the rest of the input was not sent."


def _failure_text(tally: Tally) -> str:
    failed = len(tally.failed_lines)
    lines = [
        f"{count(failed, 'record')} failed (input line(s) "
        f"{_line_ranges(sorted(tally.failed_lines))}):"
    ]
    lines += [
        f"  {code} ({count(n, 'record')}): {message}"
        for (code, message), n in tally.errors.most_common()
    ]
    lines.append(_STOPPED)
    return "\n".join(lines)


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
    """The summary line on stderr, always; with --output json also on stdout as JSON."""
    elapsed = max(progress.clock() - progress.started, 0.0)
    done = tally.sent if args.acks == "0" else tally.acknowledged
    rate = progress.rate(done)
    if wants_json(args):
        doc = {
            "topic": args.topic,
            "acks": args.acks,
            "sent": tally.sent,
            "acknowledged": tally.acknowledged,
            "failed": len(tally.failed_lines),
            "interrupted": interrupted,
            "elapsed_s": round(elapsed, 3),
            "records_per_s": round(rate, 1),
        }
        print_json(doc, streams.stdout)
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
    streams.stderr.write(
        f"lograft produce:{tail} {what} in {elapsed:.1f} s, {rate:,.0f} records/s\n"
    )


def _size(stream: BinaryIO) -> int | None:
    """The input's size when it is a regular file (for a percentage), else None."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
