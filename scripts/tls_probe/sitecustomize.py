"""The TLS cost probe of scripts/bench_tls_cost.py, loaded into each node it starts.

Python imports `sitecustomize` at start-up from the first directory on its path
that has one; bench_tls_cost.py starts the nodes with this directory first on
PYTHONPATH and `LOGRAFT_TLS_PROBE_DIR` set. Without that variable this module
does nothing. With it, it wraps the calls that carry HTTP bytes through
asyncio's TLS layer (CPython's asyncio/sslproto.py around `ssl.SSLObject` and
two `ssl.MemoryBIO`s) and the socket transport under it, and counts for each:
calls, bytes, and the CPU time of the calling thread spent inside
(`time.thread_time`, so waiting for the GIL or for the CPU is not counted).
A thread writes the counters, with the process's CPU time, to
`<dir>/<pid>.json` every `DUMP_INTERVAL_S`.

Measuring costs something: two `thread_time` calls and the wrapper per
counted call, part of it inside the interval a call measures and all of it
inside an enclosing counted call's (a `buffer_updated` holds several
`SSLObject.read`s); bench_tls_cost.py measures both and takes them out.
"""

from __future__ import annotations

import asyncio.selector_events
import asyncio.sslproto
import json
import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

DUMP_INTERVAL_S = 0.1
ENV = "LOGRAFT_TLS_PROBE_DIR"

# key -> [calls, CPU seconds, bytes]
counters: dict[str, list[float]] = {}


def _size(value: Any) -> int:
    if isinstance(value, int):
        return value
    try:
        return len(value)
    except TypeError:
        return 0


def wrap(owner: type, name: str, key: str, size_arg: int | None = None) -> None:
    """Count calls, CPU time and (argument `size_arg`'s, else the result's)
    bytes of `owner.name` under `key`."""
    inner: Callable[..., Any] = getattr(owner, name)
    clock = time.thread_time
    slot = counters.setdefault(key, [0, 0.0, 0])

    def counted(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        result = None
        try:
            result = inner(*args, **kwargs)
            return result
        finally:
            slot[1] += clock() - t0
            slot[0] += 1
            slot[2] += _size(args[size_arg] if size_arg is not None else result)

    setattr(owner, name, counted)


def install(directory: str | None) -> None:
    sslproto = asyncio.sslproto
    selector = asyncio.selector_events
    # OpenSSL's record layer: decrypt (read) and encrypt (write) through the BIOs.
    wrap(ssl.SSLObject, "read", "ssl_read")
    wrap(ssl.SSLObject, "write", "ssl_write", size_arg=1)
    # asyncio's TLS layer: all it does for one socket read / one app write.
    wrap(sslproto.SSLProtocol, "buffer_updated", "tls_read", size_arg=1)
    wrap(sslproto._SSLProtocolTransport, "write", "tls_write", size_arg=1)
    # The socket transport: a readable socket (everything a read leads to),
    # and a send.
    wrap(selector._SelectorSocketTransport, "_read_ready", "sock_read")
    wrap(selector._SelectorSocketTransport, "write", "sock_write", size_arg=1)
    # aiohttp's HTTP parsing and everything it runs synchronously.
    import aiohttp.client_proto
    import aiohttp.web_protocol

    wrap(aiohttp.web_protocol.RequestHandler, "data_received", "http_in", size_arg=1)
    wrap(aiohttp.client_proto.ResponseHandler, "data_received", "http_in", size_arg=1)
    if directory is not None:
        threading.Thread(target=_dump_forever, args=(directory,), daemon=True).start()


def snapshot() -> dict[str, float]:
    """The counters, flat (`<key>.n`, `<key>.s`, `<key>.bytes`), and the process's CPU time."""
    out = {"process_cpu_s": time.process_time()}
    for key, (n, seconds, size) in list(counters.items()):
        out[key + ".n"], out[key + ".s"], out[key + ".bytes"] = n, seconds, size
    return out


def _dump_forever(directory: str) -> None:
    path = os.path.join(directory, f"{os.getpid()}.json")
    while True:
        time.sleep(DUMP_INTERVAL_S)
        with open(path + ".tmp", "w") as f:
            json.dump(snapshot(), f)
        os.replace(path + ".tmp", path)


if os.environ.get(ENV):
    install(os.environ[ENV])
