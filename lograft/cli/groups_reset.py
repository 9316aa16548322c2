"""`lograft groups reset-offsets`: move a group's committed offsets, as
kafka-consumer-groups --reset-offsets does (docs/cli.md, "lograft groups").

The reset is one request to the coordinator (`lograft.client.Admin`);
`--dry-run` computes the new offsets with the coordinator's own rule
(`protocol.offset_reset.resolve_reset_offsets` over each partition leader's
offsets, read through the client's Consumer) and changes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from lograft.cli.common import EXIT_OK, Streams, client_for, connection_settings, count
from lograft.cli.output import grid, print_json, print_rich, text, wants_json
from lograft.cli.progress import waiting
from lograft.errors import NonEmptyGroupError, UnknownTopicOrPartitionError
from lograft.protocol.offset_reset import (
    OffsetResetStrategy,
    PartitionBounds,
    resolve_reset_offsets,
)


def reset_request(args: argparse.Namespace) -> dict[str, Any]:
    """The body of `POST /v1/groups/{group}/offsets/reset` for the options given."""
    body: dict[str, Any]
    if args.to_earliest:
        body = {"strategy": OffsetResetStrategy.EARLIEST.value}
    elif args.to_latest:
        body = {"strategy": OffsetResetStrategy.LATEST.value}
    elif args.to_timestamp is not None:
        body = {"strategy": OffsetResetStrategy.TIMESTAMP.value, "timestamp": args.to_timestamp}
    else:
        body = {"strategy": OffsetResetStrategy.OFFSET.value, "offset": args.to_offset}
    if args.partitions is None:
        body["topics"] = [args.topic]
    else:
        body["partitions"] = [{"topic": args.topic, "partition": p} for p in args.partitions]
    return body


def cmd_reset_offsets(args: argparse.Namespace, streams: Streams) -> int:
    body = reset_request(args)
    rows: list[tuple[Any, ...]]
    what = "reading the offsets of" if args.dry_run else "resetting the offsets of"
    where = "every partition" if args.partitions is None else f"{len(args.partitions)} partitions"
    message = f"{what} {where} of {args.topic} for group {args.group}"
    with client_for(args) as admin, waiting(streams.stderr, mode=args.progress, message=message):
        if args.dry_run:
            rows = _dry_run(admin, args, body)
        else:
            doc = admin.reset_offsets(args.group, body)
    if not args.dry_run:
        offsets = doc.get("offsets") or []
        rows = [(o.get("topic"), o.get("partition"), o.get("offset")) for o in offsets]
    if wants_json(args):
        print_json(reset_json(args, body["strategy"], rows), streams.stdout)
        return EXIT_OK
    if args.dry_run:
        headers = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
        tail = f"dry run: group {args.group} unchanged; run without --dry-run to reset"
    else:
        headers = ["TOPIC", "PARTITION", "NEW-OFFSET"]
        tail = f"reset {count(len(rows), 'partition')} of group {args.group} ({body['strategy']})"
    print_rich([grid(headers, rows), text(tail)], streams.stdout)
    return EXIT_OK


def reset_json(args: argparse.Namespace, strategy: str, rows: list[tuple[Any, ...]]) -> Any:
    """`--output json` of reset-offsets: the dry run's rows carry the current offset too."""
    if args.dry_run:
        offsets = [
            {"topic": t, "partition": p, "current_offset": c, "new_offset": n}
            for t, p, c, n in rows
        ]
    else:
        offsets = [{"topic": t, "partition": p, "new_offset": n} for t, p, n in rows]
    return {"group": args.group, "strategy": strategy, "dry_run": args.dry_run, "offsets": offsets}


def _dry_run(
    admin: Any,
    args: argparse.Namespace,
    body: Mapping[str, Any],
) -> list[tuple[str, int, int | None, int]]:
    described = admin.describe_group(args.group)
    members = described.get("members") or []
    if members:
        # What the reset itself would answer: only a group without members may be reset.
        raise NonEmptyGroupError(
            f"group {args.group!r} has {count(len(members), 'member')} "
            f"(state {described.get('state')}); stop its consumers before resetting",
            group_id=args.group,
        )
    current = {
        (o["topic"], o["partition"]): o.get("committed_offset")
        for o in described.get("offsets") or []
    }
    bounds = _bounds(args, body.get("timestamp"))
    new = resolve_reset_offsets(OffsetResetStrategy(body["strategy"]), bounds, body.get("offset"))
    return [
        (tp.topic, tp.partition, current.get((tp.topic, tp.partition)), offset)
        for tp, offset in sorted(new.items(), key=lambda kv: kv[0].partition)
    ]


def _bounds(args: argparse.Namespace, timestamp: int | None) -> dict[Any, PartitionBounds]:
    """Per partition of --topic (or --partitions): log start, high watermark and
    the offset for --to-timestamp, from each partition's leader."""
    from lograft.client import Consumer, TopicPartition

    with Consumer(args.bootstrap, client_id="lograft-cli", request_timeout_ms=args.timeout_ms,
                  default_api_timeout_ms=args.timeout_ms,
                  **connection_settings(args)) as consumer:  # fmt: skip
        numbers = sorted(consumer.partitions_for_topic(args.topic))
        only = args.partitions
        missing = sorted(set(only or ()) - set(numbers))
        if missing:
            raise UnknownTopicOrPartitionError(
                f"topic {args.topic!r} has no partition {','.join(map(str, missing))}; it has "
                f"{len(numbers)} (0..{len(numbers) - 1})",
                topic=args.topic,
                partition=missing[0],
            )
        tps = [TopicPartition(args.topic, p) for p in (only if only is not None else numbers)]
        starts, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        found: dict[Any, tuple[int, int] | None] = {}
        if timestamp is not None:
            found = consumer.offsets_for_times({tp: timestamp for tp in tps})
    return {
        tp: PartitionBounds(
            log_start_offset=starts[tp],
            high_watermark=ends[tp],
            offset_for_timestamp=hit[0] if (hit := found.get(tp)) is not None else None,
        )
        for tp in tps
    }
