"""A storage-engine demo: what `scripts/cluster.sh start` runs until the cluster exists.

Appends keyed JSON records to a partition log under data/demo/orders-0, reads
them back, looks an offset up by timestamp, and prints the dump-log command.
Run it twice: the log persists and offsets continue where they stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lograft.storage.batch import RecordInput, build_batch, iter_records
from lograft.storage.config import LogConfig
from lograft.storage.log import Log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="data/demo", help="where the demo log lives")
    parser.add_argument("--records", type=int, default=10_000, help="records to append")
    args = parser.parse_args()

    directory = Path(args.data_dir) / "orders-0"
    log = Log(directory, LogConfig(segment_bytes=1 << 20))
    print(f"opened {directory}: {log.recovery.summary()}")
    print(f"log start offset {log.log_start_offset}, log end offset {log.log_end_offset}")

    started = time.perf_counter()
    batch_size = 500
    first_ts = int(time.time() * 1000)
    for start in range(0, args.records, batch_size):
        now = int(time.time() * 1000)
        records = [
            RecordInput(
                value=json.dumps({"order": start + i, "amount": (start + i) % 97}).encode(),
                key=f"customer-{(start + i) % 10}".encode(),
            )
            for i in range(min(batch_size, args.records - start))
        ]
        log.append(build_batch(records, timestamp_ms=now), leader_epoch=0)
        done = min(start + batch_size, args.records)
        print(f"\rappended {done}/{args.records} records", end="", file=sys.stderr)
    print(file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(f"appended {args.records} records in {elapsed:.2f} s; "
          f"log end offset now {log.log_end_offset}, {log.segment_count} segments")

    tail = list(iter_records(log.read(max(log.log_end_offset - 3, 0), 1 << 20)))[-3:]
    for rec in tail:
        print(f"offset {rec.offset} key {rec.key!r} value {rec.value!r}")
    found = log.offset_for_timestamp(first_ts)
    if found is not None:
        print(f"first record at or after {first_ts} ms is offset {found.offset}")
    first_segment = log.segments()[0].log_path
    log.close()
    print("\ntry:")
    print(f"  .venv/bin/lograft dump-log --records {first_segment} | head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
