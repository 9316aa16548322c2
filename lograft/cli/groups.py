"""`lograft groups list|describe|delete|reset-offsets`, as kafka-consumer-groups does.

`list` asks any node (`GET /v1/groups`, which asks every live broker). The
others concern one group and go to its coordinator, as the API requires;
both through `lograft.client.Admin`, which finds and follows the coordinator.

`reset-offsets` is in `cli.groups_reset`.
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
    finish_parser,
    non_negative_int,
)
from lograft.cli.groups_reset import cmd_reset_offsets
from lograft.cli.output import grid, print_json, print_rich, text, wants_json
from lograft.errors import GroupIdNotFoundError

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
