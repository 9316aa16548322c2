"""`lograft users add|delete|list`: users with passwords (SCRAM credentials),
as kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]' does.

The password is never an argument (it would show in `ps` and shell
history): `add` prompts for it twice on the terminal, or reads the first
line of stdin with `--password-stdin` (for scripts:
`printf '%s\\n' "$PW" | lograft users add alice --password-stdin`). The node
that receives it hashes it; only the salted hash is stored. Send it over TLS.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from lograft.cli.common import (
    EXIT_OK,
    Streams,
    client_for,
    finish_parser,
    positive_int,
)
from lograft.cli.output import grid, print_json, print_rich, wants_json

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# The longest password read from stdin, bytes (the node takes at most 1024).
PASSWORD_READ_BYTES_MAX = 4096


def add_parser(sub: Any) -> None:
    users = sub.add_parser("users", help="add, delete, list users with passwords")
    usub = users.add_subparsers(dest="users_command", metavar="COMMAND")
    usub.required = True

    add = usub.add_parser(
        "add",
        help="set a user's password (adds the user, or replaces its password)",
        description="Set USER's password for a SCRAM mechanism. The password is prompted "
        "for on the terminal (twice), or read from the first line of stdin with "
        "--password-stdin; it is never a command-line argument.",
    )
    add.add_argument("name", metavar="USER")
    add.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    add.add_argument(
        "--mechanism", choices=MECHANISMS, help="SCRAM mechanism (server: SCRAM-SHA-512)"
    )
    add.add_argument(
        "--iterations", type=positive_int, metavar="N", help="4096 to 16384 (server: 4096)"
    )
    finish_parser(add, cmd_add, "users add")

    delete = usub.add_parser(
        "delete",
        help="delete a user's credentials",
        description="Delete USER's credential for --mechanism, or all of them.",
    )
    delete.add_argument("name", metavar="USER")
    delete.add_argument("--mechanism", choices=MECHANISMS, help="only this mechanism's")
    finish_parser(delete, cmd_delete, "users delete")

    lst = usub.add_parser("list", help="list users", description="List users and their mechanisms.")
    finish_parser(lst, cmd_list, "users list")


def read_password(args: argparse.Namespace, streams: Streams) -> str:
    if args.password_stdin:
        raw = streams.stdin.readline(PASSWORD_READ_BYTES_MAX + 1)
        if len(raw) > PASSWORD_READ_BYTES_MAX:
            args.parser.error(f"the password is longer than {PASSWORD_READ_BYTES_MAX} bytes")
        try:
            password = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            args.parser.error("the password on stdin is not UTF-8")
    else:
        if not streams.stdin.isatty():
            args.parser.error("no terminal to ask for the password on: use --password-stdin")
        password = getpass.getpass(f"new password for user {args.name}: ")
        if getpass.getpass("again: ") != password:
            args.parser.error("the passwords differ")
    if not password:
        args.parser.error("the password is empty")
    return password


def cmd_add(args: argparse.Namespace, streams: Streams) -> int:
    password = read_password(args, streams)
    with client_for(args) as admin:
        doc = admin.set_user_password(
            args.name, password, mechanism=args.mechanism, iterations=args.iterations
        )
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    streams.stdout.write(
        f"set password of user {doc.get('name', args.name)} "
        f"({doc.get('mechanism')}, {doc.get('iterations')} iterations)\n"
    )
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.delete_user(args.name, mechanism=args.mechanism)
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    mechanisms = ", ".join(doc.get("mechanisms") or [])
    streams.stdout.write(f"deleted user {args.name}'s credentials: {mechanisms}\n")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, streams: Streams) -> int:
    with client_for(args) as admin:
        doc = admin.list_users()
    if wants_json(args):
        print_json(doc, streams.stdout)
        return EXIT_OK
    users = doc.get("users") or []
    if not users:
        streams.stdout.write("no users\n")
        return EXIT_OK
    rows = [
        (
            u.get("name"),
            ", ".join(
                f"{m.get('mechanism')} ({m.get('iterations')} iterations)"
                for m in u.get("mechanisms") or []
            ),
        )
        for u in users
    ]
    print_rich([grid(["USER", "MECHANISMS"], rows)], streams.stdout)
    return EXIT_OK
