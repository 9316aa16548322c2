#!/usr/bin/env python3
"""The JSON produce leader's own CPU per request, in one process, per step.

What a node does with a JSON produce body that no other request does, as
`DataRoutes.produce_json` runs it for bench_compare's body (500 keyless
records, `value_format: string`, `--sizes` bytes of value each): the msgspec
decode (`records_json.decode_produce_body`), the records as columns
(`produce_columns.plain_columns`), the partition's batch
(`PlainColumns.batch`, the C column encoder) and the answer
(`routes_data._in_order_answer`). Each step is timed with
`time.process_time` over `--requests` calls, in `--rounds` rounds; the
median round is printed, in microseconds per request.

No node, no sockets: the figure holds under the load of a shared machine
far better than a cluster's CPU per record (whose fixed per-second costs and
scheduling move with the load). Run it with each tree's interpreter, in
alternation, to compare them (each imports its own tree):

    /work/main/.venv/bin/python scripts/bench_json_leader.py
    .venv/bin/python scripts/bench_json_leader.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from lograft.api import routes_data
from lograft.api.produce_columns import plain_columns
from lograft.api.records_json import decode_produce_body
from lograft.protocol.produce_wire import AppendResult

RECORDS = 500
RECORDS_MAX = 10_000  # DataLimits.produce_records_max
FIRST_OFFSET = 123_456_789  # an offset of a partition that has taken a while


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Process CPU microseconds per call of `fn`."""
    fn()
    started = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - started) / calls * 1e6


def steps(value_bytes: int) -> dict[str, Callable[[], object]]:
    body = json.dumps(
        {"value_format": "string", "records": [{"value": "x" * value_bytes}] * RECORDS}
    ).encode()
    doc = decode_produce_body(body, records_max=RECORDS_MAX)
    columns = plain_columns(doc)
    assert columns is not None
    now_ms = int(time.time() * 1000)
    batch = columns.batch(range(RECORDS), now_ms)
    prepared = routes_data.PreparedProduce(None, RECORDS, {0: range(RECORDS)}, {0: batch})
    outcomes = {0: AppendResult(FIRST_OFFSET, FIRST_OFFSET + RECORDS - 1, -1, False)}
    return {
        "decode": lambda: decode_produce_body(body, records_max=RECORDS_MAX),
        "columns": lambda: plain_columns(doc),
        "batch": lambda: columns.batch(range(RECORDS), now_ms),
        "answer": lambda: routes_data._in_order_answer(prepared, outcomes),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1024], help="value bytes")
    p.add_argument("--requests", type=int, default=500, help="calls per step and round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    tree = os.path.dirname(os.path.dirname(os.path.abspath(routes_data.__file__)))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"tree {tree} ({os.path.basename(sys.executable)}), load {load}")
    for size in args.sizes:
        timed = steps(size)
        rounds: dict[str, list[float]] = {name: [] for name in timed}
        for _ in range(args.rounds):
            for name, fn in timed.items():
                rounds[name].append(per_call_us(fn, args.requests))
        medians = {name: statistics.median(us) for name, us in rounds.items()}
        shown = "  ".join(f"{name} {us:.1f}" for name, us in medians.items())
        print(
            f"{size} B values, us per request (median of {args.rounds}): {shown}  "
            f"total {sum(medians.values()):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
