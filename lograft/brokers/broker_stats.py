"""What the broker counts on its hot paths, as plain integers read at scrape time.

Kafka's `BrokerTopicStats`: bytes and records in and out, produce and fetch
requests and their failures, per topic; plus the broker-wide ISR shrinks and
expands and log flush (fsync) latency. Incrementing one is a dict lookup and
an integer addition on the event loop (no lock, no label lookup, no
prometheus-client object): the exposition (api/metrics/) reads the numbers
when it is scraped.

Cardinality: at most `topics_max` topics have counters of their own; the
counts of any topic past that go to one `OTHER_TOPIC` entry, so a client
creating thousands of topics cannot grow the exposition without bound. A
deleted topic's counters go when `forget` is called with the topics still
there (the broker collector does it at each scrape), freeing its slot.

Invariants: every counter only grows while its entry lives; all counts are
written on the event loop (the flush histogram, observed by storage threads,
has its own lock).
"""

from __future__ import annotations

from collections.abc import Collection

from lograft.histogram import LockedBuckets

__all__ = ["OTHER_TOPIC", "BrokerStats", "TopicStats"]

# The label of the counts of topics past `topics_max`.
OTHER_TOPIC = "__other__"


class TopicStats:
    """One topic's counters (Kafka's BrokerTopicMetrics)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "fetch_failed",
        "fetch_requests",
        "produce_failed",
        "produce_requests",
        "records_in",
        "records_out",
        "replication_bytes_in",
        "replication_bytes_out",
    )

    def __init__(self) -> None:
        # Appended as leader (produce), bytes and records.
        self.bytes_in = 0
        self.records_in = 0
        # Read from the log for consumers (fetch, stream reads), bytes;
        # records sent to clients by this node (counted where it renders or
        # sends them: api/).
        self.bytes_out = 0
        self.records_out = 0
        # Replication: appended as follower, and read for followers, bytes.
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        # Per partition of a produce or a consumer read on the leader.
        self.produce_requests = 0
        self.produce_failed = 0
        self.fetch_requests = 0
        self.fetch_failed = 0


class BrokerStats:
    def __init__(self, topics_max: int) -> None:
        if topics_max < 1:
            raise ValueError(f"topics_max must be >= 1, got {topics_max}")
        self.topics_max = topics_max
        self._topics: dict[str, TopicStats] = {}
        self.other = TopicStats()
        # ISR changes the controller accepted for partitions led here.
        self.isr_shrinks = 0
        self.isr_expands = 0
        # fsyncs of logs (flush at roll or interval, group commits), seconds.
        self.flush_seconds = LockedBuckets()
        # Followers' WebSockets of replica fetches open to this leader, and
        # the fetches answered over them (api/replica_stream.py).
        self.replica_streams_open = 0
        self.replica_stream_fetches = 0

    def topic(self, name: str) -> TopicStats:
        stats = self._topics.get(name)
        if stats is not None:
            return stats
        if len(self._topics) >= self.topics_max:
            return self.other
        stats = self._topics[name] = TopicStats()
        return stats

    def topics(self) -> dict[str, TopicStats]:
        """Each topic's counters by name; `OTHER_TOPIC` when any topic overflowed."""
        out = dict(self._topics)
        if any(getattr(self.other, slot) for slot in TopicStats.__slots__):
            out[OTHER_TOPIC] = self.other
        return out

    def forget(self, existing: Collection[str]) -> None:
        """Drop the counters of topics not in `existing` (deleted topics)."""
        for name in [n for n in self._topics if n not in existing]:
            del self._topics[name]
