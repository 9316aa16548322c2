#!/usr/bin/env python3
"""What a replica's blocking log work costs on the event loop, against a hop
to a worker thread: the figures behind lograft/brokers/log_work.py's choice
of what runs inline and what goes to a storage thread.

Measured, in a temporary directory (removed afterwards):

1. a thread hop: `run_in_executor` of a no-op and back, p50/p99, on an idle
   loop and on a loop busy with Python work (a task spinning 2 ms between
   yields, as a loaded broker's loop), microseconds;
2. `Log.append` of one batch of 100-byte records (records already checked:
   structure and CRC only, as the produce path appends), by batch size, with
   `flush_policy=none` and `every_batch` (an fsync per append), the best of
   three rounds, microseconds per append;
3. `Log.read(0, size)` from a log of 64 KiB batches, by size, best of three;
4. a segment roll (`Log.roll`), the mean over 50.

    .venv/bin/python scripts/bench_log_io.py [--dir DIR]

`--dir` puts the logs on that file system (default: the system's temporary
directory).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_common import machine

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.log import Log

KIB = 1024
SIZES_KIB = (1, 16, 64, 256, 1024, 4096)
READ_SIZES_KIB = (64, 256, 1024, 8192)


def per_call_us(fn: Callable[[], object], n: int, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def percentiles(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return values[len(values) // 2], values[int(len(values) * 0.99)]


async def hop_us(pool: ThreadPoolExecutor, busy: bool, n: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    spinning = True

    async def spin() -> None:
        while spinning:
            until = time.perf_counter() + 0.002
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0)  # yield, as a handler between requests

    task = asyncio.create_task(spin()) if busy else None
    took: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        await loop.run_in_executor(pool, lambda: None)
        took.append((time.perf_counter() - start) * 1e6)
    spinning = False
    if task is not None:
        await task
    return percentiles(took)


def batch_of(kib: int) -> bytes:
    count = max(1, kib * KIB // 110)
    return build_batch([RecordInput(None, b"x" * 100)] * count, timestamp_ms=int(time.time() * 1e3))


def append_us(directory: Path, config: LogConfig, kib: int) -> float:
    data = batch_of(kib)
    log = Log(directory, config)
    try:
        fsync = config.flush_policy is FlushPolicy.EVERY_BATCH
        n = 30 if fsync else max(20, 2000 // kib)
        return per_call_us(lambda: log.append(data, leader_epoch=0, validate_records=False), n)
    finally:
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, help="directory for the logs (default: temporary)")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    with ThreadPoolExecutor(4) as pool:
        for busy in (False, True):
            p50, p99 = asyncio.run(hop_us(pool, busy, 200 if busy else 2000))
            state = "busy" if busy else "idle"
            print(f"thread hop, {state} loop: p50 {p50:.0f} us, p99 {p99:.0f} us")
    root = Path(tempfile.mkdtemp(prefix="bench-log-io-", dir=args.dir))
    try:
        big = {"segment_bytes": 1 << 30, "max_message_bytes": 8 << 20}
        print(f"{'append':>14}{'none us':>10}{'every_batch us':>16}")
        for kib in SIZES_KIB:
            cells = [
                append_us(
                    root / f"append-{kib}-{policy}", LogConfig(flush_policy=policy, **big), kib
                )
                for policy in (FlushPolicy.NONE, FlushPolicy.EVERY_BATCH)
            ]
            print(f"{kib:>10} KiB{cells[0]:>10.0f}{cells[1]:>16.0f}")
        log = Log(root / "reads", LogConfig(**big))
        chunk = batch_of(64)
        for _ in range(16 * 16):
            log.append(chunk, leader_epoch=0, validate_records=False)
        for kib in READ_SIZES_KIB:
            us = per_call_us(lambda k=kib: log.read(0, k * KIB), 50)
            print(f"read {kib:>5} KiB: {us:.0f} us")
        log.close()
        log = Log(root / "roll", LogConfig())
        one = batch_of(1)
        start = time.perf_counter()
        for _ in range(50):
            log.append(one, leader_epoch=0)
            log.roll()
        print(f"segment roll: {(time.perf_counter() - start) / 50 * 1e6:.0f} us")
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
