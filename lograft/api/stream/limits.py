"""The streaming endpoint's limits: `[stream]` in the node config, with its
`[stream.source]` and `[stream.group]` tables.

Typed Records (`lograft.typed`): every value a positive integer, unknown keys
refused with the known ones listed. This module imports nothing of the stream
code, so the node config can compose the section without importing it.
"""

from __future__ import annotations

from lograft.typed import Positive, Record


class SourceLimits(Record):
    """`[stream.source]` in the node config."""

    # Longest long-poll of one fetch for a stream, ms (a local one is also capped
    # by the broker's fetch_wait_max_ms).
    fetch_wait_ms: Positive = 5_000
    # Pause between attempts after a retriable error, ms.
    retry_backoff_ms: Positive = 200
    # A partition failing retriably for this long ends the stream with the error, ms.
    retry_timeout_ms: Positive = 60_000
    # A request to a remote leader may take its long-poll (if any) plus this long, ms.
    remote_timeout_margin_ms: Positive = 10_000


class GroupLimits(Record):
    """`[stream.group]` in the node config."""

    # How often a group stream commits its delivered positions by default, ms
    # (Kafka's auto.commit.interval.ms).
    commit_interval_ms_default: Positive = 5_000
    # The shortest commit interval a client may ask for, ms.
    commit_interval_ms_min: Positive = 100
    # One call to the coordinator, retries on a moving coordinator included, ms.
    request_timeout_ms: Positive = 10_000
    # Pause between retries of a call to the coordinator, ms.
    retry_backoff_ms: Positive = 200
    # When the stream ends: the last commit and the leave together, ms.
    leave_timeout_ms: Positive = 5_000


class StreamLimits(Record):
    """`[stream]` in the node config: the streaming endpoint's limits.

        [stream]
        streams_max = 200
        [stream.source]
        fetch_wait_ms = 2000
        [stream.group]
        commit_interval_ms_default = 1000

    Every value is a positive integer; an unknown key is refused with the
    list of known ones, so a typo stops the node instead of being ignored.
    """

    # Streams one node serves at once.
    streams_max: Positive = 100
    # Streams one authenticated principal may hold on one node at once, so that
    # one caller cannot take every slot of streams_max (unauthenticated callers,
    # all User:ANONYMOUS, share streams_max only).
    streams_per_principal_max: Positive = 25
    # Raw batch bytes one round of fetches reads, all partitions together, bytes.
    chunk_bytes_default: Positive = 256 * 1024
    # Largest `max_bytes` a client may ask for, bytes.
    chunk_bytes_max: Positive = 1024 * 1024
    # Rendered events written to the client at once, bytes.
    write_block_bytes: Positive = 64 * 1024
    # A stream that wrote nothing for this long sends `: keep-alive`, ms.
    heartbeat_interval_ms: Positive = 15_000
    # A running stream whose client took none of the bytes sent to it for this long
    # is closed (Linux TCP_USER_TIMEOUT): a client gone without closing (a dropped
    # network) would otherwise hold its slot until TCP gives up, ~15 minutes, ms.
    client_stalled_timeout_ms: Positive = 300_000
    # How often an idle stream checks that its client is still connected, ms.
    liveness_check_ms: Positive = 1_000
    # Finding a stream's start positions takes at most this long; retriable errors
    # (no leader yet) are retried within it, ms.
    start_retry_timeout_ms: Positive = 10_000
    # Connections for this node's streams' short calls to other nodes (start offsets,
    # group coordinator calls), all streams together.
    remote_connections_max: Positive = 64
    # Long-polls (one connection each) this node's streams keep in flight to one
    # other leader, all streams together; each carries many partitions' reads.
    remote_polls_per_leader_max: Positive = 2
    # Partition reads one such long-poll carries (more wait for the next one); also
    # the most this node serves in one request from another node.
    remote_poll_partitions_max: Positive = 1_000
    # Batch bytes one long-poll's answer brings, all its reads together (the first
    # read with data may exceed it by one batch); also the most this node serves, bytes.
    remote_poll_bytes_max: Positive = 4 * 1024 * 1024
    source: SourceLimits = SourceLimits()
    group: GroupLimits = GroupLimits()
