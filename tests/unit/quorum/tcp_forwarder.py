"""A tiny asyncio TCP forwarder standing in for a toxiproxy proxy in tests.

It listens on 127.0.0.1:<port> and pipes every accepted connection to a
target. It counts accepted connections and bytes in each direction, and can
be cut (listener closed, live connections reset) and healed (listening again
on the same port), which is what the chaos suite will do with toxiproxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


class TcpForwarder:
    def __init__(self, target_port: int, listen_port: int = 0) -> None:
        self.target_port = target_port
        self.port = listen_port
        self.connections_accepted = 0
        self.bytes_to_target = 0
        self.bytes_from_target = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and reset the live ones."""
        await self.stop_listening()
        await self.reset()

    async def stop_listening(self) -> None:
        """Refuse new connections; the live ones go on."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def reset(self) -> None:
        """Reset the live connections."""
        for writer in list(self._writers):
            transport = writer.transport
            transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def heal(self) -> None:
        await self.start()

    async def close(self) -> None:
        await self.cut()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._writers.add(up_writer)
            await asyncio.gather(
                self._pipe(reader, up_writer, to_target=True),
                self._pipe(up_reader, writer, to_target=False),
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()
            self._tasks.discard(task)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_target: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if to_target:
                    self.bytes_to_target += len(data)
                else:
                    self.bytes_from_target += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            # Half-closes look like a dead peer to pysyncobj anyway; close both.
            with contextlib.suppress(Exception):
                writer.transport.abort()


async def cut_together(forwarders: Iterable[TcpForwarder]) -> None:
    """Cut several forwarders as one event, as a killed process's ports are:
    all stop listening before any live connection is reset. Cut one by one,
    a node whose link through the first was reset could probe the second
    while it still listened, and see its peer alive."""
    cut = list(forwarders)
    for fwd in cut:
        await fwd.stop_listening()
    for fwd in cut:
        await fwd.reset()
