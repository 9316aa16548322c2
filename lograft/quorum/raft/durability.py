"""When the Raft journal is fsynced: before the log counts, in groups.

Raft's safety needs two things of each node's log (Kafka's KRaft fsyncs its
metadata log for the same reason):

(a) a node acknowledges an AppendEntries (pysyncobj's `next_node_idx` with
    `success=True`) only once the entries are durable, since the leader
    counts that answer toward a commit;
(b) the leader counts itself toward a commit only for entries durable on
    its own disk.

pysyncobj offers no hook between "appended to the journal" and "counted",
so the journal (`DurableJournal`) only writes, and `DurabilityGate` decides
when it is synced:

- Every message pysyncobj sends goes through `PeerTCPTransport.send`, which
  asks `hold()` first. While the journal has unsynced writes, a message is
  held instead of sent, and so is every later one (order per peer is kept).
  This covers (a): a follower appends the entries of an `append_entries` and
  then sends its `next_node_idx`, which is held.
- `release()` syncs the journal once (`os.fsync`) and then sends what was
  held. It runs from pysyncobj's on-tick callbacks (after the tick's own work,
  just before it polls the sockets) and from the Raft core right after each
  tick (after the poll, where followers appended and answered). So every
  entry appended within one tick shares one fsync: the group commit.
- (b): the leader counts itself (`count = 1` in `SyncObj._onTick`) at the
  start of a tick, and appends only inside ticks (`_checkCommandsToApply`,
  `__onBecomeLeader`), never between them. The core releases after every
  tick and before the first one, so at the start of every tick the journal
  holds nothing unsynced: whatever the leader counts is on its disk.
  One corner: a single-voter cluster elects itself inside a tick, appends
  its no-op entry and counts it in the same tick, before the release. A
  no-op is never applied nor acknowledged to anyone, and it is synced at the
  end of that tick, before any later entry can be counted.
- Exception: a leader's `append_entries` is not held when nothing is held
  before it. Raft lets a leader write its log in parallel with sending it
  (Ongaro's thesis, 10.2.1): followers then fsync while the leader does,
  and the leader still counts itself only after its own fsync, by (b).

Everything here runs on the Raft thread, never on the asyncio loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pysyncobj.syncobj

from lograft.quorum.raft.journal import DurableJournal

log = logging.getLogger(__name__)

Sender = Callable[[Any, Any], Any]


class DurabilityGate:
    """Holds outgoing Raft messages until the journal writes they reflect are durable."""

    def __init__(self, on_failure: Callable[[BaseException], None]) -> None:
        self._on_failure = on_failure
        self._journal: DurableJournal | None = None
        self._send: Sender | None = None
        self._held: list[tuple[Any, Any]] = []
        self.messages_held = 0

    def attach_journal(self, journal: DurableJournal) -> None:
        self._journal = journal

    def attach_sender(self, send: Sender) -> None:
        self._send = send

    def hold(self, node: Any, message: Any) -> bool:
        """True if `message` was held for `release()` rather than sent now."""
        journal = self._journal
        if journal is None:
            return False
        if not self._held and (not journal.unsynced or _is_append_entries(message)):
            return False
        self._held.append((node, message))
        self.messages_held += 1
        return True

    def release(self) -> None:
        """fsync the journal once, then send every held message in order."""
        journal = self._journal
        if journal is None:
            return
        try:
            journal.sync()
        except BaseException as exc:
            # An fsync that failed cannot be retried safely (the kernel may
            # have dropped the dirty pages): nothing held is ever sent.
            self._held.clear()
            self._on_failure(exc)
            raise
        held, self._held = self._held, []
        if self._send is not None:
            for node, message in held:
                self._send(node, message)


def _is_append_entries(message: Any) -> bool:
    return isinstance(message, dict) and message.get("type") == "append_entries"


# -- choosing the journal SyncObj builds ---------------------------------------------------

# SyncObj.__init__ builds its journal by calling pysyncobj.syncobj.createJournal;
# there is no parameter for the class. The replacement below builds a
# DurableJournal when the calling thread asked for one (use_journal_factory),
# and otherwise does exactly what pysyncobj would, so stock SyncObjs in the
# same process (some tests build one) are unaffected. Thread-local: several
# Raft nodes may be built at once in one process (tests).
_stock_create_journal = pysyncobj.syncobj.createJournal
_requested = threading.local()
_install_lock = threading.Lock()


def _create_journal(journalFile: str | None = None) -> Any:
    factory = getattr(_requested, "factory", None)
    if factory is None or journalFile is None:
        return _stock_create_journal(journalFile)
    return factory(journalFile)


@contextlib.contextmanager
def use_journal_factory(factory: Callable[[str], DurableJournal]) -> Iterator[None]:
    """Within the block, a SyncObj built on this thread gets `factory(journalFile)`."""
    with _install_lock:
        if pysyncobj.syncobj.createJournal is not _create_journal:
            pysyncobj.syncobj.createJournal = _create_journal
    _requested.factory = factory
    try:
        yield
    finally:
        _requested.factory = None
