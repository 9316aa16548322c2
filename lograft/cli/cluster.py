"""`lograft cluster status`: the cluster view of `GET /v1/cluster` as a person reads it."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import RenderableType

from lograft.cli.common import EXIT_OK, Streams, client_for, finish_parser
from lograft.cli.output import cell, grid, pairs, print_json, print_rich, text, wants_json


def add_parser(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="cluster-wide views", description="Cluster views.")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND")
    cluster_sub.required = True
    status = cluster_sub.add_parser(
        "status",
        help="cluster id, active controller, Raft term and commit index, voters, brokers",
        description="Show the cluster as the node that answers sees it: cluster id, active "
        "controller, Raft term and commit index, the voters, and every broker with whether it "
        "is fenced.",
    )
    finish_parser(status, cmd_status, "cluster status")


def cmd_status(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.cluster()
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    print_rich(render_status(doc), streams.stdout)
    return EXIT_OK


def render_status(doc: dict[str, Any]) -> list[RenderableType]:
    raft = doc.get("raft") or {}
    brokers = doc.get("brokers") or []
    fenced = sum(1 for b in brokers if b.get("fenced"))
    summary = [
        ("cluster id", doc.get("cluster_id")),
        ("answered by", f"node {cell(doc.get('node_id'))} (Raft {cell(raft.get('role'))})"),
        ("active controller", doc.get("active_controller")),
        ("raft term", raft.get("term")),
        ("commit index", raft.get("commit_index")),
        ("quorum", raft.get("has_quorum")),
        ("metadata offset", doc.get("metadata_offset")),
        ("topics", doc.get("topics")),
        ("brokers", f"{len(brokers)} ({len(brokers) - fenced} unfenced, {fenced} fenced)"),
    ]
    lines: list[RenderableType] = [pairs(summary), text(""), text("voters:")]
    lines.append(
        grid(
            ["ID", "SELF", "CONNECTED", "MATCH-INDEX"],
            [
                (v.get("node_id"), v.get("is_self"), v.get("connected"), v.get("match_index"))
                for v in raft.get("voters") or []
            ],
            indent=2,
        )
    )
    observers = raft.get("observers") or []
    if observers:
        lines += [text(""), text(f"observers: {cell(observers)}")]
    lines += [text(""), text("brokers:")]
    lines.append(
        grid(
            ["ID", "STATE", "FENCED", "EPOCH", "RACK", "ENDPOINT"],
            [
                (
                    b.get("id"),
                    b.get("state"),
                    b.get("fenced"),
                    b.get("epoch"),
                    b.get("rack"),
                    " ".join((b.get("endpoints") or {}).values()),
                )
                for b in brokers
            ],
            indent=2,
        )
    )
    return lines
