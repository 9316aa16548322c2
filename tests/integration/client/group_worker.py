"""A group member in its own process, for tests that SIGKILL a client.

    python -m tests.integration.client.group_worker URLS GROUP TOPIC OUT

Consumes TOPIC as a member of GROUP with the sync Consumer, commits after
every poll (manual commits), and appends to OUT, flushed line by line:
`assigned P`, `revoked P`, `lost P`, `record P OFFSET` for each record
returned, and `committed P OFFSET` once a commit is acknowledged. Runs until
killed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from lograft.client import Consumer, TopicPartition


def main(urls: str, group: str, topic: str, out_path: str) -> None:
    out: TextIO = open(out_path, "a", buffering=1)  # noqa: SIM115 - lives until killed

    def note(kind: str, tps: list[TopicPartition]) -> None:
        for tp in tps:
            out.write(f"{kind} {tp.partition}\n")

    consumer = Consumer(
        urls, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.subscribe(
        [topic],
        on_assign=lambda tps: note("assigned", tps),
        on_revoke=lambda tps: note("revoked", tps),
        on_lost=lambda tps: note("lost", tps),
    )
    while True:
        got = consumer.poll(timeout_ms=100, max_records=20)
        for tp, records in got.items():
            for r in records:
                out.write(f"record {tp.partition} {r.offset}\n")
        if got:
            positions = {tp: records[-1].offset + 1 for tp, records in got.items()}
            consumer.commit(positions)
            for tp, offset in positions.items():
                out.write(f"committed {tp.partition} {offset}\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
