"""The [tls] settings and the ssl contexts built from them (lograft.security.tls):
real TLS handshakes on 127.0.0.1 with certificates from the local CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pytest

from lograft import typed
from lograft.errors import InvalidConfigError
from lograft.security.certificates import certificate_principal
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.local_ca import make_local_certificates
from lograft.security.tls import (
    ClientCertificate,
    TlsSettings,
    TlsVersion,
    client_context,
    server_context,
)
from tests.raft_support import free_port

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    make_local_certificates(directory, nodes=["node-1", "node-2"], clients=["admin"])
    make_local_certificates(directory / "other", nodes=["stranger"], clients=["intruder"])
    return directory


def tls(certs: Path, name: str = "node-1", **changes) -> TlsSettings:
    body = {
        "certificate_file": str(certs / f"{name}.pem"),
        "key_file": str(certs / f"{name}-key.pem"),
        "ca_file": str(certs / "ca.pem"),
    }
    body.update(changes)
    return typed.build(body, TlsSettings, error=InvalidConfigError)


class Server:
    """An asyncio TLS server that records the peer certificate of each
    connection whose handshake completed, and echoes one line."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.peers: list[bytes | None] = []
        self.versions: list[str | None] = []

    async def __aenter__(self) -> Server:
        self.port = free_port()
        self.server = await asyncio.start_server(
            self.handle, "127.0.0.1", self.port, ssl=self.context
        )
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        self.peers.append(ssl_object.getpeercert(binary_form=True))
        self.versions.append(ssl_object.version())
        try:
            writer.write(await reader.readline())
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def exchange(port: int, context: ssl.SSLContext, hostname: str = "localhost") -> bytes:
    """Connect, send a line, read the echo: the handshake's outcome as the
    client sees it (with TLS 1.3 a refused client certificate shows at the
    first read, not in the handshake)."""

    async def run() -> bytes:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname=hostname
        )
        try:
            writer.write(b"ping\n")
            await writer.drain()
            return await reader.readline()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    return await asyncio.wait_for(run(), TIMEOUT_S)


async def test_nodes_handshake_with_a_required_client_certificate(certs: Path) -> None:
    server = tls(certs, client_certificate="required")
    async with Server(server_context(server)) as running:
        assert await exchange(running.port, client_context(tls(certs, "node-2"))) == b"ping\n"
    [peer] = running.peers
    assert certificate_principal(peer, server.principal_mapper()) == (
        "User:CN=node-2,OU=nodes,O=lograft"
    )
    assert running.versions == ["TLSv1.3"]


async def test_a_missing_required_client_certificate_is_refused(certs: Path) -> None:
    async with Server(server_context(tls(certs, client_certificate="required"))) as running:
        anonymous = client_context(tls(certs, "node-2"), present_certificate=False)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            answer = await exchange(running.port, anonymous)
            # an orderly close without an answer is a refusal as well
            assert answer == b"", answer
            raise ConnectionResetError("closed without an answer")
    assert running.peers == []  # the server never saw a completed handshake


async def test_a_client_certificate_from_another_ca_is_refused(certs: Path) -> None:
    async with Server(server_context(tls(certs, client_certificate="required"))) as running:
        intruder = client_context(tls(certs / "other", "intruder", ca_file=str(certs / "ca.pem")))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            answer = await exchange(running.port, intruder)
            assert answer == b"", answer
            raise ConnectionResetError("closed without an answer")
    assert running.peers == []


async def test_an_optional_client_certificate_may_be_absent(certs: Path) -> None:
    server = tls(certs, client_certificate="optional")
    async with Server(server_context(server)) as running:
        client = tls(certs, "node-2")
        assert await exchange(running.port, client_context(client, present_certificate=False))
        assert await exchange(running.port, client_context(tls(certs, "admin")))
    absent, shown = running.peers
    assert absent is None
    with pytest.raises(AuthenticationFailed) as info:
        certificate_principal(absent, server.principal_mapper())
    assert info.value.reason is AuthFailure.NO_CERTIFICATE
    mapped = tls(certs, principal_mapping_rules="RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT")
    assert certificate_principal(shown, mapped.principal_mapper()) == "User:admin"


async def test_the_client_verifies_the_server_and_its_name(certs: Path) -> None:
    async with Server(server_context(tls(certs / "other", "stranger"))) as running:
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(running.port, client_context(tls(certs, "node-2")))
    async with Server(server_context(tls(certs))) as running:
        client = client_context(tls(certs, "node-2"))
        assert await exchange(running.port, client, hostname="node-1") == b"ping\n"
        assert await exchange(running.port, client, hostname="127.0.0.1") == b"ping\n"
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            await exchange(running.port, client, hostname="node-9")


async def test_a_client_certificate_cannot_serve(certs: Path) -> None:
    """The admin certificate is for clients only (extendedKeyUsage clientAuth)."""
    async with Server(server_context(tls(certs, "admin"))) as running:
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(running.port, client_context(tls(certs, "node-2")))


async def test_the_minimum_version_is_enforced(certs: Path) -> None:
    async with Server(server_context(tls(certs, minimum_version="1.3"))) as running:
        old = client_context(tls(certs, "node-2"))
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        # the server's alert, or its reset, depending on timing
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await exchange(running.port, old)
        assert await exchange(running.port, client_context(tls(certs, "node-2"))) == b"ping\n"
    async with Server(server_context(tls(certs))) as running:
        assert await exchange(running.port, old) == b"ping\n"  # 1.2 is the default floor
    assert running.versions == ["TLSv1.2"]


def test_contexts_carry_the_settings(certs: Path) -> None:
    default = tls(certs)
    assert default.minimum_version is TlsVersion.TLS_1_2
    assert default.client_certificate is ClientCertificate.NONE
    server = server_context(default)
    assert server.minimum_version is ssl.TLSVersion.TLSv1_2
    assert server.verify_mode is ssl.CERT_NONE
    assert server_context(tls(certs, client_certificate="optional")).verify_mode is (
        ssl.CERT_OPTIONAL
    )
    client = client_context(tls(certs, minimum_version="1.3"))
    assert client.minimum_version is ssl.TLSVersion.TLSv1_3
    assert client.verify_mode is ssl.CERT_REQUIRED and client.check_hostname
    for context in (server, client):
        assert context.options & ssl.OP_NO_RENEGOTIATION


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"ca_file": None, "client_certificate": "required"}, "ca_file"),
        ({"ca_file": None, "client_certificate": "optional"}, "ca_file"),
        ({"minimum_version": "1.1"}, "minimum_version"),
        ({"client_certificate": "want"}, "client_certificate"),
        ({"principal_mapping_rules": "RULE:broken"}, "principal_mapping_rules"),
        ({"cipher": "RC4"}, "cipher"),
    ],
)
def test_bad_settings_are_refused(certs: Path, changes, field) -> None:
    with pytest.raises(InvalidConfigError, match=field):
        tls(certs, **changes)


def test_unloadable_files_are_refused_at_startup(certs: Path, tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    cases = [
        (tls(certs, certificate_file=str(tmp_path / "missing.pem")), "certificate_file"),
        (tls(certs, key_file=str(certs / "node-2-key.pem")), "match"),
        (tls(certs, certificate_file=str(tmp_path / "junk.pem")), "PEM"),
        (tls(certs, ca_file=str(tmp_path / "junk.pem")), "ca_file"),
        (tls(certs, ca_file=str(tmp_path)), "ca_file"),
    ]
    for settings, words in cases:
        with pytest.raises(InvalidConfigError, match=words):
            server_context(settings)
