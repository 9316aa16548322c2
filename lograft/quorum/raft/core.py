"""The Raft thread: pysyncobj, the owner's state machine, and snapshots.

One dedicated thread (the Raft thread) owns the pysyncobj `SyncObj` (built
with `autoTick=False`) and ticks it. Everything that touches pysyncobj state
or the state machine happens on that thread; other threads only enqueue
appends (pysyncobj's command queue is locked) or post calls to `call()`.

Invariants:

- The state machine's `apply`, `snapshot` and `restore` run only on the Raft
  thread, never concurrently.
- `applied_offset` only grows. `apply(offset, batch)` is called only with
  `offset > applied_offset`, `restore()` only with a snapshot whose index is
  greater than it; so within one process every committed entry is applied
  exactly once, in log order. (pysyncobj itself may step its own last-applied
  index back when it installs a snapshot older than what was applied; those
  re-deliveries are skipped here.)
- Offsets are Raft log indexes: strictly increasing, not dense (leader
  elections add no-op entries that the state machine never sees).
- Fail-stop: if `apply` or `restore` raises, or a snapshot cannot be read, the
  Raft thread stops and reports the failure. Continuing would let this node
  diverge from the others, since every node must apply the same entries.
  Any other exception out of a pysyncobj tick is logged and ticking goes on,
  as pysyncobj's own autoTick thread does (Raft retransmits).
- The snapshot written at compaction reflects exactly `applied_offset` ==
  pysyncobj's last-applied index; if they differ the dump is refused and
  pysyncobj retries later.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pysyncobj import SyncObj, SyncObjConf, replicated

from lograft import power_loss
from lograft.errors import RaftStartupError, RaftStoppedError
from lograft.quorum.raft import pause_guard
from lograft.quorum.raft.config import RaftConfig, parse_address
from lograft.quorum.raft.durability import DurabilityGate, use_journal_factory
from lograft.quorum.raft.early_election import EarlyElection
from lograft.quorum.raft.handshake import HandshakeLimits
from lograft.quorum.raft.journal import DurableJournal
from lograft.quorum.raft.peer_contact import PeerContact
from lograft.quorum.raft.peer_loss import PeerLossWatch
from lograft.quorum.raft.snapshot import (
    Snapshot,
    as_entry,
    fsync_path,
    read_snapshot_file,
    write_snapshot_file,
)
from lograft.quorum.raft.status import RaftStatus, build_status
from lograft.quorum.raft.tick_lag import TickLag
from lograft.quorum.raft.transport import ObserverNode, PeerNode, transport_factory

log = logging.getLogger(__name__)

T = TypeVar("T")

# pysyncobj pickles (method id, (batch,)) with protocol 2, which stores bytes as
# latin-1 text re-encoded as UTF-8: up to 2 bytes per byte, plus a few dozen
# bytes of framing. Sizing pysyncobj's append_entries limit above that keeps
# every single entry on its plain path, never its chunked large-entry path.
_PICKLE_EXPANSION = 2
_ENTRY_OVERHEAD_BYTES = 1024
# pysyncobj's own command queue also holds commands forwarded by followers.
_COMMAND_QUEUE_FACTOR = 10
_BIND_RETRY_PERIOD_S = 0.05
# A follower still hears its leader (early_election.hears_leader: it refuses
# a pre-vote) while the leader's last append_entries is younger than this
# share of election_timeout_min_ms: ten heartbeats at the defaults (1000 ms,
# past the worst Raft-thread pause measured, 798 ms).
_LEADER_HEARD_SHARE = 0.5
_PYSYNCOBJ_BIND_RETRIES = 3


@dataclass(frozen=True, slots=True)
class RaftCounters:
    """A node's Raft numbers for its metrics, published after each tick."""

    ticked: bool = False
    term: int = 0
    commit_index: int = 0
    applied: int = 0
    # Terms begun since this process started (each is an election, won or not).
    elections: int = 0
    snapshot_offset: int | None = None
    # Wall-clock seconds when that snapshot was written or loaded here.
    snapshot_at: float | None = None


class StateMachine(Protocol):
    """What the owner of the replicated log implements. Called on the Raft thread.

    `apply` must be deterministic and must not raise for any committed batch
    (reject bad input by ignoring it deterministically); a raise halts the node.
    Readers on other threads should see state published atomically (e.g. an
    immutable image swapped by reference).
    """

    def apply(self, offset: int, batch: bytes) -> None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class CoreListener(Protocol):
    """Receives events on the Raft thread; implementations hop to their own loop."""

    def on_applied(self, offset: int, restored: bool) -> None: ...

    def on_failed(self, error: BaseException) -> None: ...


# pysyncobj's completion callback: (result, FAIL_REASON code).
AppendCallback = Callable[[Any, int], None]


class _ReplicatedLog(SyncObj):
    """The SyncObj with the one replicated entry point: append an opaque batch."""

    def __init__(
        self,
        core: RaftCore,
        self_node: PeerNode | None,
        other_nodes: list[PeerNode],
        conf: SyncObjConf,
        transport_class: Any,
    ) -> None:
        self._core = core
        super().__init__(self_node, other_nodes, conf=conf, transportClass=transport_class)

    @replicated
    def append_batch(self, batch: bytes) -> int:
        # pysyncobj bumps raftLastApplied right after this returns, so the entry
        # being applied now sits at raftLastApplied + 1: its Raft index.
        return self._core.apply_entry(self.raftLastApplied + 1, batch)


def build_syncobj_conf(
    config: RaftConfig,
    serializer: Callable[[str, Any], None],
    deserializer: Callable[[str], tuple[Any, ...]],
) -> SyncObjConf:
    bind_address = None
    if config.listen_address is not None:
        host, port = parse_address(config.listen_address, "listen_address")
        bind_address = f"{host}:{port}"
    return SyncObjConf(
        password=config.password,
        autoTick=False,
        commandsQueueSize=config.max_pending_appends * _COMMAND_QUEUE_FACTOR,
        raftMinTimeout=config.election_timeout_min_ms / 1000,
        raftMaxTimeout=config.election_timeout_max_ms / 1000,
        appendEntriesPeriod=config.heartbeat_interval_ms / 1000,
        connectionTimeout=config.connection_timeout_ms / 1000,
        connectionRetryTime=config.connection_retry_ms / 1000,
        leaderFallbackTimeout=config.leader_fallback_timeout_ms / 1000,
        appendEntriesUseBatch=not config.send_entries_immediately,
        appendEntriesBatchSizeBytes=config.max_batch_bytes * _PICKLE_EXPANSION
        + _ENTRY_OVERHEAD_BYTES,
        bindAddress=bind_address,
        logCompactionMinEntries=config.log_compaction_min_entries,
        logCompactionMinTime=config.log_compaction_min_time_ms / 1000,
        # Fail fast with MISSING_LEADER instead of parking commands until a
        # leader appears; callers retry on NotControllerError.
        commandsWaitLeader=False,
        journalFile=str(config.journal_path),
        fullDumpFile=str(config.snapshot_path),
        serializer=serializer,
        deserializer=deserializer,
        useFork=False,
        dynamicMembershipChange=False,
        bindRetryTime=_BIND_RETRY_PERIOD_S,
        maxBindRetries=_PYSYNCOBJ_BIND_RETRIES,
    )


def wait_for_port_free(address: str, timeout_ms: int) -> None:
    """Fail early and clearly if another process holds our Raft port.

    pysyncobj with autoTick=False busy-spins while it retries a bind, so we
    probe first (backing off between probes) and only then let it bind.
    """
    host, port = parse_address(address, "listen_address")
    deadline = time.monotonic() + timeout_ms / 1000
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise RaftStartupError(
                        f"cannot bind Raft listen_address {address}: {exc}", address=address
                    ) from exc
        time.sleep(_BIND_RETRY_PERIOD_S)


class RaftCore:
    """Owns the Raft thread. Thread-safe entry points: start, stop, submit, call."""

    def __init__(
        self, config: RaftConfig, state_machine: StateMachine, listener: CoreListener
    ) -> None:
        self._config = config
        self._sm = state_machine
        self._listener = listener
        self._syncobj: _ReplicatedLog | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._calls: queue.SimpleQueue[
            tuple[Callable[[_ReplicatedLog], Any], concurrent.futures.Future[Any]]
        ] = queue.SimpleQueue()
        # Guards the window in which pysyncobj's pipe/socket fds are closed.
        self._submit_lock = threading.Lock()
        self._accepting = False
        # Written on the Raft thread only; int reads elsewhere are atomic.
        self._applied = 0
        self._published = 0
        self._restored_pending = False
        self._snapshot_offset: int | None = None
        # Wall-clock time (s) the snapshot at `_snapshot_offset` was written
        # or loaded here (the metrics' snapshot age).
        self._snapshot_at: float | None = None
        self._snapshot_written = False
        # Read by the metrics from any thread: written by the Raft thread
        # after every tick (int and float assignments are atomic).
        self._counters = RaftCounters()
        # How much later than tick_interval_ms each tick came back (tick_lag.py).
        self.tick_lag = TickLag()
        # When each voter was last heard (peer_contact.py).
        self.peer_contact = PeerContact()
        # Probes a voter whose link dropped (peer_loss.py); elects soon when
        # the leader is gone for a majority (early_election.py). Raft thread.
        self._peer_loss = PeerLossWatch(
            self.peer_contact,
            probe_timeout_s=config.peer_probe_timeout_ms / 1000,
            retries=config.peer_probe_retries,
            retry_interval_s=config.peer_probe_retry_interval_ms / 1000,
        )
        self._early = EarlyElection(
            self.peer_contact,
            delay_min_s=config.early_election_delay_min_ms / 1000,
            delay_max_s=config.early_election_delay_max_ms / 1000,
            retries_max=config.early_election_retries_max,
            heard_window_ms=config.election_timeout_min_ms * _LEADER_HEARD_SHARE,
        )
        self._fatal: BaseException | None = None
        self._journal: DurableJournal | None = None
        self._gate = DurabilityGate(
            lambda exc: self._record_fatal(exc, "writing the Raft journal failed")
        )

    # -- any thread ------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        return self._applied

    @property
    def failure(self) -> BaseException | None:
        return self._fatal

    @property
    def counters(self) -> RaftCounters:
        """Term, commit index, elections seen, snapshot: as of the last tick."""
        return self._counters

    def is_leader(self) -> bool:
        so = self._syncobj
        return so is not None and self._config.voter and bool(so._isLeader())

    def leader_id(self) -> str | None:
        so = self._syncobj
        leader = None if so is None else so._getLeader()
        return None if leader is None else str(leader.id)

    @property
    def journal(self) -> DurableJournal | None:
        """The Raft log on disk (fsync counters for benchmarks and tests)."""
        return self._journal

    def start(self) -> None:
        """Blocking: bind, load the snapshot, run the first tick. Call off the event loop."""
        data_dir = self._config.data_dir
        created = not data_dir.exists()
        data_dir.mkdir(parents=True, exist_ok=True)
        if created and self._config.journal_fsync:
            fsync_path(data_dir.parent)  # the new directory's entry survives a power cut
        if self._config.voter and self._config.listen_address is not None:
            wait_for_port_free(self._config.listen_address, self._config.bind_timeout_ms)
        self._thread = threading.Thread(
            target=self._run, name=f"raft-{self._config.node_id}", daemon=True
        )
        self._thread.start()
        try:
            self._started.result(timeout=self._config.start_timeout_ms / 1000)
        except concurrent.futures.TimeoutError as exc:
            self.stop()
            raise RaftStartupError(
                f"Raft thread did not start within {self._config.start_timeout_ms} ms"
            ) from exc

    def stop(self) -> None:
        """Blocking: stop ticking, close sockets and files, join the thread."""
        self._stop_requested.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def submit(self, batch: bytes, callback: AppendCallback) -> None:
        with self._submit_lock:
            so = self._syncobj
            if not self._accepting or so is None:
                raise RaftStoppedError("Raft adapter is not running", node_id=self._config.node_id)
            so.append_batch(batch, callback=callback)

    def call(self, fn: Callable[[_ReplicatedLog], T]) -> concurrent.futures.Future[T]:
        """Run `fn(syncobj)` on the Raft thread after the current tick."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._submit_lock:
            if not self._accepting:
                fut.set_exception(RaftStoppedError("Raft adapter is not running"))
                return fut
            self._calls.put((fn, fut))
        return fut

    def request_log_compaction(self) -> None:
        so = self._syncobj
        if so is not None:
            so.forceLogCompaction()  # sets a flag that the next tick reads

    # -- Raft thread -----------------------------------------------------------

    def status_now(self, so: _ReplicatedLog) -> RaftStatus:
        observers = [n.observer_id for n in so.readonlyNodes if isinstance(n, ObserverNode)]
        return build_status(
            so.getStatus(),
            node_id=self._config.node_id,
            voter=self._config.voter,
            voter_ids=self._config.voter_ids,
            observer_ids=observers,
            last_applied=self._applied,
            snapshot_offset=self._snapshot_offset,
            ready=so.isReady(),
        )

    def apply_entry(self, offset: int, batch: bytes) -> int:
        if self._fatal is not None:
            raise RuntimeError("Raft state machine halted") from self._fatal
        if offset <= self._applied:
            # Already reflected: pysyncobj re-delivers entries after loading a
            # snapshot older than our state. Skipping keeps apply exactly-once.
            return offset
        try:
            self._sm.apply(offset, batch)
        except BaseException as exc:
            self._record_fatal(exc, f"state machine apply failed at offset {offset}")
            raise
        self._applied = offset
        return offset

    def _serialize(self, path: str, raft_data: Any) -> None:
        last, prev = as_entry(raft_data[0]), as_entry(raft_data[1])
        if self._applied > last[1]:
            # Our state is ahead of the index pysyncobj would label it with.
            raise RuntimeError(f"applied {self._applied} ahead of dump index {last[1]}")
        try:
            write_snapshot_file(path, Snapshot(last, prev, self._sm.snapshot()))
        except Exception:
            log.exception("writing Raft snapshot at offset %d failed; journal kept", last[1])
            raise
        self._snapshot_offset = last[1]
        self._snapshot_at = time.time()
        self._snapshot_written = True

    def _deserialize(self, path: str) -> tuple[Any, ...]:
        try:
            snap = read_snapshot_file(path)
            # A snapshot received from the leader was written without fsync.
            fsync_path(path)
            fsync_path(self._config.data_dir)
            if snap.last_index > self._applied:
                self._sm.restore(snap.state)
                self._applied = snap.last_index
                self._restored_pending = True
            self._snapshot_offset = snap.last_index
            self._snapshot_at = time.time()
        except BaseException as exc:
            # pysyncobj swallows this and carries on; we must not.
            self._record_fatal(exc, f"cannot load Raft snapshot {path}")
            raise
        # pysyncobj expects (last entry, entry before it, cluster nodes).
        return (snap.last_entry, snap.prev_entry, [])

    def _record_fatal(self, exc: BaseException, what: str) -> None:
        if self._fatal is None:
            log.critical("%s: %r; halting node %s", what, exc, self._config.node_id)
            self._fatal = exc

    def _build_syncobj(self) -> _ReplicatedLog:
        cfg = self._config
        conf = build_syncobj_conf(cfg, self._serialize, self._deserialize)
        peers = [PeerNode(pid, addr) for pid, addr in sorted(cfg.peers.items())]
        self_node = None
        if cfg.voter:
            assert cfg.listen_address is not None
            self_node = PeerNode(cfg.node_id, cfg.listen_address)
        observer_id = None if cfg.voter else cfg.node_id
        handshake = HandshakeLimits(
            timeout_s=cfg.handshake_timeout_ms / 1000,
            max_bytes=cfg.max_handshake_bytes,
            max_connections=cfg.max_handshake_connections,
        )
        early = self._early if cfg.voter else None
        transport = transport_factory(observer_id, handshake, self._gate, self.peer_contact, early)
        try:
            with use_journal_factory(self._open_journal):
                so = _ReplicatedLog(self, self_node, peers, conf, transport)
        except BaseException:
            if self._journal is not None:
                self._journal._destroy()  # SyncObj never got far enough to close it
            raise
        if self._journal is None:
            raise RuntimeError("pysyncobj did not build its journal through our factory")
        self._gate.attach_journal(self._journal)
        # SyncObj may have appended its first no-op entry: durable before any tick.
        self._gate.release()
        return so

    def _open_journal(self, path: str) -> DurableJournal:
        self._journal = DurableJournal(path, fsync=self._config.journal_fsync)
        return self._journal

    def _run(self) -> None:
        try:
            so = self._build_syncobj()
        except BaseException as exc:
            self._started.set_exception(
                RaftStartupError(f"cannot start Raft node {self._config.node_id}: {exc!r}")
            )
            return
        self._syncobj = so
        with self._submit_lock:
            self._accepting = True
        try:
            self._first_tick(so)
            self._tick_loop(so)
        except BaseException as exc:
            self._record_fatal(exc, "Raft thread crashed")
        finally:
            self._shutdown(so)

    def _first_tick(self, so: _ReplicatedLog) -> None:
        # pysyncobj loads the snapshot lazily on its first tick; run it now so
        # that start() returns with the state machine restored.
        try:
            try:
                so.doTick(0.0)
            finally:
                self._gate.release()
            self._after_tick(so)
        except BaseException as exc:
            self._record_fatal(exc, "first Raft tick failed")
        if self._fatal is not None:
            self._started.set_exception(
                RaftStartupError(
                    f"Raft node {self._config.node_id} failed to start: {self._fatal!r}"
                )
            )
        else:
            self._started.set_result(None)

    def _tick_loop(self, so: _ReplicatedLog) -> None:
        tick_s = self._config.tick_interval_ms / 1000
        started = time.monotonic()
        while not self._stop_requested.is_set() and self._fatal is None:
            # A tick's poll waits up to tick_s; anything beyond was a pause
            # (the GIL held elsewhere, an fsync, an apply). A tick that came
            # back early and was then held is under-counted by at most tick_s.
            now = time.monotonic()
            lag_ms = (now - started - tick_s) * 1000
            self.tick_lag.record(lag_ms, now)
            started = now
            fallback_s = self._config.leader_fallback_timeout_ms / 1000
            if self._config.voter:
                self._watch_peers(so, now)
            if lag_ms > self._config.heartbeat_interval_ms:
                # A leader gone for a majority is no pause of ours.
                absorb_own_pause(so, now, fallback_s, keep_deadline=self._early.pending(so))
            # A pause that begins from here on, before pysyncobj's timer
            # checks, is caught by the checks themselves (pause_guard.py).
            pause_guard.arm(so, now, self._config.heartbeat_interval_ms / 1000, fallback_s)
            try:
                try:
                    so.doTick(tick_s)
                finally:
                    # Followers appended and answered during the poll: one
                    # fsync, then the answers go (durability.py); and the
                    # leader's count at the start of the next tick sees only
                    # durable entries, even after a tick that raised.
                    self._gate.release()
            except Exception:
                if self._fatal is not None:
                    break  # the state machine or a snapshot failed: fail-stop
                # Anything else is pysyncobj tripping over one message (it has
                # such bugs); like its own autoTick thread, log and tick on.
                log.exception("pysyncobj tick failed on node %s", self._config.node_id)
                self._stop_requested.wait(tick_s)  # back off one tick
                continue
            self._after_tick(so)

    def _watch_peers(self, so: _ReplicatedLog, now: float) -> None:
        """Probe lost voter links, elect early when the leader is gone."""
        try:
            self._peer_loss.tick(so, now)
            self._early.tick(so, now)
        except Exception:
            # Only a faster election is lost: the election timeout still holds.
            log.exception("watching lost Raft links failed on node %s", self._config.node_id)

    def _after_tick(self, so: _ReplicatedLog) -> None:
        if self._snapshot_written:
            # pysyncobj renamed the dump into place without syncing the
            # directory; do it before the next tick truncates the journal.
            self._snapshot_written = False
            # The power-loss test mode: the file renamed into place holds the
            # bytes the serializer fsynced under its temporary name.
            power_loss.synced(self._config.snapshot_path)
            fsync_path(self._config.data_dir)
        self._applied = max(self._applied, so.raftLastApplied)
        self._count(so)
        self._run_calls(so)
        if self._applied != self._published or self._restored_pending:
            self._published = self._applied
            restored, self._restored_pending = self._restored_pending, False
            self._listener.on_applied(self._applied, restored)

    def _count(self, so: _ReplicatedLog) -> None:
        """Publish the tick's counters (a new object: readers see one tick's values)."""
        term = int(so.raftCurrentTerm)
        before = self._counters
        # Every term begins with an election; the first tick only sets the
        # baseline (a restarted node's journal holds the terms before it).
        elections = before.elections + (term - before.term if before.ticked else 0)
        self._counters = RaftCounters(
            ticked=True,
            term=term,
            commit_index=int(so.raftCommitIndex),
            applied=self._applied,
            elections=max(elections, before.elections),
            snapshot_offset=self._snapshot_offset,
            snapshot_at=self._snapshot_at,
        )

    def _run_calls(self, so: _ReplicatedLog) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(so))
            except BaseException as exc:
                fut.set_exception(exc)

    def _shutdown(self, so: _ReplicatedLog) -> None:
        with self._submit_lock:
            self._accepting = False
        try:
            so.destroy()  # autoTick=False: closes sockets and the journal now
        except Exception:
            log.exception("pysyncobj destroy failed on node %s", self._config.node_id)
        _close_pipe_notifier(so)
        self._peer_loss.close()
        self._fail_pending_calls()
        if not self._started.done():
            self._started.set_exception(RaftStartupError("Raft thread stopped during start"))
        if self._fatal is not None:
            self._listener.on_failed(self._fatal)

    def _fail_pending_calls(self) -> None:
        while True:
            try:
                _fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if fut.set_running_or_notify_cancel():
                fut.set_exception(RaftStoppedError("Raft adapter stopped"))


def absorb_own_pause(
    so: SyncObj, now: float, fallback_s: float, *, keep_deadline: bool = False
) -> None:
    """After this thread itself was held up, do not blame the other nodes for it.

    pysyncobj checks its timers at the start of a tick, before it reads its
    sockets. After a pause of this thread (the GIL held by the node's event
    loop, a slow fsync), what the others sent sits unread and the timers have
    run out for this node's own fault:

    - a follower's election deadline has passed: it would start an election
      and depose a healthy leader. The deadline is pushed one fresh election
      timeout past now, so this tick reads the leader's heartbeats first; a
      leader that is really gone is replaced one timeout later. A forced
      election (a leadership transfer's TimeoutNow) is left alone;
    - a leader has heard from no majority for `leader_fallback_timeout_ms`:
      it would step down. Each follower's last answer is counted as no older
      than half that timeout, so the answers waiting in the sockets are read
      before the check can fire again.

    The same rule as the controller's `absorb_stall` for broker sessions.
    `keep_deadline`: an early election is due because the leader's port
    refused a connection and a majority agreed it is gone
    (early_election.py); that is no pause of this thread, so the deadline is
    left alone, as for a transfer.
    """
    deadline = getattr(so, "_SyncObj__raftElectionDeadline", None)
    transfer = getattr(so, "_SyncObj__transferInProgress", False)
    if isinstance(deadline, float | int) and deadline != 0 and not transfer and not keep_deadline:
        fresh = now + so._SyncObj__generateRaftTimeout()
        # float(): the deadline may still be last tick's PauseAwareDeadline,
        # whose comparisons mean something else (pause_guard.py).
        so._SyncObj__raftElectionDeadline = max(float(deadline), fresh)
    answered = getattr(so, "_SyncObj__lastResponseTime", None)
    if isinstance(answered, dict):
        floor = now - fallback_s / 2
        for node, at in list(answered.items()):
            answered[node] = max(float(at), floor)


def _close_pipe_notifier(so: SyncObj) -> None:
    # pysyncobj opens a wake-up pipe when entries are sent immediately and
    # never closes it; close it so that stop/start cycles do not leak fds.
    notifier = getattr(so, "_SyncObj__pipeNotifier", None)
    if notifier is None:
        return
    for attr in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
        fd = getattr(notifier, attr, None)
        if isinstance(fd, int):
            with contextlib.suppress(OSError):
                os.close(fd)
