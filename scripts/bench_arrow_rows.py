#!/usr/bin/env python3
"""What the Spark source's columnar decode costs against the client's
per-record decode, on one raw fetch response (docs/benchmarks.md, "Spark
pipelines").

The response is built before the clock starts: `--batches` RecordBatch v2
batches of `--records` records each, `--value-bytes` values, no key, no
compression (16 x 592 x 100 B is about 1 MiB). Timed, best of `--repeat`:

1. `lograft.pipelines.arrow_rows.fetch_rows`: CRCs checked, every record
   decoded by the C extension (`lograft.protocol.record_columns`) straight
   into the buffers one Arrow batch wraps;
2. the client's path (`lograft/client/fetcher.py`): `decode_records` of each
   batch's records section, one `Record` object per record.

    .venv/bin/python scripts/bench_arrow_rows.py [--batches N] [--records N] [--value-bytes N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from lograft.pipelines.arrow_rows import fetch_rows
from lograft.protocol import record_columns
from lograft.protocol.batch import (
    RecordInput,
    build_batch,
    decode_records,
    iter_batches,
    records_section,
)


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--records", type=int, default=592, help="records per batch")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=20, help="best of this many runs")
    args = ap.parse_args()

    per_batch = args.records
    body = b"".join(
        build_batch(
            [RecordInput(b"v" * args.value_bytes)] * per_batch,
            timestamp_ms=0,
            base_offset=b * per_batch,
        )
        for b in range(args.batches)
    )
    total = args.batches * per_batch

    def columnar() -> int:
        batch = fetch_rows("t", 0, body, 0, total, False).batch
        return 0 if batch is None else batch.num_rows

    def per_record() -> int:
        return sum(
            1
            for pos, header in iter_batches(body)
            for _ in decode_records(records_section(body, pos, header), header)
        )

    if columnar() != total or per_record() != total:
        raise SystemExit("decoded a different number of records than were built")
    print(
        f"response: {len(body):,} bytes, {total:,} records ({args.batches} batches), "
        f"record_columns implementation: {record_columns.IMPLEMENTATION}"
    )
    print(f"Arrow batch (fetch_rows)                  {best_ms(columnar, args.repeat):8.2f} ms")
    print(f"per-record decode (client decode_records) {best_ms(per_record, args.repeat):8.2f} ms")


if __name__ == "__main__":
    main()
