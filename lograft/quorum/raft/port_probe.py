"""One non-blocking TCP connect to a peer's Raft port: does anything listen there?

When a Raft link drops, the question that decides how soon to act is whether
the peer's process is gone. A process killed by SIGKILL (or that exited) has
no listening socket any more, and the kernel of its host answers a connect
with a reset at once (ECONNREFUSED), on loopback and on a real network alike.
Every other outcome is ambiguous and is treated as "maybe alive":

- the connect succeeds: something listens (the peer, a restarted peer, or a
  proxy in between; a SIGSTOPped process's kernel still completes the
  handshake);
- nothing answers within the probe's timeout: a partition that drops
  packets, or a peer host that is down;
- any other error (no route, name not resolved).

The probe never blocks the Raft thread: it starts the connect and is polled
on later ticks (`poll`, zero-timeout; `select.poll`, not `select.select`,
since a node with thousands of segment files has descriptors past 1024). The
socket is closed as soon as the outcome is known or the timeout passes. The
peer's transport sees at most one connection that never proves the password,
and its handshake bounds drop it.
"""

from __future__ import annotations

import enum
import errno
import select
import socket

_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, errno.EALREADY})


class ProbeOutcome(enum.Enum):
    PENDING = "pending"
    REFUSED = "refused"  # nothing listens: the peer's process is gone
    LISTENING = "listening"  # something accepted the connection
    UNKNOWN = "unknown"  # timed out, no route, unresolved: ambiguous


class PortProbe:
    """A connect to `host:port` started now; `poll` until it is no longer PENDING."""

    def __init__(self, host: str | None, port: int, now_s: float, timeout_s: float) -> None:
        self._deadline_s = now_s + timeout_s
        self._sock: socket.socket | None = None
        self.outcome = ProbeOutcome.UNKNOWN
        if host is None:
            return  # the name did not resolve: nothing to probe
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            return
        sock.setblocking(False)
        self._sock = sock
        self._settle(sock.connect_ex((host, port)))

    def poll(self, now_s: float) -> ProbeOutcome:
        """The outcome so far; reads the connect's result without waiting."""
        sock = self._sock
        if self.outcome is not ProbeOutcome.PENDING or sock is None:
            return self.outcome
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        if poller.poll(0):
            self._settle(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
        elif now_s >= self._deadline_s:
            self._finish(ProbeOutcome.UNKNOWN)
        return self.outcome

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _settle(self, code: int) -> None:
        if code == 0:
            self._finish(ProbeOutcome.LISTENING)
        elif code == errno.ECONNREFUSED:
            self._finish(ProbeOutcome.REFUSED)
        elif code in _IN_PROGRESS:
            self.outcome = ProbeOutcome.PENDING
        else:
            self._finish(ProbeOutcome.UNKNOWN)

    def _finish(self, outcome: ProbeOutcome) -> None:
        self.outcome = outcome
        self.close()
