"""A TCP forwarder a test can hold: while held, it cuts every connection it
carries and closes each new one at once, so the node that dials through it
cannot reach its peer; released, it forwards again.

Used to hold a restarted broker's Raft link (its `[raft.dial]`) and so keep it,
deterministically, between its start and its metadata catch-up.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.raft_support import free_port

# How long a blocked accept/recv waits before it looks at the stop flag again, s.
POLL_S = 0.2
CHUNK_BYTES = 65536


class HeldLink:
    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(POLL_S)
        self._held = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._held.set()
        self._close_all()

    def release(self) -> None:
        self._held.clear()

    def close(self) -> None:
        self._stop.set()
        self._close_all()
        self._acceptor.join()
        self._listener.close()
        for t in self._threads:
            t.join()

    def _close_all(self) -> None:
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self._held.is_set():
                conn.close()
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=POLL_S * 5)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._open.update((conn, up))
            for a, b in ((conn, up), (up, conn)):
                t = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                t.start()
                self._threads.append(t)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(POLL_S)
        while not self._stop.is_set():
            try:
                data = src.recv(CHUNK_BYTES)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        with self._lock:
            for s in (src, dst):
                if s in self._open:
                    self._open.discard(s)
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
