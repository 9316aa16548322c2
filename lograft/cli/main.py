"""The `lograft` command line.

Commands: `node` (run a node), `dump-log` (inspect segment files, cli/dump_log.py), and the
cluster commands that talk HTTP to any node: `cluster status`, `topics ...`,
`groups ...`, `produce`, `consume`, `acls ...`, `users ...`, `quotas ...`
(modules of the same names), all built on `lograft.client` (`Admin`, `Producer`,
`Consumer`). See docs/cli.md.

Exit codes: 0 success, 1 a failure the message explains (missing file, server
error with its code, unreachable cluster with the URLs tried), 2 bad usage
(argparse).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lograft import __version__
from lograft.cli import acls as cli_acls
from lograft.cli import cluster as cli_cluster
from lograft.cli import consume as cli_consume
from lograft.cli import dump_log as cli_dump_log
from lograft.cli import groups as cli_groups
from lograft.cli import produce as cli_produce
from lograft.cli import quotas as cli_quotas
from lograft.cli import topics as cli_topics
from lograft.cli import users as cli_users
from lograft.cli.common import (
    EXIT_FAILURE,
    Streams,
    bootstrap_urls,
    default_bootstrap,
    error_text,
)
from lograft.errors import LograftError


def _cmd_node(args: argparse.Namespace) -> int:
    from lograft.node.config import load_config
    from lograft.node.server import check_config, configure_logging, run_node_process

    try:
        config = load_config(args.config)
        check_config(config)
    except LograftError as exc:
        print(f"lograft node: {exc.message}", file=sys.stderr)
        return 1
    configure_logging(config.log_level)
    return run_node_process(config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lograft",
        description="lograft: a Kafka-style distributed commit log.",
    )
    parser.add_argument("--version", action="version", version=f"lograft {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    node = sub.add_parser(
        "node",
        help="run a node (controller, broker or both) from a config file",
        description="Run a lograft node. Settings come from the TOML file, then from "
        "LOGRAFT_CFG_* environment variables (LOGRAFT_CFG_HTTP__PORT=9092 sets [http] port).",
    )
    node.add_argument("--config", required=True, metavar="FILE", help="node config (TOML)")
    node.set_defaults(func=_cmd_node)

    cli_dump_log.add_parser(sub)
    cli_cluster.add_parser(sub)
    cli_topics.add_parser(sub)
    cli_groups.add_parser(sub)
    cli_produce.add_parser(sub)
    cli_consume.add_parser(sub)
    cli_acls.add_parser(sub)
    cli_users.add_parser(sub)
    cli_quotas.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, streams: Streams | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "cmd_name"):  # node, dump-log: their own I/O
        return int(args.func(args))
    if args.bootstrap is None:
        try:
            args.bootstrap = bootstrap_urls(default_bootstrap())
        except LograftError as exc:
            parser.error(f"bad $LOGRAFT_BOOTSTRAP: {exc.message}")
    return _run_cluster_command(args, streams or Streams.system())


def _run_cluster_command(args: argparse.Namespace, streams: Streams) -> int:
    try:
        return int(args.func(args, streams))
    except LograftError as exc:
        streams.stderr.write(f"lograft {args.cmd_name}: {error_text(exc)}\n")
        return EXIT_FAILURE
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        streams.stderr.write(f"lograft {args.cmd_name}: interrupted\n")
        return 130


def _quiet_stdout() -> None:
    """After `| head` closed the pipe: no second error when Python flushes at exit."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
