"""Website activity tracking: page views counted per page over 1-minute windows.

    .venv/bin/python -m lograft.pipelines.examples.page_views [--events 3000]

against the local cluster of `scripts/cluster.sh start` (`--bootstrap` for
another). The one command:

1. creates the topics `page-views` and `page-view-counts` if they are missing;
2. notes where `page-views` ends now and starts two streaming queries that
   read it from there: page views per page over 1-minute tumbling windows of
   the events' own time, with a 10-second watermark, in append mode (a
   window's count is written once, when the watermark passes the window's
   end). One query writes the counts through the lograft sink to
   `page-view-counts` (key: the page; value: JSON with window_start,
   window_end, page, views); the other prints them on the console;
3. produces `--events` page views to `page-views`: JSON `{"user", "page",
   "timestamp"}`, event times spread over 5 min 15 s from the start of the
   current minute, up to 3 s out of order (inside the watermark); each
   record's timestamp is its event time;
4. waits until `page-view-counts` holds every window the watermark has
   closed (all but the last, partial one), stops the queries, and prints
   the counts beside the same counts computed in plain Python from the
   generated events. It exits 1 if they differ.

`generate` only produces (`--rate N` events per second with the current
time, for watching `stream` live); `stream` only runs the queries, from the
end of `page-views`, until Ctrl-C.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from lograft.client import Producer, serializers
from lograft.pipelines.examples import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

EVENTS_TOPIC = "page-views"
COUNTS_TOPIC = "page-view-counts"
WINDOW_MS = 60_000
WATERMARK_MS = 10_000
# Events come at most this far out of order: well inside the watermark, so none is late.
MAX_DISORDER_MS = 3_000
SPAN_MS = 5 * 60_000 + 15_000
PAGES = ("/", "/pricing", "/docs", "/docs/quickstart", "/blog", "/signup")
PAGE_WEIGHTS = (30, 10, 20, 15, 15, 10)
EVENT_SCHEMA = "user STRING, page STRING, timestamp TIMESTAMP"

WindowKey = tuple[int, str]  # (window start in ms since the epoch, page)


@dataclass(frozen=True)
class PageView:
    user: str
    page: str
    timestamp_ms: int

    def to_json(self) -> dict[str, str]:
        return {"user": self.user, "page": self.page, "timestamp": iso_ms(self.timestamp_ms)}


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def parse_iso_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def make_events(count: int, start_ms: int, span_ms: int = SPAN_MS, seed: int = 1) -> list[PageView]:
    """`count` page views spread evenly over [start_ms, start_ms + span_ms), each moved by up
    to MAX_DISORDER_MS either way (never before start_ms), in production order."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        at = start_ms + i * span_ms // count + rng.randint(-MAX_DISORDER_MS, MAX_DISORDER_MS)
        page = rng.choices(PAGES, PAGE_WEIGHTS)[0]
        events.append(PageView(f"user-{rng.randint(1, 250)}", page, max(at, start_ms)))
    return events


def closed_window_counts(events: list[PageView]) -> dict[WindowKey, int]:
    """The counts the streaming query writes, computed in plain Python: views per (1-minute
    window, page), for the windows the watermark (latest event time - 10 s) has passed."""
    if not events:
        return {}
    watermark = max(e.timestamp_ms for e in events) - WATERMARK_MS
    counts: Counter[WindowKey] = Counter()
    for e in events:
        start = e.timestamp_ms - e.timestamp_ms % WINDOW_MS
        if start + WINDOW_MS <= watermark:
            counts[(start, e.page)] += 1
    return dict(counts)


def produce(bootstrap: str, events: list[PageView], rate: float | None = None) -> None:
    """Send the events (key: the user, so one user's views stay in order on one partition)."""
    with Producer(
        bootstrap, key_serializer=serializers.str, value_serializer=serializers.json
    ) as producer:
        began = time.monotonic()
        for n, event in enumerate(events):
            if rate:
                time.sleep(max(0.0, began + n / rate - time.monotonic()))
            producer.send(
                EVENTS_TOPIC, event.to_json(), key=event.user, timestamp_ms=event.timestamp_ms
            )
        producer.flush()


# -- the Spark side -------------------------------------------------------------------------


def page_view_counts(spark: SparkSession, bootstrap: str, starting_offsets: str) -> DataFrame:
    """The streaming DataFrame of closed-window counts: window, page, count."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("lograft")
        .option("bootstrap", bootstrap)
        .option("subscribe", EVENTS_TOPIC)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    views = (
        events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .where(F.col("page").isNotNull() & F.col("timestamp").isNotNull())
    )
    return (
        views.withWatermark("timestamp", f"{WATERMARK_MS // 1000} seconds")
        .groupBy(F.window("timestamp", f"{WINDOW_MS // 1000} seconds"), "page")
        .count()
    )


def start_queries(
    counts: DataFrame, bootstrap: str, checkpoints: Path, console: bool = True
) -> list[StreamingQuery]:
    """One query writing the counts through the lograft sink, one printing them."""
    from pyspark.sql import functions as F

    record = counts.select(
        F.col("page").alias("key"),
        F.to_json(
            F.struct(
                F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"),
                "page",
                F.col("count").alias("views"),
            )
        ).alias("value"),
    )
    queries = [
        record.writeStream.format("lograft")
        .outputMode("append")
        .option("bootstrap", bootstrap)
        .option("topic", COUNTS_TOPIC)
        .option("checkpointLocation", str(checkpoints / "sink"))
        .queryName("page_view_counts_to_lograft")
        .start()
    ]
    if console:
        queries.append(
            counts.select(
                F.col("window.start").alias("window_start"), "page", F.col("count").alias("views")
            )
            .writeStream.format("console")
            .outputMode("append")
            .option("truncate", "false")
            .option("numRows", "1000")
            .option("checkpointLocation", str(checkpoints / "console"))
            .queryName("page_view_counts_to_console")
            .start()
        )
    return queries


def written_counts(bootstrap: str, start: dict[int, int]) -> dict[WindowKey, int]:
    """What the sink query has written to page-view-counts since `start`."""
    until = common.end_offsets(bootstrap, COUNTS_TOPIC)
    out: dict[WindowKey, int] = {}
    for record in common.read_records(bootstrap, COUNTS_TOPIC, start, until):
        doc = record.value
        out[(parse_iso_ms(doc["window_start"]), doc["page"])] = int(doc["views"])
    return out


def run_demo(
    spark: SparkSession,
    bootstrap: str,
    events: list[PageView],
    checkpoints: Path,
    *,
    timeout_s: float = 300.0,
    console: bool = True,
) -> tuple[dict[WindowKey, int], dict[WindowKey, int]]:
    """Start the queries, produce the events, wait for every closed window's count in
    page-view-counts; (counts Spark wrote, counts computed in plain Python)."""
    common.ensure_topic(bootstrap, EVENTS_TOPIC)
    common.ensure_topic(bootstrap, COUNTS_TOPIC)
    events_start = common.end_offsets(bootstrap, EVENTS_TOPIC)
    counts_start = common.end_offsets(bootstrap, COUNTS_TOPIC)
    expected = closed_window_counts(events)
    counts = page_view_counts(spark, bootstrap, common.offsets_json(EVENTS_TOPIC, events_start))
    queries = start_queries(counts, bootstrap, checkpoints, console=console)
    try:
        produce(bootstrap, events)
        deadline = time.monotonic() + timeout_s
        while True:
            for query in queries:
                if query.exception() is not None:
                    raise RuntimeError(f"query {query.name} failed: {query.exception()}")
            written = written_counts(bootstrap, counts_start)
            if expected.keys() <= written.keys():
                # Let every query finish its batch (the console prints its last one), so
                # stop() interrupts none midway.
                for query in queries:
                    query.processAllAvailable()
                return written, expected
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"after {timeout_s:.0f} s page-view-counts has {len(written)} of the "
                    f"{len(expected)} closed windows"
                )
            time.sleep(1.0)
    finally:
        for query in queries:
            query.stop()


def report(written: dict[WindowKey, int], expected: dict[WindowKey, int]) -> bool:
    rows = []
    for key in sorted(expected.keys() | written.keys()):
        got, want = written.get(key), expected.get(key)
        start = datetime.fromtimestamp(key[0] / 1000, UTC).strftime("%Y-%m-%d %H:%M")
        rows.append([start, key[1], got, want, "ok" if got == want else "DIFFERENT"])
    print()
    common.print_table(rows, ["window (UTC)", "page", "views (Spark)", "views (Python)", ""])
    same = written == expected
    print(
        f"\n{len(expected)} window counts: "
        + ("Spark's match plain Python's" if same else "Spark's DIFFER from plain Python's")
    )
    return same


# -- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = common.example_parser(__doc__)
    parser.add_argument("command", nargs="?", default="run", choices=("run", "generate", "stream"))
    parser.add_argument("--events", type=int, default=3000, help="page views to produce")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rate", type=float, default=None, help="generate: events per second, current time"
    )
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument("--timeout", type=float, default=300.0, help="run: seconds to wait")
    parser.add_argument("--no-console", action="store_true", help="run: no console query")
    args = parser.parse_args(argv)
    now_ms = int(time.time() * 1000)

    if args.command == "generate":
        common.ensure_topic(args.bootstrap, EVENTS_TOPIC)
        if args.rate:
            span = int(args.events / args.rate * 1000)
            events = make_events(args.events, now_ms, span, args.seed)
        else:
            events = make_events(args.events, now_ms - now_ms % WINDOW_MS, seed=args.seed)
        produce(args.bootstrap, events, args.rate)
        print(f"produced {len(events)} page views to {EVENTS_TOPIC}")
        return 0

    spark = common.spark_session("page-views", args.master)
    with tempfile.TemporaryDirectory(prefix="page-views-") as tmp:
        checkpoints = args.checkpoints or Path(tmp)
        if args.command == "stream":
            common.ensure_topic(args.bootstrap, EVENTS_TOPIC)
            common.ensure_topic(args.bootstrap, COUNTS_TOPIC)
            start = common.offsets_json(
                EVENTS_TOPIC, common.end_offsets(args.bootstrap, EVENTS_TOPIC)
            )
            queries = start_queries(
                page_view_counts(spark, args.bootstrap, start), args.bootstrap, checkpoints
            )
            try:
                spark.streams.awaitAnyTermination()
            except KeyboardInterrupt:
                pass
            finally:
                for query in queries:
                    query.stop()
            return 0
        events = make_events(args.events, now_ms - now_ms % WINDOW_MS, seed=args.seed)
        written, expected = run_demo(
            spark,
            args.bootstrap,
            events,
            checkpoints,
            timeout_s=args.timeout,
            console=not args.no_console,
        )
    return 0 if report(written, expected) else 1


if __name__ == "__main__":
    sys.exit(main())
