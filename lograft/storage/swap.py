"""Crash-safe replacement of segments by cleaned ones (compaction).

A cleaned segment replaces the old segments whose base offsets lie in
[base, end). It is built as a complete segment (log and both indexes) in the
partition's `.cleaner/` directory, fsynced, then swapped in:

1. `.cleaner/<base>.index` and `.timeindex` move to `<base>.index.swap`,
   `<base>.timeindex.swap` in the partition directory;
2. `.cleaner/<base>.log` moves to `<base>.log.swap.<end>` -- the commit point;
3. the old segments in [base, end) are deleted;
4. the `.swap` files are renamed to their final names.

On open, a `*.log.swap.<end>` file means the swap committed: steps 3-4 are
redone. Without one, any `*.index.swap`/`*.timeindex.swap` and the whole
`.cleaner/` directory are leftovers of an uncommitted clean and are deleted.
Either way the log holds the old segments or the new one, never a mix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lograft import power_loss
from lograft.storage.checkpoint import fsync_dir
from lograft.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    file_name,
    parse_base_offset,
)

CLEANER_DIR = ".cleaner"
SWAP_SUFFIX = ".swap"
_LOG_SWAP_MARK = LOG_SUFFIX + SWAP_SUFFIX + "."


def log_swap_name(base: int, end: int) -> str:
    return f"{file_name(base, LOG_SUFFIX)}{SWAP_SUFFIX}.{end:020d}"


def parse_log_swap(name: str) -> tuple[int, int] | None:
    """(base, end) of a committed log swap file name, else None."""
    if _LOG_SWAP_MARK not in name:
        return None
    base = parse_base_offset(name)
    tail = name.rsplit(".", 1)[-1]
    if base is None or len(tail) != 20 or not tail.isdigit():
        return None
    return base, int(tail)


def _replace(src: Path, dst: Path) -> None:
    os.replace(src, dst)
    power_loss.replaced(src, dst)


def segment_files(directory: Path, base: int) -> list[Path]:
    return [directory / file_name(base, s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)]


def commit_swap(directory: Path, base: int, end: int, old_bases: list[int]) -> None:
    """Swap `.cleaner/<base>.*` in for the segments `old_bases` (all in [base, end)).

    The caller has closed the old segments and holds the log's locks.
    """
    staging = directory / CLEANER_DIR
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        src = staging / file_name(base, suffix)
        if src.exists():
            _replace(src, directory / (file_name(base, suffix) + SWAP_SUFFIX))
    _replace(staging / file_name(base, LOG_SUFFIX), directory / log_swap_name(base, end))
    fsync_dir(directory)
    _finish(directory, base, end, old_bases)


def _finish(directory: Path, base: int, end: int, old_bases: list[int]) -> None:
    for old in old_bases:
        if not base <= old < end:
            raise AssertionError(f"segment {old} is outside the swap range [{base}, {end})")
        # The .log goes last: recovery finds old segments by their .log, so
        # an index must never outlive it (a later segment with that base
        # offset would adopt the stale entries).
        for path in reversed(segment_files(directory, old)):
            path.unlink(missing_ok=True)
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        swapped = directory / (file_name(base, suffix) + SWAP_SUFFIX)
        if swapped.exists():
            _replace(swapped, directory / file_name(base, suffix))
    _replace(directory / log_swap_name(base, end), directory / file_name(base, LOG_SUFFIX))
    fsync_dir(directory)
    shutil.rmtree(directory / CLEANER_DIR, ignore_errors=True)


def complete_interrupted_swaps(directory: Path) -> list[str]:
    """Finish committed swaps and drop uncommitted ones; returns what was done."""
    actions: list[str] = []
    names = sorted(os.listdir(directory))
    committed = [parsed for n in names if (parsed := parse_log_swap(n)) is not None]
    for base, end in committed:
        old = [
            b
            for n in names
            if n.endswith(LOG_SUFFIX)
            and (b := parse_base_offset(n)) is not None
            and base <= b < end
        ]
        _finish(directory, base, end, old)
        actions.append(f"completed swap of segments {old} into {base}")
    names = os.listdir(directory)
    for n in names:
        if n.endswith(INDEX_SUFFIX + SWAP_SUFFIX) or n.endswith(TIMEINDEX_SUFFIX + SWAP_SUFFIX):
            (directory / n).unlink(missing_ok=True)
            actions.append(f"removed uncommitted {n}")
        elif n.endswith(".tmp") or n.endswith(".deleted"):
            (directory / n).unlink(missing_ok=True)
            actions.append(f"removed stray {n}")
    staging = directory / CLEANER_DIR
    if staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
        actions.append("removed uncommitted cleaner output")
    return actions
