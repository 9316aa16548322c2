"""Named limits of the active controller, units last, with the defaults' reasons.

Failure detection budget (goal: a dead partition leader is replaced in about two
seconds on a LAN, without fencing brokers that are merely slow):

- `broker_heartbeat_interval_ms = 500`: a heartbeat is a tiny HTTP request; two
  per second per broker costs nothing on a LAN and gives the session timeout
  three chances.
- `broker_session_timeout_ms = 1500` = three heartbeat intervals. A broker is
  fenced only after missing two heartbeats in a row and most of a third, so one
  lost request, a retried TCP connection or a few hundred ms of GC or event-loop
  stall does not fence it (no flapping); a LAN round trip is well under 1 ms,
  so the margin is all for stalls. Kafka's defaults (2 s / 9 s) have the same
  ~3-4x ratio, sized for WANs and JVM pauses.
- `fence_check_interval_ms = 250`: how often the runtime calls
  `fence_expired_brokers`; adds at most 250 ms to detection.

Worst case from a broker's death to new leaders in the committed metadata:
1500 (session) + 250 (check) + a Raft commit (a few ms on a LAN) ~= 1.8 s; the
new leaders start serving when they next apply the metadata log, tens of ms
later. A controller failover does not fence a live broker by itself: the new
active controller gives every broker a fresh session (`sessions_after_failover`),
except the one on the former Raft leader's node, whose session is dated from
the last Raft message received from it (sessions.py says why that is safe).

The other limits bound what one request may cost (records in one batch, work
per rebalance round).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from lograft.typed import FieldError, Positive, Record


class ControllerConfig(Record):
    """`[controller]` in the node config; built with `lograft.typed.build`."""

    broker_heartbeat_interval_ms: Positive = 500
    broker_session_timeout_ms: Positive = 1500
    fence_check_interval_ms: Positive = 250
    # Kafka's leader.imbalance.per.broker.percentage (10%): a broker whose share
    # of preferred partitions led by someone else exceeds this is rebalanced.
    leader_imbalance_ratio_max: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.10
    # How long an unclean election among several usable replicas waits for
    # their log end reports (sent every broker_heartbeat_interval_ms) before
    # electing the longest log among those that reported (none: the last
    # known leader, then preferred order). Ten report intervals: a report
    # lost or late once or twice still counts; an unclean election is an
    # outage already, and this bounds how much longer it lasts.
    unclean_election_report_wait_ms: Positive = 5_000
    # Kafka checks every 300 s; a small cluster recovers balance sooner with 30 s,
    # and the check is one pass over the image.
    leader_imbalance_check_interval_ms: Positive = 30_000
    # The same check also runs after any metadata change (a restarted broker
    # back in the ISR of partitions it prefers is one), so that it leads them
    # again seconds after it caught up, not up to a whole check interval
    # later with every request to it forwarded; at most once per this
    # interval, so a broker that keeps dropping out and catching up moves
    # leaderships at most this often. Redpanda rebalances soon after a node
    # returns; Kafka waits for its periodic check.
    leader_balance_min_interval_ms: Positive = 5_000
    # Bounds one rebalance batch; the next round moves the rest.
    preferred_elections_per_round_max: Positive = 1_000
    # Kafka's block size for producer-id allocation.
    producer_id_block_size: Positive = 1_000
    # A topic is created in one atomic batch of 1 + partitions (+ configs)
    # records; this bounds that batch (~150 bytes per partition record).
    partitions_per_topic_max: Positive = 2_000
    configs_per_request_max: Positive = 100
    config_value_bytes_max: Positive = 4_096
    # Security metadata (issue 12). ACL bindings one create or delete request
    # may add or remove (one atomic batch; ~250 bytes a record).
    acls_per_request_max: Positive = 1_000
    # ACL bindings the cluster holds at most (every node keeps them in memory
    # and every snapshot writes them; the authorizer was measured at 10,000).
    acls_max: Positive = 10_000
    # Users with a SCRAM credential, at most.
    scram_users_max: Positive = 10_000
    # Client quota entities (user and/or client id) with a quota, at most.
    quota_entities_max: Positive = 10_000

    def __post_init__(self) -> None:
        # A session shorter than two heartbeats would fence a broker on one lost heartbeat.
        if self.broker_session_timeout_ms < 2 * self.broker_heartbeat_interval_ms:
            raise FieldError(
                "broker_session_timeout_ms", "must be at least 2 * broker_heartbeat_interval_ms"
            )
        # Shorter than one report interval, the wait would end before any report.
        if self.unclean_election_report_wait_ms < self.broker_heartbeat_interval_ms:
            raise FieldError(
                "unclean_election_report_wait_ms", "must be at least broker_heartbeat_interval_ms"
            )

    @property
    def refused_overdue_ms(self) -> int:
        """How old the last heartbeat of a broker whose node's Raft port
        refused must be before that refusal fences it (sessions.py): one and
        a half heartbeat intervals, 750 ms at the defaults. A live broker
        whose Raft port only looks closed (a proxy that refuses, a firewall's
        REJECT rule) keeps heartbeating and is never fenced by it; a dead one
        is fenced this long after its last heartbeat, not a session after."""
        return self.broker_heartbeat_interval_ms * 3 // 2
