"""Configuration of the Raft adapter: identity, peers, persistence and limits.

Invariants kept by `RaftConfig.__post_init__` (a bad value raises
`InvalidConfigError` naming the key):

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
  heartbeat < leader fallback.
- Every limit carries its unit last (`append_timeout_ms`, `max_batch_bytes`).
- A password is required (voters and observers alike): pysyncobj unpickles
  every frame it receives, and only with a password must a frame pass Fernet
  authentication first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from lograft.errors import InvalidConfigError

NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

JOURNAL_FILE_NAME = "raft.journal"
SNAPSHOT_FILE_NAME = "raft.snapshot"


def parse_address(address: str, key: str = "address") -> tuple[str, int]:
    """Split `host:port` (IPv6 as `[::1]:port`); raise InvalidConfigError naming `key`."""
    if not isinstance(address, str) or ":" not in address:
        raise InvalidConfigError(f"{key}: expected host:port, got {address!r}", key=key)
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidConfigError(f"{key}: expected host:port, got {address!r}", key=key)
    return host, int(port_text)


def validate_node_id(node_id: object, key: str) -> str:
    if not isinstance(node_id, str) or not NODE_ID_PATTERN.match(node_id):
        raise InvalidConfigError(
            f"{key}: node id must match {NODE_ID_PATTERN.pattern}, got {node_id!r}", key=key
        )
    return node_id


@dataclass(frozen=True)
class RaftConfig:
    node_id: str
    data_dir: Path
    peers: Mapping[str, str]
    # Required: pysyncobj unpickles what arrives on a Raft link, and only a
    # password (Fernet authentication before unpickling) keeps strangers out.
    password: str
    listen_address: str | None = None
    voter: bool = True

    # Raft timings. Defaults replace a dead leader in about 0.5-2 s on a LAN.
    election_timeout_min_ms: int = 400
    election_timeout_max_ms: int = 1400
    heartbeat_interval_ms: int = 100
    # A leader that has heard from no majority for this long steps down, so an
    # isolated leader stops claiming leadership soon after the others elect.
    leader_fallback_timeout_ms: int = 2000
    connection_timeout_ms: int = 3500
    connection_retry_ms: int = 1000
    tick_interval_ms: int = 50
    # True: send each entry at once (low commit latency, metadata is low volume).
    # False: pysyncobj's batching, one append_entries per heartbeat interval.
    send_entries_immediately: bool = True

    # Log compaction: a full snapshot is written after this many entries or time.
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_ms: int = 300_000

    # Bounds.
    max_batch_bytes: int = 1 << 20
    max_pending_appends: int = 1000
    max_offset_waiters: int = 10_000
    max_subscribers: int = 1000
    append_timeout_ms: int = 5000
    bind_timeout_ms: int = 5000
    start_timeout_ms: int = 30_000
    # A connection accepted on the Raft port whose peer has not yet proven the
    # password (one round trip, a few hundred bytes) is dropped past any of
    # these; see raft_handshake.
    handshake_timeout_ms: int = 5000
    max_handshake_bytes: int = 64 * 1024
    max_handshake_connections: int = 64

    def __post_init__(self) -> None:
        validate_node_id(self.node_id, "node_id")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        object.__setattr__(self, "peers", dict(self.peers))
        self._check_peers()
        self._check_listen_address()
        self._check_positive_ints()
        self._check_timings()
        if not isinstance(self.password, str) or not self.password:
            raise InvalidConfigError(
                "password: required, a non-empty string: without one, anyone who reaches "
                "the Raft port runs code on this node",
                key="password",
            )

    def _check_peers(self) -> None:
        if not isinstance(self.peers, Mapping):
            raise InvalidConfigError("peers: expected a mapping of node id to address", key="peers")
        for peer_id, address in self.peers.items():
            validate_node_id(peer_id, f"peers.{peer_id}")
            parse_address(address, f"peers.{peer_id}")
        if self.node_id in self.peers:
            raise InvalidConfigError("peers: must not name this node itself", key="peers")
        if not self.voter and not self.peers:
            raise InvalidConfigError("peers: an observer needs at least one voter", key="peers")

    def _check_listen_address(self) -> None:
        if self.voter:
            if self.listen_address is None:
                raise InvalidConfigError(
                    "listen_address: required for a voter", key="listen_address"
                )
            parse_address(self.listen_address, "listen_address")
        elif self.listen_address is not None:
            raise InvalidConfigError(
                "listen_address: an observer only dials out; leave it unset",
                key="listen_address",
            )

    def _check_positive_ints(self) -> None:
        for f in fields(self):
            if f.name.endswith(("_ms", "_bytes", "_entries")) or f.name.startswith("max_"):
                value = getattr(self, f.name)
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise InvalidConfigError(
                        f"{f.name}: must be a positive integer, got {value!r}", key=f.name
                    )
        if self.log_compaction_min_entries < 2:
            raise InvalidConfigError(
                "log_compaction_min_entries: must be at least 2", key="log_compaction_min_entries"
            )

    def _check_timings(self) -> None:
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
                self.leader_fallback_timeout_ms > self.heartbeat_interval_ms,
                "leader_fallback_timeout_ms",
                "must exceed heartbeat_interval_ms",
            ),
        ]
        for ok, key, rule in rules:
            if not ok:
                raise InvalidConfigError(f"{key}: {rule}", key=key)

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

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RaftConfig:
        """Build from plain data (a TOML table, JSON); unknown keys are errors naming the key."""
        known = {f.name for f in fields(cls)}
        for key in raw:
            if key not in known:
                raise InvalidConfigError(f"{key}: unknown Raft setting", key=key)
        for key in ("node_id", "data_dir", "peers", "password"):
            if key not in raw:
                raise InvalidConfigError(f"{key}: required", key=key)
        return cls(**dict(raw))
