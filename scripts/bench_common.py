"""What the benchmark scripts share: logging to stderr, a JSON HTTP call, the machine line.

A sibling module of the scripts (run as `python scripts/bench_*.py`, which puts
scripts/ on sys.path), so the figures of every benchmark name the machine the
same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import urllib.request
from pathlib import Path
from typing import Any

# One admin or metadata call of a benchmark's setup, seconds.
HTTP_TIMEOUT_S = 30


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def http_json(method: str, url: str, body: Any = None) -> Any:
    """One JSON request; the decoded answer (None for an empty body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def proc_cpu_s(pids: list[int]) -> float:
    """utime + stime of the given processes from /proc, s (a process gone counts 0)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def machine() -> str:
    """OS, CPUs, Python and the load average now: the line above a benchmark's table."""
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPU ({cpu}), "
        f"Python {platform.python_version()}, load average {load}"
    )


def poll_count(consumer: Any, expected: int) -> int:
    """Poll a lograft `Consumer` until it has returned at least `expected` records;
    how many it returned (the raw-fetch reads of bench_client and bench_spark)."""
    count = 0
    while count < expected:
        for records in consumer.poll(timeout_ms=5000).values():
            count += len(records)
    return count
