"""Authentication on a real node (lograft/api/authentication.py): bearer
tokens against a JWKS file, every bad credential a 401 with a stable reason
that writes nothing, internal routes closed to client credentials, a group
stream whose coordinator calls carry the client's token, and no secret in any
error body or in the node's log."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lograft.security.local_ca import make_local_certificates
from tests.integration.cluster_harness import (
    CLUSTER_SECRET,
    SECRET_HEADER,
    ClusterNode,
    LograftCluster,
    Response,
)
from tests.sse_support import SseParser

ISSUER = "https://idp.lograft.test"
AUDIENCE = "lograft-it"
KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())
TOPIC = "secured"


def mint(key: Any = KEY, alg: str = "ES256", kid: str = "k1", **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 600, "iat": now}
    claims.update(changes)
    return jwt.encode(
        {k: v for k, v in claims.items() if v is not None}, key, algorithm=alg, headers={"kid": kid}
    )


def unsigned(header: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return (
        f"{part(header)}.{part({'iss': ISSUER, 'aud': AUDIENCE, 'sub': 'root', 'exp': now + 60})}."
    )


def write_jwks(path: Path) -> Path:
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="ES256")
    path.write_text(json.dumps({"keys": [jwk]}))
    return path


def raw_get(node: ClusterNode, path: str, header_lines: bytes) -> tuple[int, bytes]:
    """A request with header bytes as they are (invalid UTF-8, latin-1)."""
    host, port = node.spec.http_address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode()
            + header_lines
            + b"Connection: close\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.fixture
def secured(lograft_cluster: Callable[..., LograftCluster], tmp_path: Path) -> ClusterNode:
    jwks = write_jwks(tmp_path / "jwks.json")
    cluster = lograft_cluster(
        size=1,
        overrides={
            1: {
                "security": {
                    "authentication": ["bearer"],
                    # One line per (reason, peer) per minute: the test sends many.
                    "auth_failure_log_interval_ms": 60_000,
                    "bearer": {
                        "issuer": ISSUER,
                        "audience": AUDIENCE,
                        "jwks_file": str(jwks),
                        "token_bytes_max": 4096,
                    },
                }
            }
        },
    )
    cluster.start()
    return cluster[1]


def test_bad_credentials_are_refused_change_nothing_and_leak_nothing(secured: ClusterNode) -> None:
    node = secured
    good = mint()
    auth = {"Authorization": f"Bearer {good}"}
    bodies: list[Any] = []

    def call(method: str, path: str, body: Any = None, **headers: str) -> Response:
        resp = node.request(method, path, body, headers=headers)
        bodies.append(resp.body)
        return resp

    # Public routes need nothing; the rest need a credential.
    assert node.get("/healthz").status == 200
    resp = call("GET", "/v1/cluster")
    assert resp.status == 401, resp
    assert resp.body["error"]["details"]["reason"] == "missing_credentials"

    resp = node.request(
        "POST",
        "/v1/topics",
        {"name": TOPIC, "partitions": 1, "replication_factor": 1},
        headers=auth,
    )
    assert resp.status == 201, resp
    record = {"records": [{"value": {"n": 1}, "partition": 0}]}
    resp = node.request("POST", f"/v1/topics/{TOPIC}/records", record, headers=auth)
    assert resp.status == 200, resp

    def end_offset() -> int:
        resp = node.request("GET", f"/v1/topics/{TOPIC}/partitions/0/offsets", headers=auth)
        assert resp.status == 200, resp
        return int(resp.body["latest"])

    node.cluster.eventually(lambda: end_offset() == 1, 10, "the good record committed")

    now = int(time.time())
    hs256 = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "root", "exp": now + 60},
        "a-shared-secret-of-at-least-32-bytes!!",
        algorithm="HS256",
        headers={"kid": "k1"},
    )
    bad: dict[str, tuple[str, str]] = {
        "expired": (f"Bearer {mint(exp=now - 3600)}", "expired"),
        "wrong-aud": (f"Bearer {mint(aud='someone-else')}", "wrong_audience"),
        "wrong-iss": (f"Bearer {mint(iss='https://evil.test')}", "wrong_issuer"),
        "wrong-key": (f"Bearer {mint(key=OTHER_KEY)}", "bad_signature"),
        "unknown-kid": (f"Bearer {mint(key=OTHER_KEY, kid='k9')}", "unknown_key"),
        "alg-none": (f"Bearer {unsigned({'alg': 'none', 'kid': 'k1'})}", "unsupported_algorithm"),
        "hs256": (f"Bearer {hs256}", "unsupported_algorithm"),
        "malformed": ("Bearer not.a.jwt", "malformed"),
        "huge": ("Bearer " + "A" * 6000, "too_large"),
        "basic": (
            "Basic " + base64.b64encode(b"alice:p4ssw0rd-never-logged").decode(),
            "missing_credentials",
        ),
    }
    for name, (value, reason) in bad.items():
        for method, path, body in (
            ("POST", f"/v1/topics/{TOPIC}/records", record),
            ("GET", "/v1/topics", None),
        ):
            resp = call(method, path, body, Authorization=value)
            assert resp.status == 401, (name, resp)
            error = resp.body["error"]
            assert (error["code"], error["details"]["reason"]) == (
                "SASL_AUTHENTICATION_FAILED",
                reason,
            ), name
    # Many Authorization headers, invalid UTF-8 and latin-1 bytes: 401 too.
    for lines in (
        f"Authorization: Bearer {good}\r\n".encode() * 3,
        b"Authorization: Bearer \xff\xfe" + good.encode() + b"\r\n",
        b"Authorization: Basic \xe9l\xe8ve:mot\r\n",
    ):
        status, body = raw_get(node, "/v1/topics", lines)
        assert status == 401, body
        bodies.append(body.decode("utf-8", "replace"))
    # The cluster secret is no credential on a public route; a token opens no internal one.
    resp = call("GET", "/v1/topics", **{SECRET_HEADER: CLUSTER_SECRET})
    assert (resp.status, resp.body["error"]["details"]["reason"]) == (401, "missing_credentials")
    resp = call("POST", "/internal/v1/controller/create-topic", {"name": "x"}, **auth)
    assert resp.status == 401, resp
    # A bad client id is a 400.
    resp = call("GET", "/v1/topics", **auth, **{"X-Lograft-Client-Id": "x" * 300})
    assert (resp.status, resp.body["error"]["code"]) == (400, "INVALID_REQUEST")

    # Nothing was written under bad credentials.
    assert end_offset() == 1

    # A group stream: the member's calls to the coordinator (this node, over
    # HTTP) carry the client's token, so the stream joins and reads.
    assert stream_first_record(node, good) == {"n": 1}

    # No secret in any answer or in the log.
    secrets = [good, CLUSTER_SECRET, "p4ssw0rd-never-logged", hs256]
    secrets += [value.partition(" ")[2] for value, _ in bad.values()]
    secrets += [base64.b64encode(b"alice:p4ssw0rd-never-logged").decode()]
    answers = json.dumps(bodies)
    log = node.log_text()
    for secret in secrets:
        assert secret not in answers
        assert secret not in log
        assert secret[-40:] not in log  # not even a token's signature
    # Failures are logged: once per (reason, peer) in the interval.
    assert log.count("authentication failed: reason=expired ") == 1
    assert "reason=wrong_audience" in log and "peer=127.0.0.1" in log


def stream_first_record(node: ClusterNode, token: str) -> Any:
    host, port = node.spec.http_address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "GET",
            f"/v1/topics/{TOPIC}/stream?group=g1&auto_offset_reset=earliest",
            headers={"Authorization": f"Bearer {token}", "X-Lograft-Client-Id": "it-stream"},
        )
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        parser = SseParser()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            chunk = resp.read1(1 << 16)
            assert chunk, "the stream ended"
            for event in parser.feed(chunk):
                assert event.name != "error", event.data
                if event.name == "message" and event.data:
                    return event.json()["value"]
        raise AssertionError("no record within 30 s")
    finally:
        conn.close()


# -- over TLS: client certificates and passwords -------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("authn-certs")
    make_local_certificates(directory, nodes=["node-1"], clients=["admin"])
    return directory


@pytest.fixture
def tls_node(
    lograft_cluster: Callable[..., LograftCluster], tmp_path: Path, certs: Path
) -> ClusterNode:
    jwks = write_jwks(tmp_path / "jwks.json")
    cluster = lograft_cluster(
        size=1,
        tls=certs,
        overrides={
            1: {
                "tls": {
                    "client_certificate": "optional",
                    "principal_mapping_rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
                },
                "security": {
                    "authentication": ["bearer", "password", "certificate"],
                    "bearer": {"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(jwks)},
                    # Polling for a password change fails meanwhile (from
                    # 127.0.0.1, every request): room for a slow commit.
                    "password_failures_per_address_max": 30,
                },
            }
        },
    )
    cluster.start()
    return cluster[1]


def https_get(
    node: ClusterNode,
    path: str,
    certs: Path,
    *,
    client: str | None = None,
    method: str = "GET",
    body: Any = None,
    **headers: str,
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=certs / "ca.pem")
    if client is not None:
        context.load_cert_chain(certs / f"{client}.pem", certs / f"{client}-key.pem")
    host, port = node.spec.http_address.split(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    try:
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def test_certificates_and_passwords_over_tls(tls_node: ClusterNode, certs: Path) -> None:
    node = tls_node
    # The client certificate is the caller when no Authorization header is sent.
    status, body = https_get(node, "/v1/topics", certs, client="admin")
    assert status == 200, body
    status, body = https_get(node, "/v1/topics", certs)
    # Nothing at all: no header, no certificate.
    assert (status, body["error"]["details"]["reason"]) == (401, "missing_credentials")
    # A bearer token still works on the same listener.
    status, body = https_get(node, "/v1/topics", certs, Authorization=f"Bearer {mint()}")
    assert status == 200, body
    # A wrong password, or a user that does not exist: one reason, one answer.
    password = "tls-only-s3cret-passw0rd"
    bodies = []
    for user in ("alice", "nobody"):
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        status, body = https_get(node, "/v1/topics", certs, client="admin", Authorization=header)
        assert (status, body["error"]["details"]["reason"]) == (401, "bad_credentials")
        bodies.append(body)
        assert header.partition(" ")[2] not in json.dumps(body)
    assert bodies[0]["error"]["message"] == bodies[1]["error"]["message"]

    # alice gets that password (PUT /v1/users, as the certificate's admin):
    # her Basic requests are her; a changed password refuses the old one.
    status, body = https_get(
        node, "/v1/users/alice", certs, client="admin", method="PUT", body={"password": password}
    )
    assert status == 200, body
    alice = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()

    def as_alice(header: str = alice) -> tuple[int, Any]:
        # No client certificate: the password alone is the credential.
        return https_get(node, "/v1/topics", certs, Authorization=header)

    node.cluster.eventually(lambda: as_alice()[0] == 200, 10, "alice's credential applied")
    for _ in range(3):
        assert as_alice()[0] == 200
    status, body = https_get(
        node, "/v1/users/alice", certs, client="admin", method="PUT", body={"password": "N3w-one"}
    )
    assert status == 200, body
    node.cluster.eventually(lambda: as_alice()[0] == 401, 10, "the old password refused")
    status, body = as_alice()
    assert body["error"]["details"]["reason"] == "bad_credentials"
    new = "Basic " + base64.b64encode(b"alice:N3w-one").decode()
    assert as_alice(new)[0] == 200

    log = node.log_text()
    assert password not in log and "N3w-one" not in log
    assert alice.partition(" ")[2] not in log and new.partition(" ")[2] not in log
    # Once per (reason, peer) in the interval: the first one is named.
    assert "reason=bad_credentials principal=User:alice" in log

    # Guessing from this address spends its failure budget: then a password
    # not in the verified cache is refused without hashing, with the wait.
    for attempt in range(31):
        status, body = as_alice("Basic " + base64.b64encode(f"alice:g{attempt}".encode()).decode())
        assert status == 401, body
        if body["error"]["details"]["reason"] == "too_many_failures":
            break
        assert body["error"]["details"]["reason"] == "bad_credentials"
    else:
        raise AssertionError("31 wrong passwords were all hashed")
    assert body["error"]["details"]["retry_after_ms"] > 0
    # A user who has logged in (the verified cache), a token and a
    # certificate are not refused by it.
    assert as_alice(new)[0] == 200
    assert https_get(node, "/v1/topics", certs, Authorization=f"Bearer {mint()}")[0] == 200
    assert https_get(node, "/v1/topics", certs, client="admin")[0] == 200
    node.cluster.eventually(
        lambda: "reason=too_many_failures" in node.log_text(), 10, "the refusal logged"
    )
