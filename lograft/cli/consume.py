"""`lograft consume TOPIC`: records out as lines, as kafka-console-consumer and kcat -C.

Where it starts (`--from`), per partition: `earliest` (the log start),
`latest` (the high watermark: only what comes next), an offset, or
`@TIMESTAMP_MS` (the first record at or after that time; the high watermark
if there is none yet).

Without `--follow` the command reads each partition from its start up to
the high watermark it saw when it started, then exits: a snapshot, so it ends
even while producers keep writing. With `--follow` it keeps reading until
Ctrl-C (exit 0) or `--max-records`.

The reading is `lograft.client.Consumer`'s (assigned partitions, no group):
raw RecordBatch v2 fetched from each partition's leader, every partition
long-polling (`--max-wait-ms`) at once, leaders found from the metadata and
followed through NOT_LEADER_OR_FOLLOWER, retriable errors retried with
backoff, compacted-away offsets stepped over. The records are rendered as the
JSON fetch API renders them (`lograft.protocol.record_json`), with the same
`--key-format` / `--value-format` choices.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    connection_settings,
    finish_parser,
    non_negative_int,
    positive_int,
)
from lograft.cli.progress import Progress, isatty
from lograft.errors import LograftError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from lograft.protocol.record_json import READ_FORMATS, render_record

# Records handed out per poll, at most (the server's fetch_records_default).
FETCH_RECORDS_MAX = 500
FOLLOW_WAIT_MS_DEFAULT = 1_000
OUTPUT_FORMATS = ("value", "json", "kv")


class StalledError(LograftError):
    """Without --follow: no partition got nearer its end for --timeout-ms
    (its leader is gone, or keeps failing)."""

    code = "NO_PROGRESS"
    retriable = True


@dataclass(frozen=True, slots=True)
class StartAt:
    kind: str  # earliest | latest | offset | timestamp
    value: int = 0

    def __str__(self) -> str:
        if self.kind == "offset":
            return str(self.value)
        return f"@{self.value}" if self.kind == "timestamp" else self.kind


def start_at(text: str) -> StartAt:
    """The --from value; argparse turns a ValueError here into exit 2."""
    word = text.strip().lower()
    if word in ("earliest", "beginning"):
        return StartAt("earliest")
    if word in ("latest", "end"):
        return StartAt("latest")
    kind, digits = ("timestamp", word[1:]) if word.startswith("@") else ("offset", word)
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: use earliest, latest, an offset (e.g. 42) or @TIMESTAMP_MS "
            "(e.g. @1700000000000)"
        )
    return StartAt(kind, int(digits))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic, one per line",
        description="Print the records of TOPIC, one per line, from --from up to the end "
        "(or, with --follow, as they arrive).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partition", type=non_negative_int, metavar="P", help="only P (default: all)")
    p.add_argument(
        "--from",
        dest="start",
        type=start_at,
        default=StartAt("earliest"),
        metavar="WHERE",
        help="earliest (default), latest, OFFSET, or @TIMESTAMP_MS",
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records")
    p.add_argument("--max-records", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument(
        "--format",
        "--output",
        "-o",
        dest="output",
        choices=OUTPUT_FORMATS,
        default="value",
        help="value: the value (default); json: one JSON object per record; kv: key<TAB>value",
    )
    p.add_argument(
        "--key-format", choices=READ_FORMATS, default="auto", help="how keys are rendered"
    )
    p.add_argument(
        "--value-format",
        choices=READ_FORMATS,
        default="auto",
        help="how values are rendered (auto: JSON if it parses, else text, else base64)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=positive_int,
        default=FOLLOW_WAIT_MS_DEFAULT,
        metavar="MS",
        help=f"longest wait of one fetch for new records (default {FOLLOW_WAIT_MS_DEFAULT})",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal, stdout is "
        "not, and the run lasts over a second)",
    )
    finish_parser(p, cmd_consume, "consume", output=False)


# -- the command --------------------------------------------------------------------------------


def cmd_consume(
    args: argparse.Namespace, streams: Streams, clock: Callable[[], float] = time.monotonic
) -> int:
    from lograft.client import Consumer

    consumer = Consumer(
        args.bootstrap,
        client_id="lograft-cli",
        auto_offset_reset="none",  # every partition is placed by --from
        fetch_max_wait_ms=args.max_wait_ms,
        request_timeout_ms=args.timeout_ms + args.max_wait_ms,
        default_api_timeout_ms=args.timeout_ms,
        max_poll_records=FETCH_RECORDS_MAX,
        **connection_settings(args),
    )
    progress: Progress | None = None
    try:
        tps = _partitions(consumer, args.topic, args.partition)
        consumer.assign(tps)
        ends = None if args.follow else consumer.end_offsets(tps)
        _seek(consumer, tps, args.start)
        progress = Progress(
            streams.stderr,
            mode=_progress_mode(args.progress, streams.stdout),
            total=_offsets_to_read(consumer, ends, args.max_records),
            what="records read",
            clock=clock,
        )
        _consume(consumer, ends, args, streams.stdout, progress)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow ends: not a failure
    finally:
        if progress is not None:
            progress.clear()
        consumer.close()
    streams.stdout.flush()
    return EXIT_OK


def _progress_mode(option: bool | None, stdout: TextIO) -> bool | None:
    """--progress/--no-progress, else auto, but never by default when the records
    go to a terminal too: the bar's redraws would tear their lines."""
    if option is None and isatty(stdout):
        return False
    return option


def _offsets_to_read(consumer: Any, ends: dict[Any, int] | None, limit: int | None) -> int | None:
    """The bar's total: offsets from each position to its end (None when following)."""
    if ends is None:
        return limit
    total = sum(max(end - consumer.position(tp), 0) for tp, end in ends.items())
    return total if limit is None else min(total, limit)


def _partitions(consumer: Any, topic: str, only: int | None) -> list[Any]:
    from lograft.client import TopicPartition

    count = len(consumer.partitions_for_topic(topic))
    if only is None:
        return [TopicPartition(topic, p) for p in range(count)]
    if only >= count:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has no partition {only}; it has {count} (0..{count - 1})",
            topic=topic,
            partition=only,
        )
    return [TopicPartition(topic, only)]


def _seek(consumer: Any, tps: list[Any], start: StartAt) -> None:
    if start.kind == "earliest":
        consumer.seek_to_beginning(*tps)
    elif start.kind == "latest":
        consumer.seek_to_end(*tps)
    elif start.kind == "timestamp":
        found = consumer.offsets_for_times({tp: start.value for tp in tps})
        missing = [tp for tp, hit in found.items() if hit is None]
        latest = consumer.end_offsets(missing) if missing else {}
        for tp, hit in found.items():
            consumer.seek(tp, hit[0] if hit is not None else latest[tp])
    else:
        earliest, latest = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        for tp in tps:
            if not earliest[tp] <= start.value <= latest[tp]:
                raise OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {start.value} is outside the log's "
                    f"range [{earliest[tp]}, {latest[tp]}] (log start, high watermark)",
                    offset=start.value,
                    log_start_offset=earliest[tp],
                    high_watermark=latest[tp],
                )
            consumer.seek(tp, start.value)


def _consume(
    consumer: Any,
    ends: dict[Any, int] | None,
    args: argparse.Namespace,
    out: TextIO,
    progress: Progress,
) -> None:
    """Print records until every partition reached its end (`ends`; None:
    follow), --max-records, or Ctrl-C."""
    clock = progress.clock
    remaining: int | None = args.max_records
    active = _unfinished(consumer, ends, consumer.assignment())
    positions = {tp: consumer.position(tp) for tp in active}
    # The bar counts offsets passed (compacted-away ones too) towards the ends, or
    # records printed when --max-records is the nearer end, or when following.
    first, reached = sum(positions.values()), dict(positions)
    to_read = None if ends is None else sum(ends[tp] - at for tp, at in positions.items())
    by_offsets = to_read is not None and (remaining is None or remaining > to_read)
    printed = 0
    progressed_at = clock()
    while active and remaining != 0:
        limit = FETCH_RECORDS_MAX if remaining is None else min(remaining, FETCH_RECORDS_MAX)
        got = consumer.poll(timeout_ms=args.max_wait_ms, max_records=limit)
        for tp, records in got.items():
            end = None if ends is None else ends[tp]
            for rec in records:
                if end is not None and rec.offset >= end:
                    break
                out.write(render(rec, tp, args) + "\n")
                printed += 1
                if remaining is not None:
                    remaining -= 1
        out.flush()
        if ends is None:
            progress.update(printed, printed)
            continue
        now_at = {tp: consumer.position(tp) for tp in active}
        reached.update(now_at)
        progress.update(printed, sum(reached.values()) - first if by_offsets else printed)
        if now_at != positions:
            positions, progressed_at = now_at, clock()
        elif clock() - progressed_at > args.timeout_ms / 1000:
            stuck = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(active))
            raise StalledError(
                f"{stuck}: no progress towards the high watermark seen at the start for "
                f"{args.timeout_ms} ms (--timeout-ms); is a partition leader down?"
            )
        still = _unfinished(consumer, ends, active)
        if still != active:
            active = still
            consumer.assign(sorted(active))  # stop fetching what is done; positions kept


def _unfinished(consumer: Any, ends: dict[Any, int] | None, tps: Iterable[Any]) -> set[Any]:
    if ends is None:
        return set(tps)
    return {tp for tp in tps if consumer.position(tp) < ends[tp]}


# -- output -------------------------------------------------------------------------------------


def text(value: Any) -> str:
    """A rendered key or value as one line of text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def render(rec: Any, tp: Any, args: argparse.Namespace) -> str:
    """One record (a ConsumerRecord, bytes key and value) as one output line."""
    doc = render_record(rec, tp.partition, args.value_format, args.key_format)
    return render_line(doc, args.output, tp.topic)


def render_line(doc: dict[str, Any], output: str, topic: str) -> str:
    """A record as the JSON API shows it, as one line of `--format` output."""
    if output == "json":
        return orjson.dumps({"topic": topic, **doc}).decode()
    if output == "kv":
        return f"{text(doc.get('key'))}\t{text(doc.get('value'))}"
    return text(doc.get("value"))
