"""`lograft groups list|describe|delete|reset-offsets`, as kafka-consumer-groups does.

`list` asks any node (`GET /v1/groups`, which asks every live broker). The
others concern one group and go to its coordinator, as the API requires;
both through `lograft.client.Admin`, which finds and follows the coordinator.

`reset-offsets --dry-run` computes the new offsets with the coordinator's own
rule (`protocol.offset_reset.resolve_reset_offsets` over each partition
leader's offsets, read through the client's Consumer) and changes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from rich.console import RenderableType

from lograft.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    Streams,
    client_for,
    connection_settings,
    count,
    finish_parser,
    non_negative_int,
)
from lograft.cli.output import grid, print_json, print_rich, text, wants_json
from lograft.cli.progress import waiting
from lograft.errors import (
    GroupIdNotFoundError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.offset_reset import (
    OffsetResetStrategy,
    PartitionBounds,
    resolve_reset_offsets,
)

DEAD = "dead"


def add_parser(sub: Any) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe, delete consumer groups, reset their offsets"
    )
    gsub = groups.add_subparsers(dest="groups_command", metavar="COMMAND")
    gsub.required = True

    lst = gsub.add_parser(
        "list",
        help="every group: state, members, coordinator",
        description="List the consumer groups of the cluster.",
    )
    finish_parser(lst, cmd_list, "groups list")

    describe = gsub.add_parser(
        "describe",
        help="state, members, assignment, committed offsets and lag per partition",
        description="Describe a consumer group: its state and members, and per partition "
        "the committed offset, high watermark, lag and owning member.",
    )
    describe.add_argument("group", metavar="GROUP")
    finish_parser(describe, cmd_describe, "groups describe")

    delete = gsub.add_parser(
        "delete",
        help="delete a group without members",
        description="Delete a consumer group and its committed offsets. The group must "
        "have no members.",
    )
    delete.add_argument("group", metavar="GROUP")
    finish_parser(delete, cmd_delete, "groups delete")

    reset = gsub.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (group without members)",
        description="Set the committed offsets of a group without members, for every "
        "partition of a topic or the ones given. New offsets stay within each "
        "partition's [log start, high watermark].",
    )
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True, metavar="TOPIC")
    reset.add_argument(
        "--partitions",
        type=partition_list,
        metavar="P[,P...]",
        help="only these partitions of the topic (default: all)",
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start")
    to.add_argument("--to-latest", action="store_true", help="the high watermark")
    to.add_argument(
        "--to-timestamp",
        type=non_negative_int,
        metavar="MS",
        help="the first record at or after this time (ms since the epoch), else the high watermark",
    )
    to.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="this offset, clamped into range"
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="print the new offsets, change nothing"
    )
    reset.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a spinner on stderr while waiting (default: when stderr is a terminal and "
        "the wait lasts over a second)",
    )
    finish_parser(reset, cmd_reset_offsets, "groups reset-offsets")


def partition_list(text: str) -> list[int]:
    """`0,2,5` -> [0, 2, 5] (sorted, no duplicates)."""
    try:
        numbers = {int(p) for p in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write partitions as numbers with commas, e.g. 0,2,5"
        ) from None
    if any(p < 0 for p in numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: partitions are 0 or more")
    return sorted(numbers)


# -- list ----------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.list_groups()
    if wants_json(args):
        print_json(doc, streams.stdout)
    else:
        groups = doc.get("groups") or []
        rows = [
            (g.get("group_id"), g.get("state"), g.get("members"), g.get("coordinator_id"))
            for g in groups
        ]
        if rows:
            print_rich([grid(["GROUP", "STATE", "MEMBERS", "COORDINATOR"], rows)], streams.stdout)
        else:
            streams.stdout.write("no groups\n")
    gaps = incomplete_list_text(doc)
    if gaps is None:
        return EXIT_OK
    streams.stderr.write(f"lograft {args.cmd_name}: {gaps}\n")
    return EXIT_FAILURE


def incomplete_list_text(doc: Mapping[str, Any]) -> str | None:
    """Why the list may lack groups, or None when every broker answered in full."""
    unreachable = doc.get("unreachable_brokers") or []
    loading = doc.get("loading_partitions") or []
    reasons = []
    if unreachable:
        reasons.append(f"broker(s) {', '.join(map(str, unreachable))} did not answer")
    if loading:
        reasons.append(
            f"__consumer_offsets partition(s) {', '.join(map(str, loading))} are still loading"
        )
    if not reasons:
        return None
    return f"the list may be incomplete: {'; '.join(reasons)}. Run it again shortly."


# -- describe ------------------------------------------------------------------------------------


def cmd_describe(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.describe_group(args.group)
        coordinator_url = admin.coordinator_url(args.group)
    if doc.get("state") == DEAD:
        raise GroupIdNotFoundError(f"group {args.group!r} does not exist", group_id=args.group)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    print_rich(render_describe(doc, coordinator_url), streams.stdout)
    return EXIT_OK


def render_describe(
    doc: Mapping[str, Any], coordinator_url: str | None = None
) -> list[RenderableType]:
    members = doc.get("members") or []
    offsets = doc.get("offsets") or []
    lags = [o["lag"] for o in offsets if o.get("lag") is not None]
    lines: list[RenderableType] = [
        text(
            f"group {doc.get('group_id')}  state {doc.get('state')}  "
            f"group epoch {doc.get('group_epoch')}  "
            f"assignment epoch {doc.get('assignment_epoch')}  assignor {doc.get('assignor')}"
        ),
        text(
            f"coordinator {coordinator_url or '-'}  members {len(members)}  "
            f"total lag {sum(lags) if lags else '-'}"
        ),
        text(""),
    ]
    clients = {m.get("member_id"): m.get("client_id") or "-" for m in members}
    rows: list[tuple[Any, ...]]  # one table after another, each with its own columns
    if offsets:
        rows = [
            (
                o.get("topic"),
                o.get("partition"),
                o.get("committed_offset"),
                o.get("high_watermark"),
                o.get("lag"),
                o.get("owner"),
                clients.get(o.get("owner")),
            )
            for o in offsets
        ]
        headers = ["TOPIC", "PARTITION", "COMMITTED", "HIGH-WATERMARK", "LAG", "OWNER", "CLIENT-ID"]
        lines.append(grid(headers, rows))
    else:
        lines.append(text("no committed offsets and no assigned partitions"))
    if members:
        lines.append(text(""))
        rows = [
            (
                m.get("member_id"),
                m.get("client_id") or None,
                m.get("client_host") or None,
                m.get("member_epoch"),
                m.get("member_state"),
                m.get("subscribed_topics"),
                partitions_text(m.get("assigned")),
                partitions_text(m.get("pending_revocation")),
            )
            for m in members
        ]
        headers = ["MEMBER", "CLIENT-ID", "HOST", "EPOCH", "STATE", "SUBSCRIBED", "ASSIGNED"]
        lines.append(grid([*headers, "REVOKING"], rows))
    return lines


def partitions_text(parts: Mapping[str, list[int]] | None) -> str | None:
    """`{"orders": [0, 1], "audit": [2]}` -> `audit:2;orders:0,1` (None when empty)."""
    if not parts:
        return None
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(parts.items()))


# -- delete --------------------------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        admin.delete_group(args.group)
    if wants_json(args):
        print_json({"group": args.group, "deleted": True}, streams.stdout)
        return EXIT_OK
    streams.stdout.write(f"deleted group {args.group}\n")
    return EXIT_OK


# -- reset-offsets -------------------------------------------------------------------------------


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
