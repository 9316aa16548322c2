#!/usr/bin/env python3
"""What the first store into a preallocated, mapped index file costs
(docs/benchmarks.md, "Index preallocation"): the figures behind
lograft/storage/index.py mapping its files with MADV_RANDOM and not using
fallocate.

For each file size, five times: a new file made with `ftruncate` (sparse) or
`posix_fallocate`, mapped, optionally `madvise(MADV_RANDOM)`; the first store
(offset 0) and a store into a later page (offset 8 KiB) are timed. With the
default advice the kernel reads ahead (`read_ahead_kb`) on the first fault,
zero-filling page cache for the file's holes. Files go in a temporary
directory under `--dir` (default: the current directory, so the
repository's file system), removed afterwards.

    .venv/bin/python scripts/bench_index_prealloc.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time
from pathlib import Path

SIZES = (64 << 10, 1 << 20, 10 << 20)
MODES = ("ftruncate", "ftruncate + MADV_RANDOM", "posix_fallocate")
ROUNDS = 5


def one_round(path: Path, size: int, mode: str) -> tuple[float, float]:
    """The first store's and a later page's store's time, in seconds."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        if mode == "posix_fallocate":
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as m:
            if mode.endswith("MADV_RANDOM"):
                m.madvise(mmap.MADV_RANDOM)
            t0 = time.perf_counter()
            m[0] = 1
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            m[8192] = 1
            later = time.perf_counter() - t0
        return first, later
    finally:
        os.close(fd)
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", type=Path, default=Path.cwd(), help="parent of the temporary dir")
    args = ap.parse_args()
    readahead = Path("/sys/block/vda/queue/read_ahead_kb")
    if readahead.exists():
        print(f"read_ahead_kb (vda): {readahead.read_text().strip()}")
    print(f"{'file':>9}  {'made with':<24} {'first store us':>15} {'later page us':>14}")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-index-") as tmp:
        for size in SIZES:
            for mode in MODES:
                runs = [one_round(Path(tmp, f"{size}-{i}"), size, mode) for i in range(ROUNDS)]
                first = sorted(r[0] * 1e6 for r in runs)
                later = sorted(r[1] * 1e6 for r in runs)
                print(
                    f"{size >> 10:>5} KiB  {mode:<24} {first[0]:>7.0f}-{first[-1]:<7.0f}"
                    f" {later[0]:>6.0f}-{later[-1]:<7.0f}"
                )


if __name__ == "__main__":
    main()
