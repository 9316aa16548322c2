"""What the cluster commands of the CLI share: streams, connection options,
argument types and error messages (printing: `cli.output`).

Every command function takes the parsed arguments and a `Streams` (so tests
can hand in their own) and returns the exit code; a `LograftError` escaping
it is printed by `cli.main` as `lograft <command>: <CODE>: <message>` with
exit code 1.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from lograft.cli.output import add_output_args
from lograft.client.config import parse_bootstrap
from lograft.client.errors import ClusterUnreachableError
from lograft.errors import InvalidConfigError, LograftError

if TYPE_CHECKING:
    from lograft.client.admin import Admin

BOOTSTRAP_ENV = "LOGRAFT_BOOTSTRAP"
# Credentials from the environment (kept out of `ps` and shell history).
TOKEN_ENV = "LOGRAFT_TOKEN"
PASSWORD_ENV = "LOGRAFT_PASSWORD"
BOOTSTRAP_DEFAULT = "http://127.0.0.1:9091"
# One request (connect + answer) may take this long, ms; long-polls add their wait.
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
# How long a group command keeps retrying while the coordinator moves or loads, ms.
COORDINATOR_RETRY_TIMEOUT_MS = 30_000
# Backoff between those retries, ms: doubling from the first to the second.
RETRY_BACKOFF_MS_MIN = 100
RETRY_BACKOFF_MS_MAX = 2_000

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True, slots=True)
class Streams:
    stdin: BinaryIO
    stdout: TextIO
    stderr: TextIO

    @classmethod
    def system(cls) -> Streams:
        return cls(sys.stdin.buffer, sys.stdout, sys.stderr)


# -- argument types (a ValueError/ArgumentTypeError here is a usage error, exit 2) --------


def bootstrap_arg(text: str) -> list[str]:
    try:
        return bootstrap_urls(text)
    except LograftError as exc:
        raise argparse.ArgumentTypeError(f"bad --bootstrap: {exc.message}") from None


def bootstrap_urls(text: str) -> list[str]:
    """`host:port,http://host:port/` -> ['http://host:port', ...] (the client's
    rules); InvalidConfigError if one is not http(s)://host:port."""
    return list(parse_bootstrap(text))


def default_bootstrap() -> str:
    return os.environ.get(BOOTSTRAP_ENV) or BOOTSTRAP_DEFAULT


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: write a config as key=value")
    return key.strip(), value


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        type=bootstrap_arg,
        default=None,
        metavar="URL[,URL...]",
        help=f"nodes to talk to, tried in order (default: ${BOOTSTRAP_ENV} or {BOOTSTRAP_DEFAULT})",
    )
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=REQUEST_TIMEOUT_MS_DEFAULT,
        metavar="MS",
        help=f"give up on one request after this long (default {REQUEST_TIMEOUT_MS_DEFAULT})",
    )


def add_security_args(parser: argparse.ArgumentParser) -> None:
    """TLS and credentials (docs/cli.md, "Secure clusters")."""
    group = parser.add_argument_group("TLS and credentials (https:// bootstrap URLs)")
    group.add_argument(
        "--cacert", metavar="FILE", help="CA bundle (PEM) the nodes' certificates chain to"
    )
    group.add_argument(
        "--cert", metavar="FILE", help="client certificate (PEM), for nodes that ask for one"
    )
    group.add_argument("--key", metavar="FILE", help="the client certificate's key (PEM)")
    way = group.add_mutually_exclusive_group()
    way.add_argument(
        "--token",
        metavar="JWT",
        help=f"bearer token (visible to other users in ps: prefer ${TOKEN_ENV} or --token-file)",
    )
    way.add_argument(
        "--token-file", metavar="FILE", help="file holding a bearer token, read before each request"
    )
    way.add_argument(
        "--user",
        metavar="NAME",
        help=f"user name for a password; the password from ${PASSWORD_ENV}, else a prompt",
    )


def connection_settings(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    prompt: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """The client settings of the TLS and credential options (and their
    environment variables): at most one way in."""
    env = os.environ if env is None else env
    settings: dict[str, Any] = {
        "ssl_cafile": getattr(args, "cacert", None),
        "ssl_certfile": getattr(args, "cert", None),
        "ssl_keyfile": getattr(args, "key", None),
    }
    token, token_file = getattr(args, "token", None), getattr(args, "token_file", None)
    user = getattr(args, "user", None)
    if token is not None:
        settings["bearer_token"] = token
    elif token_file is not None:
        settings["bearer_token_file"] = token_file
    elif user is not None:
        settings["username"] = user
        settings["password"] = env.get(PASSWORD_ENV) or _ask_password(user, prompt)
    elif env.get(TOKEN_ENV):
        settings["bearer_token"] = env[TOKEN_ENV]
    return {k: v for k, v in settings.items() if v is not None}


def _ask_password(user: str, prompt: Callable[[str], str] | None) -> str:
    if prompt is None:
        if not sys.stdin.isatty():
            raise InvalidConfigError(
                f"--user {user}: no terminal to ask the password on; set ${PASSWORD_ENV}",
                setting="password",
            )
        prompt = getpass.getpass
    return prompt(f"password for {user}: ")


def finish_parser(
    parser: argparse.ArgumentParser, func: Any, name: str, *, output: bool = True
) -> None:
    """A cluster subcommand's `--output` (unless it has its own), connection
    options, its function and its name (`lograft <name>: ...` in messages)."""
    if output:
        add_output_args(parser)
    add_connection_args(parser)
    add_security_args(parser)
    parser.set_defaults(func=func, cmd_name=name, parser=parser)


def client_for(args: argparse.Namespace) -> Admin:
    """The admin client of a cluster command (close it: `with client_for(args) as admin`)."""
    from lograft.client.admin import Admin

    return Admin(
        args.bootstrap,
        client_id="lograft-cli",
        request_timeout_ms=args.timeout_ms,
        default_api_timeout_ms=COORDINATOR_RETRY_TIMEOUT_MS,
        retry_backoff_ms=RETRY_BACKOFF_MS_MIN,
        retry_backoff_max_ms=RETRY_BACKOFF_MS_MAX,
        **connection_settings(args),
    )


# -- messages -----------------------------------------------------------------------------


def error_text(exc: LograftError) -> str:
    """One line a person can act on."""
    if isinstance(exc, ClusterUnreachableError):
        return (
            f"{exc.message}. Is the cluster running? Point --bootstrap (or "
            f"${BOOTSTRAP_ENV}) at a node's HTTP address."
        )
    text = f"{exc.code}: {exc.message}"
    url = exc.details.get("url") or getattr(exc, "url", None)
    return f"{text} (from {url})" if isinstance(url, str) and url else text


def count(n: int, what: str) -> str:
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"
