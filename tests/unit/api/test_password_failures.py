"""The per-address failed-password budget (api/password_failures.py), through
the real authentication middleware on the node's own listener: past the
budget an address's uncached passwords are refused 401 too_many_failures
with Retry-After and never reach the hasher; a cached user at that address,
another address and bearer callers are unaffected; the budget frees with the
(injected) clock; the table stays bounded."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lograft.api import password_checks
from lograft.api.authentication import Authenticator
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HttpServer
from lograft.api.password_failures import PasswordFailureBudget
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.passwords import make_credential
from tests.raft_support import free_port
from tests.unit.api.test_authentication import (
    BOB_PASSWORD,
    Clock,
    Credentials,
    Served,
    _refused,
    basic,
    security,
)
from tests.unit.security.test_tokens import DEFAULT_JWKS, FakeIdp, token

BUDGET = 5
WINDOW_MS = 60_000
CAROL_PASSWORD = "carol's own long passphrase"


def users() -> Credentials:
    bob = make_credential("bob", BOB_PASSWORD)
    carol = make_credential("carol", CAROL_PASSWORD)
    return {"bob": {bob.mechanism: bob}, "carol": {carol.mechanism: carol}}


class Hasher:
    """Counts the PBKDF2 checks that really ran (the real check behind it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        real = password_checks.check_password

        def counted(credential: Any, password: str) -> None:
            with self._lock:
                self.calls += 1
            real(credential, password)

        monkeypatch.setattr(password_checks, "check_password", counted)


class Node:
    """A served app with the budget, and a client session per peer address."""

    def __init__(self, served: Served, port: int, clock: Clock) -> None:
        self.served = served
        self.port = port
        self.clock = clock
        self.sessions: dict[str, aiohttp.ClientSession] = {}
        budget = served.authenticator.password_failures
        assert budget is not None
        self.budget = budget

    async def get(self, authorization: str, source: str = "127.0.0.1") -> aiohttp.ClientResponse:
        """GET /v1/cluster from the local address `source` (any of 127/8)."""
        session = self.sessions.get(source)
        if session is None:
            connector = aiohttp.TCPConnector(local_addr=(source, 0))
            session = self.sessions[source] = aiohttp.ClientSession(connector=connector)
        resp = await session.get(
            f"http://127.0.0.1:{self.port}/v1/cluster", headers={"Authorization": authorization}
        )
        await resp.read()
        return resp

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.close()


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    clock = Clock()
    current = users()
    served = Served(
        Authenticator(
            security(
                "bearer",
                "password",
                password_failures_per_address_max=BUDGET,
                password_failure_window_ms=WINDOW_MS,
                password_failure_addresses_max=3,
            ),
            credentials=lambda: current,
            jwks_fetcher=FakeIdp(DEFAULT_JWKS),
            clock=clock,
        )
    )
    server = HttpServer(served.app, HttpConfig(port=free_port()))
    await server.start()
    await served.authenticator.start()
    client = Node(served, server.config.port, clock)
    try:
        yield client
    finally:
        await client.close()
        await server.stop()
        await served.authenticator.close()


async def test_past_the_budget_an_address_is_refused_without_hashing(
    node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hasher = Hasher(monkeypatch)
    caplog.set_level(logging.WARNING, "lograft.api.authentication")
    # bob logs in once: his password is in the verified cache from now on.
    assert (await node.get(basic("bob", BOB_PASSWORD))).status == 200
    assert hasher.calls == 1
    # A guesser at the same address: a wrong password or an unknown user,
    # each hashed, until the budget is spent.
    for i in range(BUDGET):
        user = "bob" if i % 2 else "nobody"
        await _refused(await node.get(basic(user, f"guess-{i}")), "bad_credentials")
    assert hasher.calls == 1 + BUDGET
    # Past it: refused at once, never hashed, whatever the user or password.
    for i in range(20):
        resp = await node.get(basic("bob" if i % 2 else "carol", f"more-{i}"))
        error = await _refused(resp, "too_many_failures")
        # One token is back after window / budget: 12 s.
        assert error["details"]["retry_after_ms"] == WINDOW_MS // BUDGET
        assert resp.headers["Retry-After"] == str(WINDOW_MS // BUDGET // 1000)
        assert "try again in 12 s" in error["message"]
    assert hasher.calls == 1 + BUDGET
    # Even a right password that is not cached yet waits its turn ...
    await _refused(await node.get(basic("carol", CAROL_PASSWORD)), "too_many_failures")
    assert hasher.calls == 1 + BUDGET
    # ... but the cached user at that address is not refused, nor a bearer caller.
    for _ in range(3):
        resp = await node.get(basic("bob", BOB_PASSWORD))
        assert resp.status == 200, await resp.text()
    assert (await node.get(f"Bearer {token()}")).status == 200
    assert hasher.calls == 1 + BUDGET
    # Another address still has its own budget: it hashes.
    resp = await node.get(basic("carol", CAROL_PASSWORD), source="127.0.0.2")
    assert resp.status == 200, await resp.text()
    await _refused(await node.get(basic("carol", "wrong"), "127.0.0.2"), "bad_credentials")
    assert hasher.calls == 3 + BUDGET
    # The refusals were logged at a bounded rate: one line for the address.
    blocked = [r for r in caplog.records if "reason=too_many_failures" in r.getMessage()]
    assert len(blocked) == 1
    assert "peer=127.0.0.1" in blocked[0].getMessage()
    assert node.budget.refused == 21


async def test_the_budget_frees_after_the_window(node: Node, monkeypatch) -> None:
    hasher = Hasher(monkeypatch)
    for i in range(BUDGET):
        await _refused(await node.get(basic("bob", f"guess-{i}")), "bad_credentials")
    resp = await node.get(basic("carol", CAROL_PASSWORD))
    await _refused(resp, "too_many_failures")
    wait_ms = int((await resp.json())["error"]["details"]["retry_after_ms"])
    # Just before the time it was told: still refused, with the rest of the wait.
    node.clock.now += wait_ms / 1000 - 1
    resp = await node.get(basic("carol", CAROL_PASSWORD))
    error = await _refused(resp, "too_many_failures")
    assert error["details"]["retry_after_ms"] == 1000
    assert hasher.calls == BUDGET
    # At it: one more check runs, and a right password gives its token back.
    node.clock.now += 1
    assert (await node.get(basic("carol", CAROL_PASSWORD))).status == 200
    assert hasher.calls == BUDGET + 1
    await _refused(await node.get(basic("bob", "one more guess")), "bad_credentials")
    await _refused(await node.get(basic("bob", "and another")), "too_many_failures")
    assert hasher.calls == BUDGET + 2
    # A whole window later everything is forgotten: the full budget again.
    node.clock.now += WINDOW_MS / 1000
    for i in range(BUDGET):
        await _refused(await node.get(basic("bob", f"later-{i}")), "bad_credentials")
    await _refused(await node.get(basic("bob", "over")), "too_many_failures")
    assert hasher.calls == 2 * BUDGET + 2


async def test_concurrent_guesses_cannot_overrun_the_budget(node: Node, monkeypatch) -> None:
    """A check spends its token before it waits for the hasher, so guesses
    sent at once are not all let through while the first ones hash."""
    hasher = Hasher(monkeypatch)
    answers = await asyncio.gather(
        *(node.get(basic("bob", f"guess-{i}")) for i in range(4 * BUDGET))
    )
    statuses = sorted(
        [(await r.json())["error"]["details"]["reason"] for r in answers], reverse=True
    )
    assert statuses == ["too_many_failures"] * 3 * BUDGET + ["bad_credentials"] * BUDGET
    assert hasher.calls == BUDGET


async def test_the_table_of_addresses_stays_bounded(node: Node) -> None:
    # addresses_max is 3: the fourth address to fail forgets the first.
    for last in range(1, 5):
        await _refused(await node.get(basic("bob", "wrong"), f"127.0.0.{last}"), "bad_credentials")
    assert len(node.budget) == 3
    assert node.budget.spent("127.0.0.1") == 0
    assert node.budget.spent("127.0.0.4") == 1


def test_a_budget_of_zero_refuses_nothing() -> None:
    budget = PasswordFailureBudget(0, WINDOW_MS, 10)
    for _ in range(1000):
        budget.take("10.0.0.1")
    assert len(budget) == 0 and budget.refused == 0


def test_tokens_come_back_at_the_budget_per_window() -> None:
    clock = Clock()
    budget = PasswordFailureBudget(10, 60_000, 100, clock=clock)
    for _ in range(10):
        budget.take("10.0.0.1")
    with pytest.raises(AuthenticationFailed) as refused:
        budget.take("10.0.0.1")
    assert refused.value.reason is AuthFailure.TOO_MANY_FAILURES
    assert refused.value.retry_after_ms == 6000
    clock.now += 3
    with pytest.raises(AuthenticationFailed) as refused:
        budget.take("10.0.0.1")
    assert refused.value.retry_after_ms == 3000
    clock.now += 3
    budget.take("10.0.0.1")  # exactly when it was told
    # A right password gives its token back; nothing goes below zero.
    budget.give_back("10.0.0.1")
    budget.take("10.0.0.1")
    for _ in range(20):
        budget.give_back("10.0.0.2")  # never seen: nothing to give back
    assert budget.spent("10.0.0.2") == 0
    clock.now += 60
    assert budget.spent("10.0.0.1") == 0


def test_a_caller_rotating_addresses_cannot_grow_the_table() -> None:
    clock = Clock()
    budget = PasswordFailureBudget(2, 60_000, 64, clock=clock)
    for i in range(100_000):
        budget.take(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
    assert len(budget) == 64
    # The most recent failures are the ones kept.
    assert budget.spent("10.1.134.159") == 1


def test_the_settings_are_bounded() -> None:
    from lograft.errors import InvalidConfigError

    defaults = security("password")
    assert defaults.password_failures_per_address_max == 10
    assert defaults.password_failure_window_ms == 60_000
    assert defaults.password_failure_addresses_max == 4096
    for field, bad in (
        ("password_failures_per_address_max", -1),
        ("password_failure_window_ms", 0),
        ("password_failure_addresses_max", 0),
    ):
        with pytest.raises(InvalidConfigError, match=field):
            security("password", **{field: bad})
