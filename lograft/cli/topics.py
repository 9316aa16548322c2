"""`lograft topics create|list|describe|delete|alter`, as kafka-topics does.

Each is one call of `lograft.client.Admin` (the admin API, `/v1/topics...`);
changes are answered once committed by the controller, so a `describe` right
after a `create` sees the topic on the node that made it.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import RenderableType

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    client_for,
    config_pair,
    count,
    finish_parser,
    positive_int,
)
from lograft.cli.output import cell, grid, print_json, print_rich, text, wants_json


def add_parser(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete, alter topics")
    tsub = topics.add_subparsers(dest="topics_command", metavar="COMMAND")
    tsub.required = True

    create = tsub.add_parser("create", help="create a topic", description="Create a topic.")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--partitions", type=positive_int, metavar="N", help="partition count (server: 1)"
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="R",
        help="replicas per partition (server: min(3, brokers))",
    )
    create.add_argument(
        "--config",
        type=config_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. retention_ms=86400000 or Kafka's retention.ms=86400000 "
        "(repeatable)",
    )
    finish_parser(create, cmd_create, "topics create")

    lst = tsub.add_parser("list", help="list topics", description="List topics.")
    finish_parser(lst, cmd_list, "topics list")

    describe = tsub.add_parser(
        "describe",
        help="per partition: leader, replicas, ISR, log start/end, high watermark",
        description="Describe a topic: configs, and per partition the leader, replicas, ISR, "
        "log start and end offsets and high watermark.",
    )
    describe.add_argument("name", metavar="NAME")
    finish_parser(describe, cmd_describe, "topics describe")

    delete = tsub.add_parser("delete", help="delete a topic", description="Delete a topic.")
    delete.add_argument("name", metavar="NAME")
    finish_parser(delete, cmd_delete, "topics delete")

    alter = tsub.add_parser(
        "alter",
        help="raise the partition count, set or remove configs",
        description="Change a topic: raise its partition count (never lower), set configs, "
        "remove configs (back to the cluster default). Give at least one change.",
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--partitions", type=positive_int, metavar="N", help="new partition count")
    alter.add_argument(
        "--config", type=config_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    finish_parser(alter, cmd_alter, "topics alter")


# -- create / delete / alter ----------------------------------------------------------------


def cmd_create(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.create_topic(
            args.name,
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            configs=dict(args.config),
        )
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    parts = doc.get("partitions") or []
    rf = len(parts[0]["replicas"]) if parts else 0
    streams.stdout.write(
        f"created topic {doc.get('name', args.name)}: {count(len(parts), 'partition')}, "
        f"replication factor {rf} (topic id {doc.get('topic_id')})\n"
    )
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        admin.delete_topic(args.name)
    if wants_json(args):
        print_json({"topic": args.name, "deleted": True}, streams.stdout)
        return EXIT_OK
    streams.stdout.write(f"deleted topic {args.name}\n")
    return EXIT_OK


def cmd_alter(args: argparse.Namespace, streams: Streams) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        args.parser.error("give at least one of --partitions, --config, --delete-config")
    both = {k for k, _ in args.config} & set(args.delete_config)
    if both:
        args.parser.error(f"both set and deleted: {', '.join(sorted(both))}")
    with client_for(args) as admin:
        changes = _alter(admin, args)
    if wants_json(args):
        print_json({"topic": args.name, **changes}, streams.stdout)
        return EXIT_OK
    for key, value in changes["configs"].items():
        what = f"removed config {key}" if value is None else f"set config {key}={value}"
        streams.stdout.write(f"topic {args.name}: {what}\n")
    if args.partitions is not None:
        streams.stdout.write(f"topic {args.name}: now {count(args.partitions, 'partition')}\n")
    return EXIT_OK


def _alter(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Make the changes; what was changed: `configs` (key -> value, None when
    removed) and `partitions` (the new count, or None)."""
    # Configs first: they are the change more likely to be refused, and a refused
    # request then leaves the topic as it was (a partition increase cannot be undone).
    changes: dict[str, str | None] = dict(args.config)
    changes.update({k: None for k in args.delete_config})
    if changes:
        admin.alter_topic_configs(args.name, changes)
    if args.partitions is not None:
        admin.create_partitions(args.name, args.partitions)
    return {"configs": changes, "partitions": args.partitions}


# -- list / describe ------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.list_topics()
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    topics = sorted(doc.get("topics") or [], key=lambda t: t.get("name", ""))
    if not topics:
        streams.stdout.write("no topics\n")
        return EXIT_OK
    rows = [
        (t.get("name"), t.get("partitions"), t.get("replication_factor"), _configs(t))
        for t in topics
    ]
    print_rich([grid(["NAME", "PARTITIONS", "RF", "CONFIGS"], rows)], streams.stdout)
    return EXIT_OK


def cmd_describe(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.describe_topic(args.name)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    print_rich(render_describe(doc), streams.stdout)
    return EXIT_OK


def render_describe(doc: dict[str, Any]) -> list[RenderableType]:
    parts = doc.get("partitions") or []
    rf = len(parts[0].get("replicas") or []) if parts else 0
    lines: list[RenderableType] = [
        text(
            f"topic {doc.get('name')}  id {doc.get('topic_id')}  "
            f"partitions {len(parts)}  replication factor {rf}"
        ),
        text(f"configs: {_configs(doc)}"),
        text(""),
    ]
    rows = [_partition_row(p) for p in sorted(parts, key=lambda p: p.get("partition", 0))]
    headers = ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LOG-START", "LOG-END", "HW"]
    lines.append(grid([*headers, "STATUS"], rows))
    return lines


def _partition_row(p: dict[str, Any]) -> list[Any]:
    leader = p.get("leader")
    offline = p.get("offline") or leader is None or leader < 0
    replicas = p.get("replicas") or []
    isr = p.get("isr") or []
    if offline:
        status = "offline"
    elif len(isr) < len(replicas):
        status = "under-replicated"
    else:
        status = "ok"
    return [
        p.get("partition"),
        "none" if offline else leader,
        p.get("leader_epoch"),
        replicas,
        isr,
        p.get("log_start_offset"),
        p.get("log_end_offset"),
        p.get("high_watermark"),
        status,
    ]


def _configs(doc: dict[str, Any]) -> str:
    configs = doc.get("configs") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or cell(None)
