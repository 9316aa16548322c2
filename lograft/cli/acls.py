"""`lograft acls add|list|remove`, as kafka-acls does.

Each is one call of `lograft.client.Admin` (`/v1/acls`). A resource is named
with `--topic NAME`, `--group NAME`, `--transactional-id NAME` or `--cluster`;
`add` takes one principal and resource and one or more `--operation`s (one
binding each). `list` and `remove` take a filter: every option left out
matches anything, and `remove` needs at least one option, or `--all`.
"""

from __future__ import annotations

import argparse
from typing import Any

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    client_for,
    count,
    finish_parser,
)
from lograft.cli.output import grid, print_json, print_rich, wants_json

CLUSTER_NAME = "kafka-cluster"
OPERATIONS = (
    "all",
    "read",
    "write",
    "create",
    "delete",
    "alter",
    "describe",
    "cluster_action",
    "describe_configs",
    "alter_configs",
)


def add_parser(sub: Any) -> None:
    acls = sub.add_parser("acls", help="add, list, remove ACL bindings")
    asub = acls.add_subparsers(dest="acls_command", metavar="COMMAND")
    asub.required = True

    add = asub.add_parser(
        "add",
        help="allow (or deny) a principal operations on a resource",
        description="Add ACL bindings: PRINCIPAL may (or, with --deny, may not) do each "
        "--operation on the resource, from --host. Bindings that exist are left as they are.",
    )
    add.add_argument("--principal", required=True, metavar="TYPE:NAME", help="e.g. User:alice")
    _resource_args(add, required=True)
    add.add_argument(
        "--operation",
        action="append",
        required=True,
        choices=OPERATIONS,
        metavar="OP",
        help=f"one of {', '.join(OPERATIONS)} (repeatable)",
    )
    add.add_argument(
        "--prefixed", action="store_true", help="the name is a prefix (default: literal)"
    )
    add.add_argument("--host", default="*", help="an IP address, or * (default) for any")
    add.add_argument("--deny", action="store_true", help="a deny binding (default: allow)")
    finish_parser(add, cmd_add, "acls add")

    lst = asub.add_parser(
        "list", help="list ACL bindings", description="List the ACL bindings matching a filter."
    )
    _filter_args(lst)
    finish_parser(lst, cmd_list, "acls list")

    remove = asub.add_parser(
        "remove",
        help="remove the ACL bindings matching a filter",
        description="Remove every ACL binding matching the filter (give at least one option, "
        "or --all to remove every binding).",
    )
    _filter_args(remove)
    remove.add_argument("--all", action="store_true", help="remove every binding")
    finish_parser(remove, cmd_remove, "acls remove")


def _resource_args(parser: argparse.ArgumentParser, *, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--topic", metavar="NAME")
    group.add_argument("--group", metavar="NAME")
    group.add_argument("--transactional-id", metavar="NAME")
    group.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")


def _filter_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--principal", metavar="TYPE:NAME")
    parser.add_argument("--host", metavar="HOST")
    _resource_args(parser, required=False)
    parser.add_argument(
        "--resource-type",
        choices=("topic", "group", "cluster", "transactional_id"),
        help="only bindings on resources of this type",
    )
    parser.add_argument(
        "--pattern",
        choices=("literal", "prefixed", "any", "match"),
        help="any (default): the name exactly, literal or prefixed; match: every binding "
        "that applies to the named resource",
    )
    parser.add_argument("--operation", choices=OPERATIONS, metavar="OP")
    parser.add_argument("--permission", choices=("allow", "deny"))


def _resource(args: argparse.Namespace) -> tuple[str, str] | None:
    if args.cluster:
        return "cluster", CLUSTER_NAME
    for kind in ("topic", "group", "transactional_id"):
        name = getattr(args, kind)
        if name is not None:
            return kind, name
    return None


def _filter(args: argparse.Namespace) -> dict[str, str]:
    found: dict[str, str] = {}
    resource = _resource(args)
    if resource is not None:
        if args.resource_type is not None and args.resource_type != resource[0]:
            args.parser.error(f"--resource-type {args.resource_type} contradicts the resource")
        found["resource_type"], found["resource_name"] = resource
    elif args.resource_type is not None:
        found["resource_type"] = args.resource_type
    for option, field in (
        ("principal", "principal"),
        ("host", "host"),
        ("pattern", "pattern_type"),
        ("operation", "operation"),
        ("permission", "permission"),
    ):
        value = getattr(args, option)
        if value is not None:
            found[field] = value
    return found


def describe(acl: dict[str, Any]) -> str:
    """`allow User:alice read on topic orders (literal) from *`."""
    return (
        f"{acl.get('permission')} {acl.get('principal')} {acl.get('operation')} on "
        f"{acl.get('resource_type')} {acl.get('resource_name')} "
        f"({acl.get('pattern_type')}) from {acl.get('host')}"
    )


def cmd_add(args: argparse.Namespace, streams: Streams) -> int:
    kind, name = _resource(args) or ("", "")
    bindings = [
        {
            "principal": args.principal,
            "host": args.host,
            "resource_type": kind,
            "resource_name": name,
            "pattern_type": "prefixed" if args.prefixed else "literal",
            "operation": operation,
            "permission": "deny" if args.deny else "allow",
        }
        for operation in dict.fromkeys(args.operation)
    ]
    with client_for(args) as admin:
        doc = admin.create_acls(bindings)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    for acl in doc.get("created") or []:
        streams.stdout.write(f"added ACL: {describe(acl)}\n")
    for acl in doc.get("existing") or []:
        streams.stdout.write(f"exists already: {describe(acl)}\n")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.list_acls(**_filter(args))
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    acls = doc.get("acls") or []
    if not acls:
        streams.stdout.write("no ACLs\n")
        return EXIT_OK
    headers = ["PRINCIPAL", "HOST", "PERMISSION", "OPERATION", "RESOURCE", "NAME", "PATTERN"]
    rows = [
        (
            a.get("principal"),
            a.get("host"),
            a.get("permission"),
            a.get("operation"),
            a.get("resource_type"),
            a.get("resource_name"),
            a.get("pattern_type"),
        )
        for a in acls
    ]
    print_rich([grid(headers, rows)], streams.stdout)
    return EXIT_OK


def cmd_remove(args: argparse.Namespace, streams: Streams) -> int:
    acl_filter = _filter(args)
    if not acl_filter and not args.all:
        args.parser.error("give a filter (e.g. --principal, --topic), or --all")
    if acl_filter and args.all:
        args.parser.error("--all removes every binding: give it alone")
    with client_for(args) as admin:
        doc = admin.delete_acls(**acl_filter)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    deleted = doc.get("deleted") or []
    for acl in deleted:
        streams.stdout.write(f"removed ACL: {describe(acl)}\n")
    streams.stdout.write(f"removed {count(len(deleted), 'ACL')}\n")
    return EXIT_OK
