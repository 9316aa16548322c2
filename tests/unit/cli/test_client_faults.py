"""Client faults: rate-limited INFO lines, never tracebacks; the node's own errors stay ERROR."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage

from lograft.api.client_faults import (
    CLIENT_DISCONNECTED,
    MALFORMED_REQUEST,
    ClientFaultLog,
    ServerLogger,
    describe,
    quote,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_one_line_per_kind_per_interval_counting_the_rest(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lograft.api.clients")
    faults = ClientFaultLog(10_000, clock=clock)
    for i in range(5):
        faults.event(MALFORMED_REQUEST, "request %d", i)
    faults.event(CLIENT_DISCONNECTED, "gone")  # another kind has its own budget
    assert infos(caplog) == [
        "client fault [malformed-request]: request 0",
        "client fault [client-disconnected]: gone",
    ]
    clock.now += 9.9
    faults.event(MALFORMED_REQUEST, "request %d", 5)
    assert len(infos(caplog)) == 2
    clock.now += 0.1
    faults.event(MALFORMED_REQUEST, "request %d", 6)
    assert infos(caplog)[-1] == (
        "client fault [malformed-request]: request 6 (and 5 more since the last such line)"
    )
    assert faults.counts == {MALFORMED_REQUEST: 7, CLIENT_DISCONNECTED: 1}


def test_debug_shows_every_fault_left_out_at_info(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lograft.api.clients")
    faults = ClientFaultLog(10_000, clock=clock)
    for i in range(3):
        faults.event(MALFORMED_REQUEST, "request %d", i)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert levels == [
        (logging.INFO, "client fault [malformed-request]: request 0"),
        (logging.DEBUG, "client fault [malformed-request]: request 1"),
        (logging.DEBUG, "client fault [malformed-request]: request 2"),
    ]


def test_server_logger_turns_client_faults_into_lines_and_keeps_real_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    faults = ClientFaultLog(10_000)
    logger = ServerLogger(faults)
    # What aiohttp's RequestHandler does on a request it cannot parse ...
    logger.exception(
        "Error handling request from %s", "10.0.0.1", exc_info=BadHttpMessage("Bad\n header")
    )
    # ... on a client gone at the wrong moment ...
    logger.exception("Unhandled exception", exc_info=ConnectionResetError("Connection lost"))
    # ... and on a bug of the node's own.
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        logger.exception("Error handling request from %s", "10.0.0.1")
    records = [(r.name, r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert records == [
        (
            "lograft.api.clients",
            logging.INFO,
            "client fault [malformed-request]: Error handling request from 10.0.0.1: "
            "400, message: Bad header",
            False,
        ),
        (
            "lograft.api.clients",
            logging.INFO,
            "client fault [client-disconnected]: Unhandled exception: Connection lost",
            False,
        ),
        ("aiohttp.server", logging.ERROR, "Error handling request from 10.0.0.1", True),
    ]


def test_descriptions_are_one_bounded_line() -> None:
    text = describe(BadHttpMessage("x\n" * 500))
    assert "\n" not in text and len(text) <= 203
    assert describe(ConnectionResetError()) == "ConnectionResetError"


def test_client_text_cannot_forge_a_log_line() -> None:
    assert (
        quote("/v1/topics/a\n2026-01-01 ERROR forged") == "/v1/topics/a\\n2026-01-01 ERROR forged"
    )
    assert len(quote("/" + "a" * 10_000)) <= 203
