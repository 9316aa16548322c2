"""The CLI's TLS and credential options: flags, environment, password prompt."""

from __future__ import annotations

import pytest

from lograft.cli.common import PASSWORD_ENV, TOKEN_ENV, connection_settings
from lograft.cli.main import build_parser
from lograft.errors import InvalidConfigError


def parse(*argv: str):
    return build_parser().parse_args(["topics", "list", *argv])


def test_tls_flags_and_a_token_file() -> None:
    args = parse(
        "--cacert", "ca.pem", "--cert", "me.pem", "--key", "me-key.pem", "--token-file", "t"
    )
    assert connection_settings(args, env={TOKEN_ENV: "ignored"}) == {
        "ssl_cafile": "ca.pem",
        "ssl_certfile": "me.pem",
        "ssl_keyfile": "me-key.pem",
        "bearer_token_file": "t",
    }


def test_a_token_from_the_flag_or_the_environment() -> None:
    assert connection_settings(parse("--token", "a.b.c"), env={}) == {"bearer_token": "a.b.c"}
    assert connection_settings(parse(), env={TOKEN_ENV: "x.y.z"}) == {"bearer_token": "x.y.z"}
    assert connection_settings(parse(), env={}) == {}


def test_a_password_from_the_environment_or_a_prompt() -> None:
    args = parse("--user", "alice")
    assert connection_settings(args, env={PASSWORD_ENV: "pw"}) == {
        "username": "alice",
        "password": "pw",
    }
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return "typed"

    assert connection_settings(args, env={}, prompt=prompt)["password"] == "typed"
    assert asked == ["password for alice: "]


def test_no_terminal_and_no_password_says_what_to_set(monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(InvalidConfigError, match=PASSWORD_ENV):
        connection_settings(parse("--user", "alice"), env={})


def test_one_way_in_at_a_time() -> None:
    with pytest.raises(SystemExit):
        parse("--token", "a", "--user", "b")
