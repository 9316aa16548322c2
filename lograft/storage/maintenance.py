"""Background upkeep of logs: flushing, retention and compaction.

One daemon thread per data directory (or per broker) walks the registered
logs: every `flush_check_interval_ms` it applies the flush policy
(`Log.maybe_flush`) of the logs that may need it, every
`retention_check_interval_ms` it applies retention, and every
`cleaner_interval_ms` it compacts logs whose policy says so. This is what
keeps fsync, deletion and compaction off the caller's append path.

Which logs may need a flush: those written since their last check. Every
log's `on_write` hook marks it; a check drops the mark unless the log runs
the `interval_ms` policy and its newest write is not yet due (then the check
at or after `write + flush_interval_ms` flushes it). A broker with 2,000
mostly idle logs used to call `maybe_flush` on all of them five times a
second (22% of its idle CPU); now idle logs cost nothing between sweeps. A
full sweep every `flush_sweep_interval_ms` still checks every log, for data
no write announced (segments re-validated by recovery are marked when the
log is added, which covers the known case).

A failure on one log is logged and counted; it never stops the thread or the
other logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from lograft.storage.config import FlushPolicy
from lograft.storage.log import Clock, Log, wall_clock_ms

log = logging.getLogger(__name__)

HighWatermark = Callable[[], int | None]
# (log, now_ms, high watermark or None) -> a result, or None when nothing was done
Compactor = Callable[[Log, int, int | None], object]


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    flush_check_interval_ms: int = 200
    # Every log's flush policy is checked at least this often, ms.
    flush_sweep_interval_ms: int = 10_000
    retention_check_interval_ms: int = 300_000  # Kafka's log.retention.check.interval.ms
    cleaner_interval_ms: int = 15_000  # Kafka's log.cleaner.backoff.ms


@dataclass(slots=True)
class MaintenanceStats:
    flushes: int = 0
    segments_deleted: int = 0
    compactions: int = 0
    errors: int = 0


class LogMaintainer:
    def __init__(
        self,
        config: MaintenanceConfig | None = None,
        *,
        clock: Clock = wall_clock_ms,
        compactor: Compactor | None = None,
    ) -> None:
        self.config = config or MaintenanceConfig()
        self.clock = clock
        self.compactor = compactor
        self.stats = MaintenanceStats()
        self._logs: dict[int, tuple[Log, HighWatermark | None]] = {}
        # Logs written since their last flush check: id -> the time from which
        # a check must find an `interval_ms` log's newest write due, ms.
        self._written: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        now = clock()
        self._next_retention = now + self.config.retention_check_interval_ms
        self._next_clean = now + self.config.cleaner_interval_ms
        self._next_sweep = now + self.config.flush_sweep_interval_ms
        self.flush_checks = 0  # maybe_flush calls made, for tests and profiles

    def add(self, target: Log, high_watermark: HighWatermark | None = None) -> None:
        """Look after `target`; `high_watermark` bounds what retention may delete."""
        with self._lock:
            self._logs[id(target)] = (target, high_watermark)
        target.on_write = self._mark_written
        # Checked once: it may hold data from before (recovery marks re-read
        # segments unflushed).
        self._mark_written(target)

    def remove(self, target: Log) -> None:
        with self._lock:
            self._logs.pop(id(target), None)
            self._written.pop(id(target), None)
        if target.on_write == self._mark_written:
            target.on_write = None

    def _mark_written(self, target: Log) -> None:
        """The log's `on_write` hook (the appending thread, under the log's lock)."""
        due = self.clock() + target.config.flush_interval_ms
        with self._lock:
            if self._written.get(id(target), due - 1) < due:
                self._written[id(target)] = due

    def _snapshot(self) -> list[tuple[Log, HighWatermark | None]]:
        with self._lock:
            return list(self._logs.values())

    def _to_flush_check(self, sweep: bool) -> list[tuple[Log, int | None]]:
        """(log, due time or None) for every log this pass must check."""
        with self._lock:
            if sweep:
                return [(t, self._written.get(key)) for key, (t, _h) in self._logs.items()]
            return [
                (self._logs[key][0], due) for key, due in self._written.items() if key in self._logs
            ]

    def run_once(self, *, force_all: bool = False) -> MaintenanceStats:
        """One pass; `force_all` runs retention, compaction and a full flush
        sweep regardless of schedule."""
        now = self.clock()
        do_retention = force_all or now >= self._next_retention
        do_clean = force_all or now >= self._next_clean
        do_sweep = force_all or now >= self._next_sweep
        if do_retention:
            self._next_retention = now + self.config.retention_check_interval_ms
        if do_clean:
            self._next_clean = now + self.config.cleaner_interval_ms
        if do_sweep:
            self._next_sweep = now + self.config.flush_sweep_interval_ms
        for target, due in self._to_flush_check(do_sweep):
            if target.closed:
                self.remove(target)
                continue
            self._guard(target, "flush", partial(self._flush, target, due, now))
        if do_retention or do_clean:
            for target, hw in self._snapshot():
                if target.closed:
                    self.remove(target)
                    continue
                if do_retention:
                    self._guard(target, "retention", partial(self._retain, target, hw))
                if do_clean and self.compactor is not None and target.config.compact:
                    self._guard(target, "compaction", partial(self._compact, target, now, hw))
        return self.stats

    def _flush(self, target: Log, due: int | None, now: int) -> None:
        """Apply the flush policy; forget the write mark unless a later check
        must flush it (an `interval_ms` log whose newest write is not due)."""
        self.flush_checks += 1
        flushed = target.maybe_flush()
        if flushed:
            self.stats.flushes += 1
        keep = (
            not flushed
            and due is not None
            and now < due
            and target.config.flush_policy is FlushPolicy.INTERVAL_MS
        )
        if not keep:
            with self._lock:
                # A write after this pass began moved the due time: keep it.
                if self._written.get(id(target)) == due:
                    self._written.pop(id(target), None)

    def _retain(self, target: Log, hw: HighWatermark | None) -> None:
        bound = hw() if hw is not None else None
        self.stats.segments_deleted += target.delete_old_segments(max_offset=bound)

    def _compact(self, target: Log, now: int, hw: HighWatermark | None) -> None:
        assert self.compactor is not None
        # Never compact what consumers may not read yet: stop at the HW.
        bound = hw() if hw is not None else None
        if self.compactor(target, now, bound) is not None:
            self.stats.compactions += 1

    def _guard(self, target: Log, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:
            self.stats.errors += 1
            log.exception("%s of %s failed", what, target.directory)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-maintenance", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s = self.config.flush_check_interval_ms / 1000
        while not self._stop.wait(interval_s):
            self.run_once()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
