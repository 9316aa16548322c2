"""Measures a Log's traced Python memory in a fresh interpreter and prints
the figures as JSON; test_handles.py runs it as a subprocess.

Why a subprocess: tracemalloc counts every live allocation made after it
starts, in every thread, and the storage-frame filter cannot tell the
measured log from any other storage code running meanwhile. In the process
of a full unit-suite run (~2,200 tests first, ~240 threads left behind by
them) a measurement once read 34 KB "per segment" against a 4 KiB bound,
while the test passed alone: whatever else ran storage code or was
finalized by gc.collect() in the window landed in the figures. Here
nothing but the measured log runs, and the first measurement comes after
a warm-up (first-use caches, lazy imports), so the figures are
differences between two sizes of the same log (a slope), not absolute
amounts.

Usage: python memory_probe.py {segments|data} DIRECTORY
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

# Only what lograft's storage code allocated (anywhere in the call stack).
_OURS = [tracemalloc.Filter(True, "*/lograft/storage/*", all_frames=True)]
_NOW_MS = 1_700_000_000_000


def _traced_after(fn: Callable[[], object]) -> int:
    fn()
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(_OURS)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def _appender(log: Log, blob: bytes) -> Callable[[int], Callable[[], object]]:
    def append(n: int) -> Callable[[], object]:
        return lambda: [log.append(blob, leader_epoch=0) for _ in range(n)]

    return append


def segments(directory: Path) -> dict[str, int]:
    """One batch per segment: 20 segments (the warm-up), then 120 more."""
    blob = build_batch([RecordInput(b"x" * 900)], timestamp_ms=1)
    config = LogConfig(segment_bytes=1024, segment_index_bytes=4096)
    log = Log(directory, config, pool=FilePool(8), clock=lambda: _NOW_MS)
    append = _appender(log, blob)
    few = _traced_after(append(20))
    many = _traced_after(append(120))
    return {"few": few, "many": many, "added": 120, "segment_count": log.segment_count}


def data(directory: Path) -> dict[str, int]:
    """100 batches (the warm-up), 1,000 more in the same segments, then reads."""
    blob = build_batch([RecordInput(b"x" * 900)], timestamp_ms=1)
    log = Log(directory, LogConfig(), pool=FilePool(8), clock=lambda: _NOW_MS)
    append = _appender(log, blob)
    small = _traced_after(append(100))
    large = _traced_after(append(1000))
    after_reads = _traced_after(lambda: [log.read(o, 4096) for o in range(0, 1100, 7)])
    return {"small": small, "large": large, "after_reads": after_reads}


SCENARIOS = {"segments": segments, "data": data}


def main() -> None:
    scenario, directory = sys.argv[1], Path(sys.argv[2])
    # The page cache makes fsync irrelevant to what is measured; skip the disk wait.
    os.fsync = lambda _fd: None
    tracemalloc.start(10)
    print(json.dumps(SCENARIOS[scenario](directory)))


if __name__ == "__main__":
    main()
