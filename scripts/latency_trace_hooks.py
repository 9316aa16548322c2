"""Trace points for scripts/trace_latency.py, installed into a node by a `sitecustomize`.

Nothing in lograft imports this module: `trace_latency.py` writes a
`sitecustomize.py` into a scratch directory, puts that directory on the
nodes' PYTHONPATH and names an output directory in `TRACE_LATENCY_DIR`
(deliberately not a LOGRAFT_* name: it configures no node). At interpreter
start the nodes then call `install()`, which wraps a few methods of the
replica manager and the partition (the code itself is untouched) and
stamps each event with `time.perf_counter_ns()` (CLOCK_MONOTONIC, which
every process on the host shares, so events of different processes can be
compared).

One line per event in `trace-<pid>.txt`, fields separated by spaces:

    P tp first last t_entry t_return   leader: a produce, entry to its answer
    A tp first last t                  leader: the batch appended
    F tp follower fetch_offset t       leader: a follower's fetch served
    R tp follower first last t         leader: a follower's fetch answered with data
    H tp high_watermark t              leader: the high watermark moved
    Y tp first last t_start t_end      follower: fetched data applied
    C tp first last t                  leader: a consumer fetch answered with data
                                       (one partition's `fetch` or a many-partition
                                       `consumer_fetch`)
    S tp t_entry t_return              leader: a raw produce's way through the request
                                       pipeline (`RequestPipeline.serve`: quotas,
                                       authentication, the body read, the handler)
    Q tp t_entry t_return              leader: a raw produce's HTTP handler
                                       (`produce_raw`), entry and return (no offsets:
                                       joined to the P inside it by partition and time)
    J topic/-1 t_entry t_return        the node taking a JSON produce: its HTTP
                                       handler's entry and return (no offsets: a
                                       serial load joins it to the P inside it)

`tp` is `topic/partition`; offsets are inclusive. The lines are buffered
and written by a daemon thread every `FLUSH_INTERVAL_S` and at exit, so
the hot path pays a list append and a clock read per event.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

OUT_ENV = "TRACE_LATENCY_DIR"
# How often the buffered lines go to the file, seconds.
FLUSH_INTERVAL_S = 0.2

_lines: list[str] = []
_lock = threading.Lock()
_now = time.perf_counter_ns


def batch_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(first offset, last offset) of each RecordBatch v2 in `data`: the
    base offset (bytes 0-8), the batch length (8-12) and the last offset
    delta (23-27) of each header; a cut batch at the end is skipped."""
    pos = 0
    while pos + 27 <= len(data):
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        delta = int.from_bytes(data[pos + 23 : pos + 27], "big")
        if pos + 12 + length > len(data):
            return
        yield base, base + delta
        pos += 12 + length


def data_span(data: bytes) -> tuple[int, int] | None:
    spans = list(batch_spans(data))
    if not spans:
        return None
    return spans[0][0], spans[-1][1]


def emit(*fields: object) -> None:
    line = " ".join(str(f) for f in fields)
    with _lock:
        _lines.append(line)


def _flush(path: Path) -> None:
    with _lock:
        lines = _lines[:]
        _lines.clear()
    if lines:
        with path.open("a") as f:
            f.write("\n".join(lines) + "\n")


def _flusher(path: Path) -> None:
    while True:
        time.sleep(FLUSH_INTERVAL_S)  # a periodic writer, not a synchronisation
        _flush(path)


def _tp(tp: Any) -> str:
    return f"{tp.topic}/{tp.partition}"


def _wrap_async(owner: type, name: str, after: Callable[..., None]) -> None:
    orig = getattr(owner, name)

    @functools.wraps(orig)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0 = _now()
        result = await orig(*args, **kwargs)
        after(t0, _now(), result, *args, **kwargs)
        return result

    setattr(owner, name, wrapped)


def _wrap_sync(owner: type, name: str, after: Callable[..., None]) -> None:
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0 = _now()
        result = orig(*args, **kwargs)
        after(t0, _now(), result, *args, **kwargs)
        return result

    setattr(owner, name, wrapped)


def _on_produce(t0: int, t1: int, result: Any, _rm: Any, tp: Any, *_a: Any, **_k: Any) -> None:
    emit("P", _tp(tp), result.first_offset, result.last_offset, t0, t1)


def _on_append(t0: int, t1: int, out: Any, _rm: Any, tp: Any, *_a: Any, **_k: Any) -> None:
    result = out[1]
    emit("A", _tp(tp), result.first_offset, result.last_offset, t1)


def _on_serve_follower(
    t0: int, _t1: int, _res: Any, part: Any, follower: int, request: Any, *_a: Any
) -> None:
    emit("F", _tp(part.tp), follower, request.fetch_offset, t0)


def _on_hw(_t0: int, t1: int, moved: bool, part: Any) -> None:
    if moved:
        emit("H", _tp(part.tp), part.high_watermark, t1)


def _on_serve_fetches(
    _t0: int, t1: int, out: Any, _rm: Any, replica_id: int, *_a: Any, **_k: Any
) -> None:
    for p in out:
        span = data_span(p.data) if p.data else None
        if span is not None:
            emit("R", f"{p.topic}/{p.partition}", replica_id, span[0], span[1], t1)


def _on_apply(t0: int, t1: int, _n: Any, part: Any, data: bytes, *_a: Any, **_k: Any) -> None:
    span = data_span(data) if data else None
    if span is not None:
        emit("Y", _tp(part.tp), span[0], span[1], t0, t1)


def _on_consumer_fetch(_t0: int, t1: int, out: Any, *_a: Any, **_k: Any) -> None:
    for p in out:
        span = data_span(p.data) if p.data else None
        if span is not None:
            emit("C", f"{p.topic}/{p.partition}", span[0], span[1], t1)


def _on_fetch(_t0: int, t1: int, got: Any, _rm: Any, tp: Any, *_a: Any, **_k: Any) -> None:
    span = data_span(got.data) if got.data else None
    if span is not None:
        emit("C", _tp(tp), span[0], span[1], t1)


def _on_produce_raw(t0: int, t1: int, _resp: Any, _routes: Any, request: Any) -> None:
    info = request.match_info
    emit("Q", f"{info.get('topic', '?')}/{info.get('partition', '-1')}", t0, t1)


def _on_pipeline(t0: int, t1: int, _resp: Any, _pipeline: Any, request: Any, *_a: Any) -> None:
    info = request.match_info
    if request.method == "POST" and "partition" in info and request.path.endswith("/batches"):
        emit("S", f"{info.get('topic', '?')}/{info['partition']}", t0, t1)


def _on_produce_json(t0: int, t1: int, _resp: Any, _routes: Any, request: Any) -> None:
    emit("J", f"{request.match_info.get('topic', '?')}/-1", t0, t1)


def install() -> None:
    """Wrap the traced methods and start the writer (a no-op without the env name)."""
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    from lograft.api.request_pipeline import RequestPipeline
    from lograft.api.routes_data import DataRoutes
    from lograft.brokers.partition import Partition
    from lograft.brokers.replica_manager import ReplicaManager

    path = Path(out) / f"trace-{os.getpid()}.txt"
    _wrap_async(ReplicaManager, "produce", _on_produce)
    _wrap_async(DataRoutes, "produce_json", _on_produce_json)
    _wrap_async(DataRoutes, "produce_raw", _on_produce_raw)
    _wrap_async(RequestPipeline, "serve", _on_pipeline)
    _wrap_async(ReplicaManager, "_append_as_leader", _on_append)
    _wrap_async(ReplicaManager, "_serve_fetches", _on_serve_fetches)
    _wrap_async(ReplicaManager, "consumer_fetch", _on_consumer_fetch)
    _wrap_async(ReplicaManager, "fetch", _on_fetch)
    _wrap_sync(Partition, "serve_follower_fetch", _on_serve_follower)
    _wrap_sync(Partition, "maybe_advance_high_watermark", _on_hw)
    _wrap_sync(Partition, "apply_fetch_response", _on_apply)
    threading.Thread(target=_flusher, args=(path,), daemon=True, name="trace-flush").start()
    atexit.register(_flush, path)
