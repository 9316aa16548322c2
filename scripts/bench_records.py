#!/usr/bin/env python3
"""Encode and decode speed of metadata records and `__consumer_offsets` records.

No node, no disk: the codecs alone, on records built before the clock starts.

1. **metadata log**: `--records` (100,000) metadata records in batches of 10,
   as a Raft log holds them (mostly PartitionChange, some Partition, Config,
   RegisterBroker, BrokerRegistrationChange): `encode_batch` of every batch,
   then `decode_batch` of every batch (what a node does replaying the log).
2. **metadata snapshot**: the same records as one batch (a snapshot's shape).
3. **produce JSON body**: `parse_produce_body` of one `POST .../records` body
   of 10,000 records (the default `produce_records_max`; keyed, a small JSON
   object value, one header), the figure per record of it.
4. **group records**: `--records` `__consumer_offsets` (key, value) pairs
   (mostly offset commits, some member metadata, current and target
   assignments, tombstones): `encode_record` of each, then `decode_record` of
   each (what a new coordinator does replaying its partition).

Each case runs `--repeat` (5) times; the table gives the best round, in
records per second and microseconds per record (`--json`: seconds per
record).

    .venv/bin/python scripts/bench_records.py [--records 100000] [--repeat 5] [--json]

To measure another checkout's codecs, put it first on the path:

    PYTHONPATH=/path/to/checkout .venv/bin/python scripts/bench_records.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import log, machine  # a sibling script

from lograft.api.records_json import parse_produce_body
from lograft.brokers.groups.records import (
    CurrentMemberAssignmentKey,
    CurrentMemberAssignmentValue,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentMemberKey,
    TargetAssignmentMemberValue,
    decode_record,
    encode_record,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.records import (
    BrokerAction,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Partition,
    PartitionChange,
    RegisterBroker,
    decode_batch,
    encode_batch,
    endpoints_from,
)

BATCH = 10
PRODUCE_RECORDS = 10_000


def metadata_records(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        topic_id = f"00000000-0000-0000-0000-{i // 100:012d}"
        kind = i % 20
        if kind < 12:
            out.append(PartitionChange(topic_id, i % 100, isr=(1, 2, 3), leader=1 + i % 3))
        elif kind < 16:
            out.append(Partition(topic_id, i % 100, (1, 2, 3), (1, 2, 3), 1, i, i))
        elif kind < 18:
            out.append(Config(ConfigResourceType.TOPIC, f"topic-{i}", "retention.ms", str(i)))
        elif kind == 18:
            eps = endpoints_from({"http": f"http://h{i}:9092", "raft": f"h{i}:9093"})
            out.append(RegisterBroker(i, f"inc-{i}", i, eps, "rack-1"))
        else:
            out.append(BrokerRegistrationChange(i, i, BrokerAction.UNFENCE))
    return out


def group_records(n: int) -> list[GroupRecord]:
    out: list[GroupRecord] = []
    for i in range(n):
        group, member = f"group-{i % 50}", f"member-{i % 500}"
        kind = i % 20
        if kind < 14:
            out.append(
                GroupRecord(
                    OffsetCommitKey(group, f"topic-{i % 7}", i % 64),
                    OffsetCommitValue(i, 3, "", 1_700_000_000_000 + i),
                )
            )
        elif kind < 16:
            out.append(
                GroupRecord(
                    MemberMetadataKey(group, member),
                    MemberMetadataValue("client", "10.0.0.1", ("a", "b"), None, 45_000),
                )
            )
        elif kind < 18:
            parts = frozenset(TopicPartition(f"t{j % 3}", j) for j in range(8))
            out.append(
                GroupRecord(
                    CurrentMemberAssignmentKey(group, member),
                    CurrentMemberAssignmentValue(i, i - 1, MemberState.STABLE, parts, frozenset()),
                )
            )
        elif kind == 18:
            parts = frozenset(TopicPartition(f"t{j % 3}", j) for j in range(8))
            out.append(
                GroupRecord(
                    TargetAssignmentMemberKey(group, member), TargetAssignmentMemberValue(parts)
                )
            )
        else:
            out.append(GroupRecord.tombstone(MemberMetadataKey(group, member)))
    return out


def produce_body(n: int) -> bytes:
    records = [
        {"key": f"key-{i}", "value": {"n": i, "name": "some text"}, "headers": {"trace": "t"}}
        for i in range(n)
    ]
    return json.dumps({"records": records}).encode()


def best(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run(n: int, repeat: int) -> dict[str, float]:
    records = metadata_records(n)
    batches = [records[i : i + BATCH] for i in range(0, n, BATCH)]
    encoded = [encode_batch(b) for b in batches]
    snapshot = encode_batch(records)
    groups = group_records(n)
    pairs = [encode_record(r) for r in groups]
    assert [decode_record(k, v) for k, v in pairs] == groups
    assert decode_batch(snapshot) == records
    body = produce_body(PRODUCE_RECORDS)
    cases: dict[str, Callable[[], Any]] = {
        "metadata log encode": lambda: [encode_batch(b) for b in batches],
        "metadata log decode": lambda: [decode_batch(b) for b in encoded],
        "metadata snapshot encode": lambda: encode_batch(records),
        "metadata snapshot decode": lambda: decode_batch(snapshot),
        "produce body parse": lambda: parse_produce_body(body, records_max=PRODUCE_RECORDS),
        "group records encode": lambda: [encode_record(r) for r in groups],
        "group records decode": lambda: [decode_record(k, v) for k, v in pairs],
    }
    out = {}
    for name, fn in cases.items():
        log(f"{name} ...")
        # Seconds per record: the produce body holds PRODUCE_RECORDS of them.
        out[name] = best(repeat, fn) / (PRODUCE_RECORDS if name.startswith("produce") else n)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    figures = run(args.records, args.repeat)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"# {machine()}")
    print(f"# {args.records:,} records, best of {args.repeat}")
    print(f"{'case':<26} {'records/s':>12} {'us/record':>10}")
    for name, seconds in figures.items():
        print(f"{name:<26} {1 / seconds:>12,.0f} {seconds * 1e6:>10.2f}")


if __name__ == "__main__":
    main()
