"""What clients do wrong, logged without letting them flood the log.

A client can send HTTP that does not parse, stop halfway through a body,
hang up before the answer (or before a stream's headers), dribble its headers,
or open more connections than the node admits. None of these is the node's
fault, and a client can repeat any of them at will: logged at ERROR with a
traceback (what aiohttp and a last-resort handler do by default) they would
bury real failures and let one client fill the disk.

So every such event is a *client fault* of a named kind, logged on the
`lograft.api.clients` logger at INFO at most once per interval per kind
(`[http] client_fault_log_interval_ms`); the line carries the number of
events of that kind that were not logged since the previous one. With DEBUG
enabled, each event not logged at INFO is logged at DEBUG. No traceback is
ever logged for a client fault. Anything else -- a failure that may be the
node's own -- keeps its ERROR line and traceback.

Kinds: `malformed-request` (the request line, headers or chunked body do not
parse), `client-disconnected` (the connection closed before the answer was
written), `header-timeout` (`[http] header_read_timeout_ms`),
`connections-limit` (`[http] connections_max` / `connections_per_ip_max`),
`body-timeout` (`[http] body_read_timeout_ms`), `request-bytes-limit` (a body
refused for want of room in `[http] request_bytes_inflight_max`),
`tls-handshake` (no TLS handshake within `[http] tls_handshake_timeout_ms`, or
a failed one: plain HTTP to a TLS port, an untrusted client certificate).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

MALFORMED_REQUEST = "malformed-request"
CLIENT_DISCONNECTED = "client-disconnected"
HEADER_TIMEOUT = "header-timeout"
CONNECTIONS_LIMIT = "connections-limit"
BODY_TIMEOUT = "body-timeout"
REQUEST_BYTES_LIMIT = "request-bytes-limit"
TLS_HANDSHAKE = "tls-handshake"

# Default of `[http] client_fault_log_interval_ms`: at most one INFO line per
# kind of client fault in this long, ms.
CLIENT_FAULT_LOG_INTERVAL_MS = 10_000
# Longest description of one fault in a log line, characters (client data is
# quoted in it: bound it).
DESCRIPTION_CHARS_MAX = 200

clients_logger = logging.getLogger("lograft.api.clients")


@dataclass(slots=True)
class _KindState:
    last_logged: float
    suppressed: int = 0


class ClientFaultLog:
    """One INFO line per kind per interval, counting the events it leaves out."""

    def __init__(
        self,
        interval_ms: int = CLIENT_FAULT_LOG_INTERVAL_MS,
        logger: logging.Logger = clients_logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_ms / 1000
        self.logger = logger
        self._clock = clock
        self._kinds: dict[str, _KindState] = {}
        # Every event seen, per kind, logged or not (tests, and a debugger).
        self.counts: dict[str, int] = {}

    def event(self, kind: str, message: str, *args: object) -> None:
        """Record one fault; `message % args` describes it (no trailing period)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self._clock()
        state = self._kinds.get(kind)
        if state is not None and now - state.last_logged < self.interval_s:
            state.suppressed += 1
            if self.logger.isEnabledFor(logging.DEBUG):
                self.logger.debug("client fault [%s]: " + message, kind, *args)
            return
        suppressed = 0 if state is None else state.suppressed
        self._kinds[kind] = _KindState(last_logged=now)
        if suppressed:
            self.logger.info(
                "client fault [%s]: " + message + " (and %d more since the last such line)",
                kind,
                *args,
                suppressed,
            )
        else:
            self.logger.info("client fault [%s]: " + message, kind, *args)


def client_fault_kind(exc: BaseException) -> str | None:
    """The kind of client fault `exc` shows, or None when it may be the node's own.

    Only for exceptions raised while reading or answering a request: there a
    ConnectionError means the client's connection went away."""
    if isinstance(exc, HttpProcessingError | RequestPayloadError):
        return MALFORMED_REQUEST
    if isinstance(exc, ConnectionError):
        return CLIENT_DISCONNECTED
    return None


# A bytes literal as aiohttp's parse errors quote the request's bytes.
_QUOTED_BYTES = re.compile(r"b'(?:[^'\\]|\\.)*'" + r'|b"(?:[^"\\]|\\.)*"')
QUOTED_BYTES_HIDDEN = "<request bytes not shown>"


def redact_request_bytes(text: str) -> str:
    """`text` without the request bytes aiohttp quotes in a parse error (an
    over-long or malformed header line is quoted whole or in part: it may be
    an Authorization header or the cluster secret)."""
    return _QUOTED_BYTES.sub(QUOTED_BYTES_HIDDEN, text)


def describe(exc: BaseException) -> str:
    """One bounded line for a log: aiohttp's parse errors span several lines;
    the request bytes they quote are left out (they may hold a credential)."""
    return _bounded(redact_request_bytes(" ".join(str(exc).split())) or type(exc).__name__)


def quote(text: str) -> str:
    """Client text (a decoded path) for a log line: escaped, so that an encoded
    newline cannot forge a line of its own, and bounded."""
    return _bounded(repr(text)[1:-1])


def _bounded(text: str) -> str:
    if len(text) > DESCRIPTION_CHARS_MAX:
        return text[:DESCRIPTION_CHARS_MAX] + "..."
    return text


class ServerLogger(logging.LoggerAdapter[logging.Logger]):
    """The logger handed to aiohttp's server (`AppRunner(logger=...)`).

    aiohttp logs "Error handling request" with a traceback at ERROR for every
    request line or header it cannot parse, and "Unhandled exception" when a
    client hangs up at the wrong moment. Those become client faults; every
    other record passes through unchanged."""

    def __init__(self, faults: ClientFaultLog, logger: logging.Logger | None = None) -> None:
        super().__init__(logger or logging.getLogger("aiohttp.server"), {})
        self.faults = faults

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = _exception_of(kwargs.get("exc_info"))
        kind = client_fault_kind(exc) if exc is not None else None
        if exc is None or kind is None:
            super().log(level, msg, *args, **kwargs)
            return
        what = str(msg) % args if args else str(msg)
        self.faults.event(kind, "%s: %s", what, describe(exc))


def _exception_of(exc_info: object) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        value = exc_info[1]
        return value if isinstance(value, BaseException) else None
    if exc_info:  # True: the exception being handled
        return sys.exc_info()[1]
    return None
