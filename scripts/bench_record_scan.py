"""Print the cost of validating one 1,000-record batch on append.

Compares the C scanner, the pure-Python fallback and the Record-decoding walk
that check_records used before (iter_batch_records), on an uncompressed batch
of 1,000 records with 100-byte values and 16-byte keys. Figures are the best
of several runs, in milliseconds per batch, and MB/s of batch bytes.

    .venv/bin/python scripts/bench_record_scan.py [--records N] [--value-bytes N]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from lograft.protocol import record_scan
from lograft.protocol.batch import HEADER_SIZE, RecordInput, build_batch, iter_batch_records


def best_ms(fn: Callable[[], object], repeat: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args()
    n = args.records
    records = [
        RecordInput(value=os.urandom(args.value_bytes), key=b"key-%012d" % i) for i in range(n)
    ]
    batch = build_batch(records, timestamp_ms=1_700_000_000_000)
    section = memoryview(batch)[HEADER_SIZE:]
    size_mb = len(batch) / 1e6

    def decode() -> None:
        for _ in iter_batch_records(batch):
            pass

    rows: list[tuple[str, Callable[[], object], int]] = []
    if record_scan.IMPLEMENTATION == "c":
        rows.append(
            (
                "C scanner",
                lambda: record_scan.scan_records_c(section, n, n - 1, contiguous=True),
                2000,
            )
        )
    rows.append(
        (
            "Python fallback",
            lambda: record_scan.scan_records_python(section, n, n - 1, contiguous=True),
            50,
        )
    )
    rows.append(("Record decoding (old check_records)", decode, 20))
    print(f"batch: {n} records, {args.value_bytes}-byte values, {len(batch)} bytes")
    print(f"active implementation: {record_scan.IMPLEMENTATION}")
    for name, fn, number in rows:
        ms = best_ms(fn, repeat=7, number=number)
        print(f"{name:38s} {ms:9.4f} ms/batch  {size_mb / (ms / 1000):10.1f} MB/s")


if __name__ == "__main__":
    main()
