"""The controller listener: the active controller's RPCs, served off the main loop.

As Kafka's controllers listen on a listener of their own
(`controller.listener.names`), a voter whose `[[voters]]` entry names a
`controller = "host:port"` serves the controller RPCs (`POST
/internal/v1/controller/<name>`: register, heartbeat, alter-partitions,
report-log-ends, producer-id blocks, forwarded admin changes) on that
address, from the controller's own thread and event loop
(lograft/node/controller_thread.py). A broker's heartbeat then never waits
for the node's main loop, which also serves produce, fetch and replication.

It is the node's HTTP listener in every protection (http_server.py): the
connection guard and its caps, the header and body deadlines, TLS (the
node's `[tls]` server context, client certificates included), the cluster
secret on every internal route (app.py), request bodies read under a budget
of their own, the one JSON error map. Only the sizes differ, from
`[controller_listener]` (`ControllerListenerConfig`): it serves a few small
calls per broker, not clients. `/healthz` and `/readyz` answer too (ready:
this node is the active controller). Nothing else is routed there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from lograft.api.app import create_app
from lograft.api.controller_listener_config import ControllerListenerConfig
from lograft.api.http_config import HttpConfig
from lograft.api.routes_internal import ControllerCalls, add_controller_routes


def listener_http_config(
    http: HttpConfig, listener: ControllerListenerConfig, address: str
) -> HttpConfig:
    """`[http]` with the controller listener's address and sizes."""
    host, _sep, port = address.rpartition(":")
    return msgspec.structs.replace(
        http,
        host=host,
        port=int(port),
        connections_max=listener.connections_max,
        connections_per_ip_max=listener.connections_per_ip_max,
        request_bytes_max=listener.request_bytes_max,
        admin_request_bytes_max=listener.request_bytes_max,
        request_bytes_inflight_max=listener.request_bytes_inflight_max,
    )


def controller_app(
    calls: ControllerCalls,
    *,
    cluster_secret: str,
    request_bytes_max: int,
    active: Callable[[], bool],
) -> web.Application:
    """The controller listener's routes: the controller RPCs, health, readiness."""

    def ready() -> tuple[bool, dict[str, Any]]:
        is_active = active()
        return is_active, {"controller_active": is_active}

    app = create_app(
        cluster_secret=cluster_secret, request_bytes_max=request_bytes_max, ready=ready
    )
    add_controller_routes(app, calls)
    return app
