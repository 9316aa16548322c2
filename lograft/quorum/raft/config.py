"""Configuration of the Raft adapter: identity, peers, persistence and limits.

A `lograft.typed.Record`: built from data with `lograft.typed.build`, which
checks each field's bounds and then the invariants `RaftConfig.__post_init__`
keeps (a bad value is an `InvalidConfigError` naming the key):

- A node id is a short token of `[A-Za-z0-9_.-]` (1..64 chars). It never
  contains ':', so it cannot be mistaken for a `host:port` dial address, nor
  for the `observer:` handshake prefix used by read-only nodes.
- Identity is separate from addressing. `peers` maps a peer's node id to the
  address *this* node dials to reach it; two nodes may dial the same peer at
  different addresses (e.g. one toxiproxy proxy per node pair).
- A voter's `peers` names every other voter and never itself; an observer
  (`voter=False`, a broker-only node) names every voter and has no
  `listen_address`, because observers only dial out.
- Timings obey pysyncobj's own rules (checked here so that the error names our
  key rather than failing an `assert` inside pysyncobj):
  heartbeat * 3 < election min < election max <= connection timeout,
  heartbeat < leader fallback, early election delay min <= max.
- Every limit carries its unit last (`append_timeout_ms`, `max_batch_bytes`).
- A password is required (voters and observers alike): pysyncobj unpickles
  every frame it receives, and only with a password must a frame pass Fernet
  authentication first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from lograft.errors import InvalidConfigError
from lograft.typed import FieldError, Positive, Record

NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

JOURNAL_FILE_NAME = "raft.journal"
SNAPSHOT_FILE_NAME = "raft.snapshot"


def split_address(address: object) -> tuple[str, int] | None:
    """`host:port` (IPv6 as `[::1]:port`) as (host, port), or None if it is not one."""
    if not isinstance(address, str) or ":" not in address:
        return None
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port_text.isascii() or not port_text.isdigit():
        return None
    if not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)


def parse_address(address: str, key: str = "address") -> tuple[str, int]:
    """Split `host:port` (IPv6 as `[::1]:port`); raise InvalidConfigError naming `key`."""
    parts = split_address(address)
    if parts is None:
        raise InvalidConfigError(f"{key}: expected host:port, got {address!r}", key=key)
    return parts


class RaftTuning(Record):
    """Raft timings and bounds: the settings `[raft]` in the node config may set."""

    # Raft timings. Defaults replace a dead leader in about 2-4 s. The
    # election timeout is 2.5x the worst Raft-thread pause measured on a
    # loaded 2,000-partition node (798 ms at load average 23,
    # scripts/soak_quorum.py; docs/quorum.md "A busy event loop"), as
    # KRaft's followers wait 2 s (controller.quorum.fetch.timeout.ms).
    # pysyncobj's 400-1400 ms re-elected the controller twice in 10 minutes.
    election_timeout_min_ms: Positive = 2000
    election_timeout_max_ms: Positive = 3500
    heartbeat_interval_ms: Positive = 100
    # A leader that has heard from no majority for this long steps down, so an
    # isolated leader stops claiming leadership soon after the others elect.
    leader_fallback_timeout_ms: Positive = 2000
    connection_timeout_ms: Positive = 3500
    connection_retry_ms: Positive = 1000
    tick_interval_ms: Positive = 50
    # True: send each entry at once (low commit latency, metadata is low volume).
    # False: pysyncobj's batching, one append_entries per heartbeat interval.
    send_entries_immediately: bool = True
    # True: a node acknowledges (and a leader counts itself for) only entries
    # fsynced to its journal; entries of one tick share one fsync. False: the
    # page cache only, as stock pysyncobj (a power cut can lose acknowledged
    # metadata). See docs/quorum.md "What is synced to disk".
    journal_fsync: bool = True

    # A follower whose link to the leader dropped probes the leader's Raft
    # port; refused (the process is gone) and a majority agreeing (pre-vote)
    # -> an election after a random delay in this range instead of at the
    # election timeout (early_election.py). The spread keeps the two
    # survivors of three voters from splitting the vote; a range at or past
    # election_timeout_min_ms makes the rule moot.
    early_election_delay_min_ms: Positive = 50
    early_election_delay_max_ms: Positive = 300
    # A candidate of such an early election that has not won when its
    # deadline comes round (a split vote: both survivors stood) stands
    # again after a new random delay in that range, at most this many
    # times per lost leader; then pysyncobj's election timeout applies.
    early_election_retries_max: Positive = 3
    # That probe (one non-blocking connect) gives up after this: no answer is
    # not a refusal, the election timeout stays.
    peer_probe_timeout_ms: Positive = 500
    # A probe that connects while the link stays down is tried again this
    # many more times, this far apart (peer_loss.py: a killed process's
    # listening socket may outlive its connections by a moment), ms.
    peer_probe_retries: Annotated[int, Meta(ge=0)] = 3
    peer_probe_retry_interval_ms: Positive = 100

    # Log compaction: a full snapshot is written after this many entries or time.
    log_compaction_min_entries: Annotated[int, Meta(ge=2)] = 5000
    log_compaction_min_time_ms: Positive = 300_000

    # Bounds.
    max_batch_bytes: Positive = 1 << 20
    max_pending_appends: Positive = 1000
    max_offset_waiters: Positive = 10_000
    max_subscribers: Positive = 1000
    append_timeout_ms: Positive = 5000
    bind_timeout_ms: Positive = 5000
    start_timeout_ms: Positive = 30_000
    # A connection accepted on the Raft port whose peer has not yet proven the
    # password (one round trip, a few hundred bytes) is dropped past any of
    # these; see raft_handshake.
    handshake_timeout_ms: Positive = 5000
    max_handshake_bytes: Positive = 64 * 1024
    max_handshake_connections: Positive = 64

    def __post_init__(self) -> None:
        rules = [
            (
                self.election_timeout_min_ms > 3 * self.heartbeat_interval_ms,
                "election_timeout_min_ms",
                "must exceed 3 * heartbeat_interval_ms",
            ),
            (
                self.election_timeout_max_ms > self.election_timeout_min_ms,
                "election_timeout_max_ms",
                "must exceed election_timeout_min_ms",
            ),
            (
                self.connection_timeout_ms >= self.election_timeout_max_ms,
                "connection_timeout_ms",
                "must be at least election_timeout_max_ms",
            ),
            (
                self.early_election_delay_max_ms >= self.early_election_delay_min_ms,
                "early_election_delay_max_ms",
                "must be at least early_election_delay_min_ms",
            ),
            (
                self.leader_fallback_timeout_ms > self.heartbeat_interval_ms,
                "leader_fallback_timeout_ms",
                "must exceed heartbeat_interval_ms",
            ),
        ]
        for ok, key, rule in rules:
            if not ok:
                raise FieldError(key, rule)


class RaftConfig(RaftTuning, kw_only=True):
    """Identity, peers and password of this node's Raft adapter, and its tuning."""

    node_id: str
    data_dir: Path
    # Peer node id -> the address this node dials to reach it.
    peers: dict[str, str]
    # Required: pysyncobj unpickles what arrives on a Raft link, and only a
    # password (Fernet authentication before unpickling) keeps strangers out.
    password: str
    listen_address: str | None = None
    voter: bool = True

    def __post_init__(self) -> None:
        _check_node_id(self.node_id, "node_id")
        if not isinstance(self.data_dir, Path):
            msgspec.structs.force_setattr(self, "data_dir", Path(self.data_dir))
        self._check_peers()
        self._check_listen_address()
        super().__post_init__()
        if not isinstance(self.password, str) or not self.password:
            raise FieldError(
                "password",
                "required, a non-empty string: without one, anyone who reaches "
                "the Raft port runs code on this node",
            )

    def _check_peers(self) -> None:
        for peer_id, address in self.peers.items():
            _check_node_id(peer_id, f"peers.{peer_id}")
            if split_address(address) is None:
                raise FieldError(f"peers.{peer_id}", f"expected host:port, got {address!r}")
        if self.node_id in self.peers:
            raise FieldError("peers", "must not name this node itself")
        if not self.voter and not self.peers:
            raise FieldError("peers", "an observer needs at least one voter")

    def _check_listen_address(self) -> None:
        if self.voter:
            if self.listen_address is None:
                raise FieldError("listen_address", "required for a voter")
            if split_address(self.listen_address) is None:
                raise FieldError(
                    "listen_address", f"expected host:port, got {self.listen_address!r}"
                )
        elif self.listen_address is not None:
            raise FieldError("listen_address", "an observer only dials out; leave it unset")

    @property
    def journal_path(self) -> Path:
        return self.data_dir / JOURNAL_FILE_NAME

    @property
    def snapshot_path(self) -> Path:
        return self.data_dir / SNAPSHOT_FILE_NAME

    @property
    def voter_ids(self) -> tuple[str, ...]:
        """All voters of the quorum, sorted: self and peers for a voter, peers for an observer."""
        ids = set(self.peers)
        if self.voter:
            ids.add(self.node_id)
        return tuple(sorted(ids))


def _check_node_id(node_id: object, key: str) -> None:
    if not isinstance(node_id, str) or not NODE_ID_PATTERN.match(node_id):
        raise FieldError(key, f"node id must match {NODE_ID_PATTERN.pattern}, got {node_id!r}")
