"""glibc's malloc told to keep the node's large buffers for reuse.

A node allocates and frees buffers of hundreds of KiB for every request of
1 KiB records: a produce body (500 records: ~530 KiB), the batch built from
it, a replica fetch's answer, a follower's copy of it. glibc serves an
allocation from 128 KiB up with a fresh `mmap` (its threshold grows only to
the largest block freed so far) and gives the top of the heap back to the
kernel once more than twice that is free, so each such buffer was new
memory: a page fault per 4 KiB page on first touch, and the kernel zeroing
it. On this project's VMs that cost ~700 us of CPU per pair of 530 KiB
buffers, more than decoding and encoding the records they hold
(docs/benchmarks.md, "Large buffers and glibc's malloc").

At start the node sets the two thresholds (`mallopt`) so that such buffers
come from the heap and what is freed stays there for the next request, up to
`MALLOC_TRIM_THRESHOLD_BYTES` of free memory at the heap's top (the price:
that much resident memory may stay with the process after a burst). An
operator's own choice wins: with `MALLOC_MMAP_THRESHOLD_`,
`MALLOC_TRIM_THRESHOLD_` or a `glibc.malloc` tunable in the environment,
nothing is changed. Another C library (no `mallopt`, or one that refuses)
is left as it is.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)

# Allocations smaller than this come from the heap, not from a fresh mmap,
# bytes (glibc's M_MMAP_THRESHOLD; its default is 128 KiB, growing with
# what is freed, at most 32 MiB). Larger ones (a fetch answer of many MiB)
# are still mapped and unmapped on their own.
MALLOC_MMAP_THRESHOLD_BYTES = 8 * 1024 * 1024
# Free memory at the top of a heap kept for reuse before it is given back to
# the kernel, bytes (glibc's M_TRIM_THRESHOLD; default twice the mmap
# threshold in force).
MALLOC_TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024

# glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Environment settings through which an operator tunes glibc's malloc.
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def operator_tuned(environ: Mapping[str, str]) -> bool:
    """Whether the environment already tunes glibc's malloc."""
    return any(name in environ for name in _OPERATOR_SETTINGS) or "glibc.malloc." in environ.get(
        "GLIBC_TUNABLES", ""
    )


def tune_malloc(environ: Mapping[str, str] = os.environ) -> bool:
    """Set the two thresholds above; whether they were set."""
    if operator_tuned(environ):
        log.info("glibc malloc thresholds left as the environment sets them")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not a C library with mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success, 0 when it refuses.
    if not (
        mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES)
    ):
        log.info("the C library refused the malloc thresholds; left as they were")
        return False
    return True


__all__ = [
    "MALLOC_MMAP_THRESHOLD_BYTES",
    "MALLOC_TRIM_THRESHOLD_BYTES",
    "operator_tuned",
    "tune_malloc",
]
