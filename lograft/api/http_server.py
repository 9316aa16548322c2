"""The node's HTTP listener: aiohttp's server behind the connection guard.

What a client may do to a connection, all from `[http]` in the node config
(documented in docs/api.md, "Connections"):

- `connections_max`, `connections_per_ip_max`, `header_read_timeout_ms`:
  enforced by `ConnectionGuard` (connection_guard.py);
- `tls_handshake_timeout_ms`: with `[tls]` (an `ssl.SSLContext` passed in),
  each connection's TLS handshake, run by the guard so that connections in
  a handshake count against the caps too;
- `keepalive_timeout_ms`: an idle keep-alive connection is closed after this
  long (aiohttp's `keepalive_timeout`);
- `request_bytes_inflight_max`, `request_bytes_inflight_wait_ms`,
  `body_read_timeout_ms`: what request bodies may hold and take, enforced by
  `RequestBodies` (request_bodies.py); aiohttp's own decompression of bodies
  is off (a `Content-Encoding` is refused there), and a body left unread is
  drained for at most `UNREAD_BODY_DRAIN_MS` before the connection closes;
- request line and header sizes: `HEADER_LINE_BYTES_MAX`,
  `HEADER_FIELD_BYTES_MAX` below (answered 400 over them);
- aiohttp's own error answers are lograft's JSON errors (protocol_errors.py);
- client faults are logged through `ClientFaultLog`, never as tracebacks
  (client_faults.py).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from aiohttp import web

from lograft.api.client_faults import ClientFaultLog, ServerLogger
from lograft.api.connection_guard import ConnectionGuard
from lograft.api.http_config import HttpConfig
from lograft.api.http_errors import CLIENT_FAULTS_KEY
from lograft.api.protocol_errors import JsonErrorRequestHandler, json_http_errors
from lograft.api.request_bodies import UNCOUNTED_BODY_BYTES_MAX, RequestBodies
from lograft.api.request_pipeline import PIPELINE_KEY

log = logging.getLogger(__name__)

# Longest request line (method, path and query, version), bytes.
HEADER_LINE_BYTES_MAX = 8190
# Longest header (name and value), bytes.
HEADER_FIELD_BYTES_MAX = 8190
# Connections the kernel queues for accepting (capped by net.core.somaxconn):
# room for a burst, so one flood does not make honest clients wait for a SYN
# retry while the node accepts and refuses the flood.
LISTEN_BACKLOG = 1024
# After answering a request whose body it did not read (refused, or answered
# without it), the node reads and drops what is left of the body for at most
# this long before closing, so that its answer is not lost to a reset; ms
# (aiohttp's lingering close).
UNREAD_BODY_DRAIN_MS = 2_000


class HttpServer:
    def __init__(
        self,
        app: web.Application,
        config: HttpConfig,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: serve HTTPS with this server context (None: plain HTTP)."""
        self.config = config
        self.faults = ClientFaultLog(config.client_fault_log_interval_ms)
        self.guard = ConnectionGuard(
            connections_max=config.connections_max,
            connections_per_ip_max=config.connections_per_ip_max,
            header_read_timeout_ms=config.header_read_timeout_ms,
            faults=self.faults,
            tls=tls,
            tls_handshake_timeout_ms=config.tls_handshake_timeout_ms,
        )
        self.bodies = RequestBodies(
            request_bytes_max=config.request_bytes_max,
            admin_request_bytes_max=config.admin_request_bytes_max,
            request_bytes_inflight_max=config.request_bytes_inflight_max,
            request_bytes_inflight_wait_ms=config.request_bytes_inflight_wait_ms,
            body_read_timeout_ms=config.body_read_timeout_ms,
            faults=self.faults,
        )
        app[CLIENT_FAULTS_KEY] = self.faults
        pipeline = app.get(PIPELINE_KEY)
        if pipeline is not None:
            # Its first step and its last before the handler (request_pipeline.py).
            pipeline.guard = self.guard
            pipeline.bodies = self.bodies
        else:
            # Outermost, so it sees every request aiohttp hands to the application.
            app.middlewares.insert(0, self.guard.middleware())
            # Innermost: after routing and the cluster-secret check.
            app.middlewares.append(self.bodies.middleware())
        # aiohttp's protocol (RequestHandler) settings for every connection.
        self._protocol_args: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": config.keepalive_timeout_ms / 1000,
            "max_line_size": HEADER_LINE_BYTES_MAX,
            "max_field_size": HEADER_FIELD_BYTES_MAX,
            "logger": ServerLogger(self.faults),
            # Bodies are taken as they are (request_bodies.py refuses a
            # Content-Encoding); aiohttp would otherwise inflate them, even
            # while draining one nobody reads.
            "auto_decompress": False,
            "lingering_time": UNREAD_BODY_DRAIN_MS / 1000,
            "read_bufsize": UNCOUNTED_BODY_BYTES_MAX,
        }
        self._runner = web.AppRunner(app, handle_signals=False, **self._protocol_args)
        self._listener: asyncio.Server | None = None

    async def start(self) -> None:
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        # An Expect aiohttp does not know is answered before any middleware.
        server.request_handler = json_http_errors(server.request_handler)
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            # What `server()` builds, with aiohttp's errors answered in JSON.
            return JsonErrorRequestHandler(server, loop=loop, **self._protocol_args)

        self._listener = await loop.create_server(
            self.guard.protocol_factory(protocol),
            self.config.host,
            self.config.port,
            reuse_address=True,
            backlog=LISTEN_BACKLOG,
        )

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # accept no more; open connections end below
        await self.guard.abort_handshakes()
        await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
