"""`lograft quotas set|describe`: client quotas, as kafka-configs
--entity-type users|clients does.

An entity is `--for-user NAME` or `--for-default-user`, and/or
`--for-client-id NAME` or `--for-default-client-id` (`--user` is the
caller's own user name, a connection option of every command). Keys:
producer_byte_rate, consumer_byte_rate (bytes per second), request_percentage
(percent of one thread's time).
"""

from __future__ import annotations

import argparse
from typing import Any

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    client_for,
    config_pair,
    finish_parser,
)
from lograft.cli.output import grid, print_json, print_rich, wants_json

KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
DEFAULT = "<default>"


def add_parser(sub: Any) -> None:
    quotas = sub.add_parser("quotas", help="set and describe client quotas")
    qsub = quotas.add_subparsers(dest="quotas_command", metavar="COMMAND")
    qsub.required = True

    set_ = qsub.add_parser(
        "set",
        help="set or remove an entity's quotas",
        description="Set (--set KEY=VALUE) and remove (--remove KEY) quotas of one entity: "
        "a user and/or a client id, each a name or the default. "
        f"Keys: {', '.join(KEYS)}.",
    )
    _entity_args(set_)
    set_.add_argument(
        "--set",
        dest="values",
        type=config_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="e.g. producer_byte_rate=1048576 (repeatable)",
    )
    set_.add_argument(
        "--remove", action="append", default=[], choices=KEYS, metavar="KEY", help="(repeatable)"
    )
    finish_parser(set_, cmd_set, "quotas set")

    describe = qsub.add_parser(
        "describe",
        help="list quotas",
        description="List every entity's quotas, or those naming --for-user / --for-client-id.",
    )
    describe.add_argument("--for-user", metavar="NAME", help="only quotas naming this user")
    describe.add_argument(
        "--for-client-id", metavar="NAME", help="only quotas naming this client id"
    )
    finish_parser(describe, cmd_describe, "quotas describe")


def _entity_args(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--for-user", metavar="NAME", help="a user (a principal's name: alice)")
    user.add_argument("--for-default-user", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--for-client-id", metavar="NAME", help="a client id")
    client.add_argument(
        "--for-default-client-id", action="store_true", help="the default client id"
    )


def _entity(args: argparse.Namespace) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    if args.for_user is not None or args.for_default_user:
        entity["user"] = args.for_user
    if args.for_client_id is not None or args.for_default_client_id:
        entity["client_id"] = args.for_client_id
    if not entity:
        args.parser.error(
            "name an entity: --for-user/--for-default-user and/or "
            "--for-client-id/--for-default-client-id"
        )
    return entity


def _values(args: argparse.Namespace) -> dict[str, float]:
    values: dict[str, float] = {}
    for key, text in args.values:
        if key not in KEYS:
            args.parser.error(f"unknown quota {key!r}; known: {', '.join(KEYS)}")
        try:
            values[key] = float(text)
        except ValueError:
            args.parser.error(f"{key}={text!r}: the value must be a number")
    return values


def entity_text(entity: dict[str, Any]) -> str:
    """`user=alice, client_id=<default>`."""
    return ", ".join(
        f"{part}={DEFAULT if entity[part] is None else entity[part]}"
        for part in ("user", "client_id")
        if part in entity
    )


def number(value: Any) -> str:
    """1048576.0 as 1048576; 12.5 as 12.5."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={number(v)}" for k, v in sorted(values.items())) or "none"


def cmd_set(args: argparse.Namespace, streams: Streams) -> int:
    entity = _entity(args)
    values = _values(args)
    if not values and not args.remove:
        args.parser.error("give at least one --set or --remove")
    both = set(values) & set(args.remove)
    if both:
        args.parser.error(f"both set and removed: {', '.join(sorted(both))}")
    with client_for(args) as admin:
        doc = admin.alter_quotas(entity, values=values, remove=args.remove)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    streams.stdout.write(
        f"quotas of {entity_text(doc.get('entity') or entity)}: "
        f"{values_text(doc.get('values') or {})}\n"
    )
    return EXIT_OK


def cmd_describe(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.describe_quotas(user=args.for_user, client_id=args.for_client_id)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    quotas = doc.get("quotas") or []
    if not quotas:
        streams.stdout.write("no quotas\n")
        return EXIT_OK
    rows = []
    for q in quotas:
        entity = q.get("entity") or {}
        rows.append(
            (
                _part(entity, "user"),
                _part(entity, "client_id"),
                values_text(q.get("values") or {}),
            )
        )
    print_rich([grid(["USER", "CLIENT-ID", "QUOTAS"], rows)], streams.stdout)
    return EXIT_OK


def _part(entity: dict[str, Any], part: str) -> str | None:
    if part not in entity:
        return None  # "-": not part of the entity
    return DEFAULT if entity[part] is None else str(entity[part])
