"""Client credentials and TLS settings: the Authorization and client id every
request carries, a token file read again when it changes, and no secret in a
repr or an error message."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from lograft.api.caller import CLIENT_ID_HEADER as SERVER_CLIENT_ID_HEADER
from lograft.client.config import ConsumerConfig, ProducerConfig
from lograft.client.credentials import Credentials, tls_context
from lograft.client.transport import CLIENT_ID_HEADER, HttpTransport
from lograft.errors import InvalidConfigError

TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
PASSWORD = "s3cret-pa55word"


def test_the_header_names_agree_with_the_node() -> None:
    assert CLIENT_ID_HEADER == SERVER_CLIENT_ID_HEADER


def test_each_way_in_gives_its_header() -> None:
    assert Credentials().authorization() is None
    assert not Credentials()
    assert Credentials(bearer_token=TOKEN).authorization() == f"Bearer {TOKEN}"
    basic = Credentials(username="alice", password=PASSWORD).authorization()
    assert basic == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"bearer_token": TOKEN, "username": "a", "password": "p"}, "username"),
        ({"bearer_token": TOKEN, "bearer_token_file": "f"}, "bearer_token_file"),
        ({"bearer_token": "two words"}, "bearer_token"),
        ({"bearer_token": "x\r\nX-Evil: 1"}, "bearer_token"),
        ({"username": "a:b", "password": "p"}, "username"),
        ({"password": "p"}, "username"),
        ({"username": "a"}, "password"),
        ({"username": "a", "password": "p\n"}, "password"),
    ],
)
def test_bad_credentials_name_the_setting_not_the_secret(settings, setting) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        Credentials(**settings)
    assert exc.value.details["setting"] == setting
    assert "p\n" not in exc.value.message and "X-Evil" not in exc.value.message
    assert "two words" not in exc.value.message


def test_a_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    credentials = Credentials(bearer_token_file=path)
    with pytest.raises(InvalidConfigError, match="cannot be read") as exc:
        credentials.authorization()
    assert exc.value.details["setting"] == "bearer_token_file"
    path.write_text(TOKEN + "\n")
    assert credentials.authorization() == f"Bearer {TOKEN}"
    # Rotated: replaced by a rename, as a sidecar does.
    fresh = tmp_path / "token.new"
    fresh.write_text("new.token.value")
    os.replace(fresh, path)
    assert credentials.authorization() == "Bearer new.token.value"
    # Caught half-written (empty) or gone for a moment: the last token stays.
    path.write_text("")
    assert credentials.authorization() == "Bearer new.token.value"
    path.unlink()
    assert credentials.authorization() == "Bearer new.token.value"
    path.write_text("not a token!")
    with pytest.raises(InvalidConfigError) as bad:
        credentials.authorization()
    assert "not a token" not in bad.value.message


def test_configs_never_show_a_secret() -> None:
    producer = ProducerConfig(bootstrap_servers="https://n:1", username="alice", password=PASSWORD)
    consumer = ConsumerConfig(bearer_token=TOKEN)
    for shown in (repr(producer), str(producer), repr(consumer), f"{consumer}"):
        assert PASSWORD not in shown and TOKEN not in shown
    assert "credentials='basic'" in repr(producer)
    assert "username='alice'" in repr(producer)
    with pytest.raises(InvalidConfigError) as exc:
        ProducerConfig(password=12345678)
    assert "12345678" not in exc.value.message


def test_passwords_only_over_https() -> None:
    with pytest.raises(InvalidConfigError, match="unencrypted") as exc:
        ConsumerConfig(bootstrap_servers="http://n:1", username="a", password=PASSWORD)
    assert exc.value.details["setting"] == "bootstrap_servers"
    assert PASSWORD not in exc.value.message


def test_tls_files_are_checked_at_construction(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        ConsumerConfig(ssl_cafile=str(tmp_path / "missing.pem"))
    assert exc.value.details["setting"] == "ssl_cafile"
    with pytest.raises(InvalidConfigError) as key_only:
        tls_context(keyfile=tmp_path / "k.pem")
    assert key_only.value.details["setting"] == "ssl_keyfile"
    assert ConsumerConfig().tls_context() is None


async def test_every_request_carries_the_client_id_and_current_token(tmp_path: Path) -> None:
    seen: list[tuple[str | None, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), request.headers.get(CLIENT_ID_HEADER)))
        return web.json_response({})

    async def redirect(_request: web.Request) -> web.Response:
        raise web.HTTPFound("http://elsewhere.invalid/")

    app = web.Application()
    app.router.add_get("/r", record)
    app.router.add_get("/redirect", redirect)
    path = tmp_path / "token"
    path.write_text("first.token")
    async with TestServer(app) as server:
        transport = HttpTransport(
            client_id="billing", credentials=Credentials(bearer_token_file=path)
        )
        try:
            url = str(server.make_url("/r"))
            await transport.request("GET", url, timeout_ms=5000)
            path.write_text("second.token.longer")
            await transport.request("GET", url, timeout_ms=5000)
            # Never followed: the token would go with it.
            moved = await transport.request(
                "GET", str(server.make_url("/redirect")), timeout_ms=5000
            )
            assert moved.status == 302
        finally:
            await transport.close()
    assert seen == [("Bearer first.token", "billing"), ("Bearer second.token.longer", "billing")]


@pytest.mark.parametrize("client_id", ["x" * 256, "tab\there", "new\nline"])
def test_a_client_id_the_node_would_refuse_is_refused_here(client_id) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        ConsumerConfig(client_id=client_id)
    assert exc.value.details["setting"] == "client_id"
    assert ConsumerConfig(client_id="billing-äöü").client_id == "billing-äöü"
