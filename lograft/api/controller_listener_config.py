"""`[controller_listener]` in the node config: the controller listener's sizes.

A typed Record (`lograft.typed`) composed into the node config by
`lograft.node.config`; the listener itself is api/controller_listener.py.
Every limit has its unit last.
"""

from __future__ import annotations

from lograft.api.http_config import AtLeast1KiB, is_host_port
from lograft.typed import FieldError, NonNegative, Positive, Record


class ControllerListenerConfig(Record):
    """`[controller_listener]` in the node config: what the controller
    listener accepts. Its timeouts (headers, bodies, keep-alive, TLS
    handshake) are `[http]`'s."""

    # Connections held at once, over all addresses; more are answered 503
    # CONNECTIONS_LIMIT_REACHED and closed. Each broker keeps about two (its
    # heartbeat thread's pool and its control pool).
    connections_max: Positive = 512
    # Connections from one remote address at once (at most connections_max).
    connections_per_ip_max: Positive = 64
    # Largest request body, bytes. The largest legitimate one is a
    # report-log-ends of 10,000 partitions, about 1 MiB of JSON.
    request_bytes_max: AtLeast1KiB = 4 * 1024 * 1024
    # Request bodies held at once, bytes (at least request_bytes_max).
    request_bytes_inflight_max: Positive = 64 * 1024 * 1024
    # Voter id -> host:port this node dials for that voter's controller
    # listener instead of its `controller` address (a proxy per link in
    # fault-injection tests, as [http.dial] for HTTP).
    dial: dict[NonNegative, str] = {}

    def __post_init__(self) -> None:
        if self.request_bytes_inflight_max < self.request_bytes_max:
            raise FieldError(
                "request_bytes_inflight_max",
                f"{self.request_bytes_inflight_max} is below "
                f"controller_listener.request_bytes_max={self.request_bytes_max}",
            )
        for peer, address in self.dial.items():
            if not is_host_port(address):
                raise FieldError(f"dial.{peer}", f"{address!r}: write it as host:port")
        if self.connections_per_ip_max > self.connections_max:
            raise FieldError(
                "connections_per_ip_max",
                f"{self.connections_per_ip_max} is above "
                f"controller_listener.connections_max={self.connections_max}",
            )
