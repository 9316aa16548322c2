"""The node's HTTP listener: aiohttp's server behind the connection guard.

What a client may do to a connection, all from `[http]` in the node config
(documented in docs/api.md, "Connections"):

- `connections_max`, `connections_per_ip_max`, `header_read_timeout_ms`:
  enforced by `ConnectionGuard` (connection_guard.py);
- `keepalive_timeout_ms`: an idle keep-alive connection is closed after this
  long (aiohttp's `keepalive_timeout`);
- request line and header sizes: `HEADER_LINE_BYTES_MAX`,
  `HEADER_FIELD_BYTES_MAX` below (aiohttp answers 400 over them);
- client faults are logged through `ClientFaultLog`, never as tracebacks
  (client_faults.py).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from lograft.api.client_faults import ClientFaultLog, ServerLogger
from lograft.api.connection_guard import ConnectionGuard
from lograft.api.http_errors import CLIENT_FAULTS_KEY
from lograft.api.node_config import HttpConfig

log = logging.getLogger(__name__)

# Longest request line (method, path and query, version), bytes.
HEADER_LINE_BYTES_MAX = 8190
# Longest header (name and value), bytes.
HEADER_FIELD_BYTES_MAX = 8190
# Connections the kernel queues for accepting (capped by net.core.somaxconn):
# room for a burst, so one flood does not make honest clients wait for a SYN
# retry while the node accepts and refuses the flood.
LISTEN_BACKLOG = 1024


class HttpServer:
    def __init__(self, app: web.Application, config: HttpConfig) -> None:
        self.config = config
        self.faults = ClientFaultLog(config.client_fault_log_interval_ms)
        self.guard = ConnectionGuard(
            connections_max=config.connections_max,
            connections_per_ip_max=config.connections_per_ip_max,
            header_read_timeout_ms=config.header_read_timeout_ms,
            faults=self.faults,
        )
        app[CLIENT_FAULTS_KEY] = self.faults
        # Outermost, so it sees every request aiohttp hands to the application.
        app.middlewares.insert(0, self.guard.middleware())
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=config.keepalive_timeout_ms / 1000,
            max_line_size=HEADER_LINE_BYTES_MAX,
            max_field_size=HEADER_FIELD_BYTES_MAX,
            logger=ServerLogger(self.faults),
        )
        self._listener: asyncio.Server | None = None

    async def start(self) -> None:
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        self._listener = await asyncio.get_running_loop().create_server(
            self.guard.protocol_factory(server),
            self.config.host,
            self.config.port,
            reuse_address=True,
            backlog=LISTEN_BACKLOG,
        )

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # accept no more; open connections end below
        await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
