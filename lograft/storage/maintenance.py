"""Background upkeep of logs: flushing, retention and compaction.

One daemon thread per data directory (or per broker) walks the registered
logs: every `flush_check_interval_ms` it applies each log's flush policy
(`Log.maybe_flush`), every `retention_check_interval_ms` it applies retention,
and every `cleaner_interval_ms` it compacts logs whose policy says so. This
is what keeps fsync, deletion and compaction off the caller's append path.

A failure on one log is logged and counted; it never stops the thread or the
other logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lograft.storage.log import Clock, Log, wall_clock_ms

log = logging.getLogger(__name__)

HighWatermark = Callable[[], int | None]
# (log, now_ms, high watermark or None) -> a result, or None when nothing was done
Compactor = Callable[[Log, int, int | None], object]


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    flush_check_interval_ms: int = 200
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
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        now = clock()
        self._next_retention = now + self.config.retention_check_interval_ms
        self._next_clean = now + self.config.cleaner_interval_ms

    def add(self, target: Log, high_watermark: HighWatermark | None = None) -> None:
        """Look after `target`; `high_watermark` bounds what retention may delete."""
        with self._lock:
            self._logs[id(target)] = (target, high_watermark)

    def remove(self, target: Log) -> None:
        with self._lock:
            self._logs.pop(id(target), None)

    def _snapshot(self) -> list[tuple[Log, HighWatermark | None]]:
        with self._lock:
            return list(self._logs.values())

    def run_once(self, *, force_all: bool = False) -> MaintenanceStats:
        """One pass; `force_all` runs retention and compaction regardless of schedule."""
        now = self.clock()
        do_retention = force_all or now >= self._next_retention
        do_clean = force_all or now >= self._next_clean
        if do_retention:
            self._next_retention = now + self.config.retention_check_interval_ms
        if do_clean:
            self._next_clean = now + self.config.cleaner_interval_ms
        for target, hw in self._snapshot():
            if target.closed:
                self.remove(target)
                continue
            self._guard(target, "flush", lambda t=target: self._flush(t))
            if do_retention:
                self._guard(target, "retention", lambda t=target, h=hw: self._retain(t, h))
            if do_clean and self.compactor is not None and target.config.compact:
                self._guard(target, "compaction", lambda t=target, h=hw: self._compact(t, now, h))
        return self.stats

    def _flush(self, target: Log) -> None:
        if target.maybe_flush():
            self.stats.flushes += 1

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
