#!/usr/bin/env python3
"""The record encoder alone: client CPU us per record of the pure-Python
encoder (batch.encode_records_python) and the C one (_recordencode), the
same records, alternating rounds, in one process. Prints the load average.

    .venv/bin/python scripts/bench_encode.py --records 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from lograft.protocol import batch

Encoder = Callable[[Sequence[batch.RecordInput], int, Sequence[int] | None], tuple[bytes, int, int]]


def per_record_us(encode: Encoder, records: list[batch.RecordInput], repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        encode(records, 0, None)
    return (time.process_time() - start) / repeat / len(records) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1000, help="records per batch")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if batch._recordencode is None:
        raise SystemExit("the C encoder is not built (scripts/setup.sh)")
    now = int(time.time() * 1000)
    records = [
        batch.RecordInput(b"v" * args.value_bytes, None, (), now + i) for i in range(args.records)
    ]
    with open("/proc/loadavg") as f:
        print(f"load before: {f.read().strip()}")
    print("| round | pure Python, us/record | C, us/record |")
    print("| ---: | ---: | ---: |")
    for r in range(args.rounds):
        py = per_record_us(batch.encode_records_python, records, 50)
        c = per_record_us(batch._recordencode.encode_records, records, 200)
        print(f"| {r} | {py:.2f} | {c:.2f} |")
    with open("/proc/loadavg") as f:
        print(f"load after: {f.read().strip()}")


if __name__ == "__main__":
    main()
