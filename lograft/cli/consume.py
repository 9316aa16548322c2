"""`lograft consume TOPIC`: records out as lines, as kafka-console-consumer and kcat -C.

Where it starts (`--from`), per partition: `earliest` (the log start),
`latest` (the high watermark: only what comes next), an offset, or
`@TIMESTAMP_MS` (the first record at or after that time; the high watermark
if there is none yet).

Without `--follow` the command reads each partition from its start up to the
high watermark it saw when it started, then exits: a snapshot, so it ends
even while producers keep writing. With `--follow` it keeps long-polling
(`max_wait_ms`) for new records until Ctrl-C (exit 0) or `--max-records`.

Partitions are read round-robin, up to FETCH_RECORDS_MAX records each per
turn. In follow mode, a turn that finds nothing anywhere is followed by one
where each partition long-polls for its share of `--max-wait-ms`, so a new
record shows up within about that long whichever partition it lands on.

Every request goes to the partition's leader: the first goes to a bootstrap
node, and a NOT_LEADER_OR_FOLLOWER answer names the leader
(`details.leader_url`), which the next attempt uses. While leadership moves
(no leader, leader unreachable) requests are retried with backoff for up to
LEADER_RETRY_TIMEOUT_MS.
"""

from __future__ import annotations

import argparse
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    add_connection_args,
    client_for,
    non_negative_int,
    positive_int,
)
from lograft.cli.http_client import JSON, HttpClient, Reply, decode_error
from lograft.client.errors import ClusterUnreachableError
from lograft.errors import (
    LograftError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

# Records asked for per partition per turn (the server's fetch_records_default).
FETCH_RECORDS_MAX = 500
FOLLOW_WAIT_MS_DEFAULT = 1_000
# Shortest long-poll per partition in follow mode, ms.
FOLLOW_WAIT_MS_MIN = 10
# Redirects followed for one request before backing off (stale metadata can ping-pong).
LEADER_HOPS_MAX = 3
LEADER_RETRY_TIMEOUT_MS = 30_000
RETRY_BACKOFF_MS_MIN = 100
RETRY_BACKOFF_MS_MAX = 2_000
# Codes that mean "leadership is moving": retry, at the bootstrap nodes, after a pause.
RETRIABLE_CODES = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "BROKER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "REQUEST_TIMED_OUT",
        "CLUSTER_UNREACHABLE",
    }
)
OUTPUT_FORMATS = ("value", "json", "kv")
# records_json.READ_FORMATS, repeated so the CLI starts without the record codec
# (a test keeps the two equal).
READ_FORMATS = ("auto", "json", "string", "base64")
BATCH = "application/vnd.lograft.batch"


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
        dest="output",
        choices=OUTPUT_FORMATS,
        default="value",
        help="value: the value (default); json: one JSON object per record; kv: key<TAB>value",
    )
    p.add_argument(
        "--key-format", choices=READ_FORMATS, default="auto", help="how the server renders keys"
    )
    p.add_argument(
        "--value-format",
        choices=READ_FORMATS,
        default="auto",
        help="how the server renders values (auto: JSON if it parses, else text, else base64)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=positive_int,
        default=FOLLOW_WAIT_MS_DEFAULT,
        metavar="MS",
        help=f"--follow: longest wait for new records per round (default {FOLLOW_WAIT_MS_DEFAULT})",
    )
    add_connection_args(p)
    p.set_defaults(func=cmd_consume, cmd_name="consume")


# -- talking to partition leaders ---------------------------------------------------------------


@dataclass(slots=True)
class Cursor:
    partition: int
    offset: int = 0
    end: int | None = None  # without --follow: stop here (the HW seen at the start)
    leader_url: str | None = None  # None: ask a bootstrap node


class LeaderClient:
    """GETs for one topic's partitions, sent to each partition's leader."""

    def __init__(
        self,
        client: HttpClient,
        topic: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.topic = topic
        self.sleep = sleep
        self.clock = clock

    def path(self, partition: int, what: str) -> str:
        return f"/v1/topics/{urllib.parse.quote(self.topic, safe='')}/partitions/{partition}/{what}"

    def get(
        self,
        cur: Cursor,
        what: str,
        query: dict[str, Any],
        *,
        extra_timeout_ms: int = 0,
        accept: str = JSON,
    ) -> Reply:
        deadline = self.clock() + LEADER_RETRY_TIMEOUT_MS / 1000
        backoff_ms = RETRY_BACKOFF_MS_MIN
        while True:
            try:
                return self._follow_redirects(cur, what, query, extra_timeout_ms, accept)
            except LograftError as exc:
                if exc.code not in RETRIABLE_CODES or self.clock() >= deadline:
                    raise
                if isinstance(exc, ClusterUnreachableError) and cur.leader_url is None:
                    raise  # every bootstrap node is down: say so now
            cur.leader_url = None
            self.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MS_MAX)

    def get_json(self, cur: Cursor, what: str, query: dict[str, Any], **kwargs: Any) -> Any:
        return self.get(cur, what, query, **kwargs).body

    def _follow_redirects(
        self, cur: Cursor, what: str, query: dict[str, Any], extra_timeout_ms: int, accept: str
    ) -> Reply:
        for _hop in range(LEADER_HOPS_MAX + 1):
            reply = self.client.send(
                "GET",
                self.path(cur.partition, what),
                query=query,
                base=cur.leader_url,
                extra_timeout_ms=extra_timeout_ms,
                accept=accept,
            )
            if reply.status < 400:
                return reply
            exc = decode_error(reply.status, reply.body, reply.url)
            url = exc.details.get("leader_url")
            if not isinstance(exc, NotLeaderOrFollowerError) or not isinstance(url, str):
                raise exc
            if not url or url.rstrip("/") == cur.leader_url:
                raise exc
            cur.leader_url = url.rstrip("/")
        raise NotLeaderOrFollowerError(
            f"{self.topic}-{cur.partition}: still not at the leader after "
            f"{LEADER_HOPS_MAX} redirects (metadata is moving)"
        )

    def next_batch_offset(self, cur: Cursor) -> int:
        """The offset after the batch holding `cur.offset`, read from a raw fetch's
        X-Lograft-Next-Offset (the JSON answer cannot step over a batch whose tail
        records were compacted away)."""
        reply = self.get(cur, "records", {"offset": cur.offset, "max_bytes": 1}, accept=BATCH)
        return int(reply.headers.get("x-lograft-next-offset", cur.offset))


# -- the command --------------------------------------------------------------------------------


def cmd_consume(args: argparse.Namespace, streams: Streams) -> int:
    client = client_for(args)
    leaders = LeaderClient(client, args.topic)
    try:
        cursors = [
            _start(leaders, Cursor(p), args.start, args.follow)
            for p in _partitions(client, args.topic, args.partition)
        ]
        _consume(leaders, cursors, args, streams.stdout)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow ends: not a failure
    streams.stdout.flush()
    return EXIT_OK


def _partitions(client: HttpClient, topic: str, only: int | None) -> list[int]:
    doc = client.get(f"/v1/topics/{urllib.parse.quote(topic, safe='')}")
    numbers = sorted(int(p["partition"]) for p in doc.get("partitions") or [])
    if only is None:
        return numbers
    if only not in numbers:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has no partition {only}; it has {len(numbers)} "
            f"(0..{len(numbers) - 1})",
            topic=topic,
            partition=only,
        )
    return [only]


def _start(leaders: LeaderClient, cur: Cursor, start: StartAt, follow: bool) -> Cursor:
    query = {"timestamp": start.value} if start.kind == "timestamp" else {}
    doc = leaders.get_json(cur, "offsets", query)
    earliest, latest, leo = int(doc["earliest"]), int(doc["latest"]), int(doc["log_end_offset"])
    if start.kind == "earliest":
        cur.offset = earliest
    elif start.kind == "latest":
        cur.offset = latest
    elif start.kind == "timestamp":
        found = doc.get("offset_for_timestamp")
        cur.offset = int(found["offset"]) if found else latest
    else:
        if not earliest <= start.value <= leo:
            raise OffsetOutOfRangeError(
                f"{leaders.topic}-{cur.partition}: offset {start.value} is outside the log's "
                f"range [{earliest}, {leo}]",
                offset=start.value,
                log_start_offset=earliest,
                log_end_offset=leo,
            )
        cur.offset = start.value
    cur.end = None if follow else latest
    return cur


def _consume(
    leaders: LeaderClient, cursors: list[Cursor], args: argparse.Namespace, out: TextIO
) -> None:
    remaining: int | None = args.max_records
    active = [c for c in cursors if c.end is None or c.offset < c.end]
    idle_round = False
    while active and remaining != 0:
        wait_ms = 0
        if args.follow and idle_round:
            wait_ms = max(args.max_wait_ms // len(active), FOLLOW_WAIT_MS_MIN)
        got_any = False
        for cur in list(active):
            limit = FETCH_RECORDS_MAX if remaining is None else min(remaining, FETCH_RECORDS_MAX)
            records = _fetch(leaders, cur, limit, wait_ms, args)
            for rec in records:
                out.write(render(rec, args.output, leaders.topic) + "\n")
            out.flush()
            got_any = got_any or bool(records)
            if remaining is not None:
                remaining -= len(records)
                if remaining == 0:
                    return
            if cur.end is not None and cur.offset >= cur.end:
                active.remove(cur)
        idle_round = not got_any


def _fetch(
    leaders: LeaderClient, cur: Cursor, limit: int, wait_ms: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The next records of one partition (below its end); moves the cursor past them."""
    query = {
        "offset": cur.offset,
        "max_records": limit,
        "max_wait_ms": wait_ms,
        "format": args.value_format,
        "key_format": args.key_format,
    }
    doc = leaders.get_json(cur, "records", query, extra_timeout_ms=wait_ms)
    got = doc.get("records") or []
    records = [r for r in got if cur.end is None or r["offset"] < cur.end]
    next_offset = int(doc.get("next_offset", cur.offset))
    if len(records) < len(got):
        next_offset = cur.end if cur.end is not None else next_offset
    elif not got and next_offset == cur.offset < int(doc.get("high_watermark", 0)):
        next_offset = leaders.next_batch_offset(cur)
    if next_offset < cur.offset:
        raise LograftError(
            f"{leaders.topic}-{cur.partition}: the server moved the position back from "
            f"{cur.offset} to {next_offset}"
        )
    cur.offset = next_offset
    return records


# -- output -------------------------------------------------------------------------------------


def text(value: Any) -> str:
    """A rendered key or value as one line of text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def render(rec: dict[str, Any], output: str, topic: str) -> str:
    if output == "json":
        return orjson.dumps({"topic": topic, **rec}).decode()
    if output == "kv":
        return f"{text(rec.get('key'))}\t{text(rec.get('value'))}"
    return text(rec.get("value"))
