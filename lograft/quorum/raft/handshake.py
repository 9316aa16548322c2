"""Bounds on Raft connections whose peer has not proven the password yet.

Every Raft link has a password (raft_config requires one), so pysyncobj
decrypts and authenticates each frame before it unpickles it. Until the peer
of an accepted connection has sent one authenticated frame (its random key,
which pysyncobj stores as `sendRandKey`), the connection may be a
stranger's. Stock pysyncobj would keep such a connection forever if it stays
silent (its idle timeout is only checked when the socket has an event), and
would buffer a frame of any length the stranger announces, up to 2 GiB.

`HandshakeLimits` bounds that, enforced by the transport
(`PeerTCPTransport`): an unauthenticated connection is dropped once it has
buffered more than `max_bytes`, or once it is older than `timeout_s` without
having named itself; and when `max_connections` of them are open, the oldest
is dropped for a new one (so a stranger must keep opening connections faster
than a real peer finishes one round trip to keep it out). A peer that knows
the password needs one round trip and a few hundred bytes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pysyncobj.tcp_connection import TcpConnection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HandshakeLimits:
    """Bounds on an accepted connection whose peer has not proven the password yet."""

    timeout_s: float
    max_bytes: int
    max_connections: int


class HandshakeGuardedConnection(TcpConnection):
    """An accepted connection that buffers at most `handshake_max_bytes` unauthenticated.

    pysyncobj's TcpServer builds a plain TcpConnection and offers no hook to
    build another class; `guard_accepted` re-classes it on accept, before the
    poller delivers its first read. The override is of TcpConnection's private
    (name-mangled) read step, which appends one recv() to the read buffer.
    """

    handshake_started: float
    handshake_max_bytes: int

    def _TcpConnection__processRead(self) -> bool:
        more = bool(TcpConnection._TcpConnection__processRead(self))
        if not authenticated(self):
            buffered = len(self._TcpConnection__readBuffer)
            if buffered > self.handshake_max_bytes:
                log.debug("dropping a Raft connection: %d bytes unauthenticated", buffered)
                self.disconnect()
                return False
        return more


def guard_accepted(conn: TcpConnection, limits: HandshakeLimits) -> HandshakeGuardedConnection:
    """Bound `conn`, a connection pysyncobj's TcpServer has just accepted."""
    if type(conn) is not TcpConnection:
        # Re-classing anything else would silently drop its own behaviour.
        raise TypeError(f"expected a pysyncobj TcpConnection, got {type(conn).__name__}")
    conn.__class__ = HandshakeGuardedConnection
    assert isinstance(conn, HandshakeGuardedConnection)
    conn.handshake_started = time.monotonic()
    conn.handshake_max_bytes = limits.max_bytes
    return conn


def authenticated(conn: TcpConnection) -> bool:
    """The peer has sent one frame that decrypted with our key (its random key)."""
    return bool(conn.sendRandKey)


def handshake_started(conn: TcpConnection) -> float:
    # Every accepted connection is guarded; anything else counts as oldest.
    return float(getattr(conn, "handshake_started", 0.0))
