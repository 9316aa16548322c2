#!/usr/bin/env python3
"""Benchmark the segment-log storage engine (lograft.storage.Log) on this machine.

Measures, each in a fresh temporary directory that is removed afterwards:

1. append throughput (records/s, MB/s) of 100-byte and 1 KiB records in
   batches of 1 and of 1,000, with validate_records=True (every record walked)
   and False (batch header and CRC only), flush_policy=none. Batches are built
   before the clock starts; building them (the producer's cost) is reported on
   its own. The append figure is the append loop alone; the close (which
   fsyncs) is timed separately.
2. sequential read throughput from the start of a 1 GiB log with Log.read and
   max_bytes = 1 MiB in a loop, once with the log's pages dropped from the
   page cache (posix_fadvise DONTNEED on its files, no system-wide cache drop)
   and once warm. Records are counted from the batch headers.
3. random-offset read latency (p50/p99, microseconds) of Log.read(offset,
   64 KiB) and of a one-batch read (max_bytes=1, min_one) in a 10 MiB log and
   in a "10 GiB-equivalent" log. A 10 GiB log with the default config has 10
   segments of 1 GiB and at most one index entry per 4 KiB, i.e. up to 262,144
   entries per segment. The equivalent log has those same counts (10 segments
   x 262,144 entries) but an index entry for every ~170-byte batch
   (index_interval_bytes=0) and segment_bytes sized to hold 262,144 batches,
   so it takes ~0.4 GiB of disk. A lookup is a bisect over the segments'
   base offsets plus a binary search of the segment's mmapped index, so its
   cost depends on those counts, not on the bytes behind them. The 10 MiB
   logs use the same batches, once with the equivalent log's config (dense
   index: only the counts differ) and once with the default config. Reads
   go round robin over the three logs so that all see the same background
   load; the first 1,000 rounds are a warm-up and are not counted.
4. the same batch bytes written by a bare `os.write` loop, one call per batch,
   into a plain file in the same kind of directory, and lograft's append MB/s
   as a ratio of it (issue 2's goal: >= 0.5 for batches of 1,000 records).

MB is 10^6 bytes; bytes are batch bytes as stored (headers included).
`--scale` multiplies every size (0.01 is a quick smoke run). Each append
case first runs `--warmup` untimed rounds (first touches of memory and page
cache are very slow on some VMs), then `--repeat` rounds of (validated,
header-only, bare write) in rotating order, and reports the medians.
`--profile` runs the append and read loops under cProfile and prints the top
entries to stderr (timings are then inflated by the profiler).

    .venv/bin/python scripts/bench_storage.py [--scale 1] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import io
import json
import os
import platform
import pstats
import random
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import GIB, KIB, MIB, FlushPolicy, LogConfig
from lograft.storage.log import Log

REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000

# Full sizes (scale 1).
APPEND_BATCHED_BYTES = 256 * MIB  # per case, batches of 1,000 records
APPEND_SINGLE_BATCHES = 100_000  # per case, batches of 1 record
RECORDS_PER_BATCH = (1, 1000)
RECORD_BYTES = (100, 1 * KIB)
READ_LOG_BYTES = 1 * GIB
READ_MAX_BYTES = 1 * MIB
READ_RECORD_BYTES = 100
SMALL_LOG_BYTES = 10 * MIB
EQUIV_REFERENCE_BYTES = 10 * GIB
DEFAULT_SEGMENT_BYTES = LogConfig().segment_bytes
DEFAULT_INDEX_INTERVAL = LogConfig().index_interval_bytes
EQUIV_SEGMENTS = EQUIV_REFERENCE_BYTES // DEFAULT_SEGMENT_BYTES  # 10
EQUIV_ENTRIES_PER_SEGMENT = DEFAULT_SEGMENT_BYTES // DEFAULT_INDEX_INTERVAL  # 262,144
LATENCY_RECORD_BYTES = 100
LATENCY_BUNDLE = 1024  # one-record batches per append call while building
RANDOM_READS = 20_000
RANDOM_WARMUP = 1_000
RANDOM_MAX_BYTES = 64 * KIB

# baseOffset, batchLength, lastOffsetDelta, recordsCount: all a consumer needs.
_OFF_BASE = 0
_OFF_LEN = 8
_OFF_LAST_DELTA = 23
_OFF_COUNT = 57
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

T = TypeVar("T")


# -- output helpers -----------------------------------------------------------


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Progress:
    """Prints `label: done/total` to stderr at most every `every_s` seconds."""

    def __init__(self, label: str, total: int, unit: str, every_s: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.every_s = every_s
        self.start = time.perf_counter()
        self.last = self.start

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every_s:
            self.last = now
            pct = 100.0 * done / self.total if self.total else 100.0
            say(
                f"  {self.label}: {done:,}/{self.total:,} {self.unit} ({pct:.0f}%), "
                f"{now - self.start:.1f} s"
            )


class Profiler:
    """Optional cProfile around the timed loops; prints top entries per phase."""

    def __init__(self, enabled: bool, top: int) -> None:
        self.enabled = enabled
        self.top = top
        self.reports: dict[str, str] = {}

    def call(self, name: str, fn: Callable[[], T]) -> T:
        if not self.enabled:
            return fn()
        prof = cProfile.Profile()
        result = prof.runcall(fn)
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(self.top)
        text = out.getvalue()
        self.reports[name] = text
        print(f"\n===== profile: {name} (sorted by tottime) =====", file=sys.stderr)
        print(text, file=sys.stderr, flush=True)
        return result


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100.0 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def human(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(padded).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


# -- machine description ------------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ram_bytes() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def filesystem_of(path: Path) -> dict[str, Any]:
    """Mount point, type and device of the filesystem holding `path`."""
    real = os.path.realpath(path)
    best: dict[str, Any] = {"mount_point": "?", "type": "unknown", "device": "?"}
    best_len = -1
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        rfields = right.split()
        if len(fields) < 5 or len(rfields) < 2:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > best_len:
            best_len = len(mount_point)
            best = {"mount_point": mount_point, "type": rfields[0], "device": rfields[1]}
    dev = os.path.basename(str(best["device"]))
    rotational = _read(f"/sys/block/{dev}/queue/rotational").strip()
    if rotational:
        best["rotational"] = rotational == "1"
    st = os.statvfs(real)
    best["free_bytes"] = st.f_bavail * st.f_frsize
    return best


def record_scanner() -> str:
    """Which per-record validator Log.append(validate_records=True) runs."""
    try:
        from lograft.protocol import record_scan
    except ImportError:
        return "not available (lograft.protocol.record_scan does not exist)"
    impl = getattr(record_scan, "IMPLEMENTATION", None)
    from lograft.protocol import batch

    used = hasattr(batch, "scan_records")
    where = "used by batch.check_records" if used else "NOT used by batch.check_records"
    if impl is None:
        return f"record_scan present, no IMPLEMENTATION flag ({where})"
    return f"{impl} (record_scan.IMPLEMENTATION={impl!r}; {where})"


def git_state() -> dict[str, Any]:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(
                ["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = run("status", "--porcelain", "--", "lograft/storage").splitlines()
    return {"commit": run("rev-parse", "--short", "HEAD"), "storage_uncommitted": dirty}


def machine_info(data_dir: Path) -> dict[str, Any]:
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": ram_bytes(),
        "kernel": platform.release(),
        "data_dir": str(data_dir),
        "filesystem": filesystem_of(data_dir),
        "record_scanner": record_scanner(),
        "git": git_state(),
    }


# -- temp dirs ------------------------------------------------------------------


class Dirs:
    """Fresh directories under one root; everything removed at the end."""

    def __init__(self, parent: Path) -> None:
        self._made_parent = not parent.exists()
        parent.mkdir(parents=True, exist_ok=True)
        self.parent = parent
        self.root = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=parent))
        self._n = 0

    @contextlib.contextmanager
    def fresh(self, name: str) -> Iterator[Path]:
        self._n += 1
        path = self.root / f"{self._n:03d}-{name}"
        path.mkdir()
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self._made_parent:
            with contextlib.suppress(OSError):
                self.parent.rmdir()  # only if empty


def drop_file_cache(directory: Path) -> None:
    """Evict this directory's files from the page cache (they must be clean)."""
    for p in directory.iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# -- building batches (the producer's cost) --------------------------------------


def value_pool(record_bytes: int, count: int = 256, seed: int = 7) -> list[bytes]:
    raw = random.Random(seed).randbytes(record_bytes + count * 13)
    return [raw[i * 13 : i * 13 + record_bytes] for i in range(count)]


@dataclass
class Built:
    batches: list[bytes]
    records: int
    bytes: int
    seconds: float

    def row(self) -> dict[str, Any]:
        return {
            "batches": len(self.batches),
            "records": self.records,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "us_per_batch": 1e6 * self.seconds / max(len(self.batches), 1),
            "records_per_s": self.records / self.seconds,
            "mb_per_s": self.bytes / MB / self.seconds,
        }


def build(record_bytes: int, per_batch: int, batch_count: int, label: str) -> Built:
    values = value_pool(record_bytes)
    nvals = len(values)
    ts = time.time_ns() // 1_000_000
    out: list[bytes] = []
    prog = Progress(f"build {label}", batch_count, "batches")
    total = 0
    t0 = time.perf_counter()
    for i in range(batch_count):
        base = i * per_batch
        recs = [RecordInput(value=values[(base + j) % nvals]) for j in range(per_batch)]
        b = build_batch(recs, timestamp_ms=ts)
        out.append(b)
        total += len(b)
        if i & 255 == 255:
            prog.update(i + 1)
    seconds = time.perf_counter() - t0
    return Built(out, batch_count * per_batch, total, seconds)


def single_batch_size(record_bytes: int) -> int:
    return len(build_batch([RecordInput(value=b"x" * record_bytes)], timestamp_ms=0))


# -- 1 and 4: append vs bare write --------------------------------------------------


def run_loop(batches: list[bytes], step: Callable[[bytes], object], label: str) -> float:
    """Seconds to pass every batch to `step`, progress every few seconds."""
    n = len(batches)
    chunk = 1024
    prog = Progress(label, n, "batches")
    t0 = time.perf_counter()
    for start in range(0, n, chunk):
        for b in batches[start : start + chunk]:
            step(b)
        prog.update(min(start + chunk, n))
    return time.perf_counter() - t0


def append_once(
    dirs: Dirs, built: Built, validate: bool, label: str, prof: Profiler
) -> dict[str, float]:
    with dirs.fresh("append") as d:
        log = Log(d, LogConfig(flush_policy=FlushPolicy.NONE))

        def step(b: bytes) -> object:
            return log.append(b, leader_epoch=0, validate_records=validate)

        gc.collect()
        seconds = prof.call(
            f"append {label} validate_records={validate}",
            lambda: run_loop(built.batches, step, f"append {label} validate={validate}"),
        )
        assert log.log_end_offset == built.records, "every record must have been appended"
        t0 = time.perf_counter()
        log.close()
        close_s = time.perf_counter() - t0
    return {"seconds": seconds, "close_fsync_seconds": close_s}


def bare_write_once(dirs: Dirs, built: Built, label: str) -> dict[str, float]:
    with dirs.fresh("bare") as d:
        fd = os.open(d / "plain.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        write = os.write

        def step(b: bytes) -> None:
            view = memoryview(b)
            while view:
                view = view[write(fd, view) :]

        try:
            gc.collect()
            seconds = run_loop(built.batches, step, f"bare write {label}")
            t0 = time.perf_counter()
            os.fsync(fd)
            fsync_s = time.perf_counter() - t0
        finally:
            os.close(fd)
    return {"seconds": seconds, "close_fsync_seconds": fsync_s}


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def append_case(
    dirs: Dirs,
    record_bytes: int,
    per_batch: int,
    count: int,
    repeat: int,
    warmup: int,
    prof: Profiler,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Build one case's batches, then warm up and time lograft and the bare loop."""
    label = f"{record_bytes}B x{per_batch}"
    say(f"building {count:,} batches of {per_batch} x {record_bytes}-byte records")
    built = build(record_bytes, per_batch, count, label)
    build_row = {"record_bytes": record_bytes, "records_per_batch": per_batch, **built.row()}
    off = Profiler(False, 0)
    kinds: list[tuple[str, Callable[[Profiler], dict[str, float]]]] = [
        ("validated", lambda p: append_once(dirs, built, True, label, p)),
        ("header_only", lambda p: append_once(dirs, built, False, label, p)),
        ("bare", lambda _p: bare_write_once(dirs, built, label)),
    ]
    for w in range(warmup):
        # Untimed: first writes into fresh memory and page cache are much
        # slower on this kind of VM than the steady state.
        say(f"append {label}: warm-up {w + 1}/{warmup} (not counted)")
        for _name, fn in kinds:
            fn(off)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _fn in kinds}
    for r in range(repeat):
        order = kinds[r % 3 :] + kinds[: r % 3]  # rotate: no fixed position bias
        say(f"append {label}: run {r + 1}/{repeat} ({', '.join(n for n, _ in order)})")
        for name, fn in order:
            runs[name].append(fn(prof if r == 0 else off))
    bare = median_run(runs["bare"])
    bare_mb_s = built.bytes / MB / bare["seconds"]
    cases = []
    for mode in ("validated", "header_only"):
        med = median_run(runs[mode])
        mb_s = built.bytes / MB / med["seconds"]
        cases.append(
            {
                "record_bytes": record_bytes,
                "records_per_batch": per_batch,
                "validate_records": mode == "validated",
                "batches": len(built.batches),
                "records": built.records,
                "bytes": built.bytes,
                "seconds": med["seconds"],
                "records_per_s": built.records / med["seconds"],
                "mb_per_s": mb_s,
                "us_per_append": 1e6 * med["seconds"] / len(built.batches),
                "close_fsync_seconds": med["close_fsync_seconds"],
                "bare_write_mb_per_s": bare_mb_s,
                "bare_fsync_seconds": bare["close_fsync_seconds"],
                "ratio_to_bare": mb_s / bare_mb_s,
                "runs_seconds": [x["seconds"] for x in runs[mode]],
                "bare_runs_seconds": [x["seconds"] for x in runs["bare"]],
            }
        )
    return build_row, cases


def bench_append(
    dirs: Dirs, scale: float, repeat: int, warmup: int, prof: Profiler
) -> dict[str, Any]:
    build_rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for record_bytes in RECORD_BYTES:
        for per_batch in RECORDS_PER_BATCH:
            if per_batch == 1:
                count = max(100, round(APPEND_SINGLE_BATCHES * scale))
            else:
                per_record = single_batch_size(record_bytes) - 61 + 1  # roughly
                count = max(2, round(APPEND_BATCHED_BYTES * scale / (per_record * per_batch)))
            row, got = append_case(dirs, record_bytes, per_batch, count, repeat, warmup, prof)
            build_rows.append(row)
            cases += got
    return {"build": build_rows, "cases": cases}


# -- 2: sequential read --------------------------------------------------------------


def consume(log: Log, max_bytes: int) -> tuple[int, int, int, int]:
    """Read the whole log from its start: (bytes, records, batches, read calls)."""
    offset = log.log_start_offset
    leo = log.log_end_offset
    total = records = batches = calls = 0
    prog = Progress("sequential read", leo - offset, "offsets")
    read = log.read
    i64 = _I64.unpack_from
    i32 = _I32.unpack_from
    while offset < leo:
        data = read(offset, max_bytes)
        calls += 1
        n = len(data)
        if not n:
            raise AssertionError(f"read at {offset} below the LEO {leo} returned nothing")
        pos = 0
        base = last_delta = 0
        while pos < n:
            base = i64(data, pos + _OFF_BASE)[0]
            last_delta = i32(data, pos + _OFF_LAST_DELTA)[0]
            records += i32(data, pos + _OFF_COUNT)[0]
            batches += 1
            pos += i32(data, pos + _OFF_LEN)[0] + 12
        total += n
        offset = base + last_delta + 1
        if calls & 63 == 0:
            prog.update(offset)
    return total, records, batches, calls


def bench_read(dirs: Dirs, scale: float, prof: Profiler) -> dict[str, Any]:
    # 256 distinct batches (~28 MB), appended in turn until the log is full.
    source = build(READ_RECORD_BYTES, 1000, 256, "read-log source")
    target = max(source.bytes // len(source.batches), round(READ_LOG_BYTES * scale))
    sizes = [len(b) for b in source.batches]
    with dirs.fresh("seqread") as d:
        log = Log(d, LogConfig(flush_policy=FlushPolicy.NONE))
        written = 0
        i = 0
        say(f"writing a {target / GIB:.2f} GiB log of {READ_RECORD_BYTES}-byte records")
        prog = Progress("write read-log", target, "bytes")
        while written + sizes[i % len(sizes)] <= target:
            b = source.batches[i % len(sizes)]
            log.append(b, leader_epoch=0, validate_records=False)
            written += len(b)
            i += 1
            if i & 255 == 0:
                prog.update(written)
        segments = log.segment_count
        log.close()  # fsyncs, so the pages are clean and can be dropped
        log = Log(d, LogConfig(flush_policy=FlushPolicy.NONE))
        results: dict[str, Any] = {
            "log_bytes": written,
            "segments": segments,
            "max_bytes": READ_MAX_BYTES,
            "record_bytes": READ_RECORD_BYTES,
            "records_per_batch": 1000,
        }
        for mode in ("cold", "warm"):
            if mode == "cold":
                drop_file_cache(d)
            say(f"sequential read ({mode} page cache)")
            gc.collect()
            t0 = time.perf_counter()
            total, records, batches, calls = prof.call(
                f"sequential read ({mode})", lambda: consume(log, READ_MAX_BYTES)
            )
            seconds = time.perf_counter() - t0
            assert total == written, f"read {total} bytes of {written}"
            results[mode] = {
                "seconds": seconds,
                "mb_per_s": total / MB / seconds,
                "records_per_s": records / seconds,
                "records": records,
                "batches": batches,
                "read_calls": calls,
                "us_per_read": 1e6 * seconds / calls,
            }
        log.close()
    return results


# -- 3: random-offset read latency --------------------------------------------------


@dataclass
class LatencyLog:
    name: str
    description: str
    config: LogConfig
    batches: int
    info: dict[str, Any] = field(default_factory=dict)


def one_record_bundle() -> bytes:
    values = value_pool(LATENCY_RECORD_BYTES, LATENCY_BUNDLE)
    ts = time.time_ns() // 1_000_000
    return b"".join(build_batch([RecordInput(value=v)], timestamp_ms=ts) for v in values)


def fill(log: Log, bundle: bytes, batches: int, label: str) -> None:
    calls = -(-batches // LATENCY_BUNDLE)
    prog = Progress(f"write {label}", calls * LATENCY_BUNDLE, "batches")
    for c in range(calls):
        log.append(bundle, leader_epoch=0, validate_records=False)
        if c & 15 == 15:
            prog.update((c + 1) * LATENCY_BUNDLE)


def bench_latency(dirs: Dirs, scale: float, prof: Profiler) -> dict[str, Any]:
    bundle = one_record_bundle()
    batch_size = len(bundle) // LATENCY_BUNDLE
    per_segment = max(LATENCY_BUNDLE, round(EQUIV_ENTRIES_PER_SEGMENT * scale))
    per_segment = -(-per_segment // LATENCY_BUNDLE) * LATENCY_BUNDLE
    small_batches = max(LATENCY_BUNDLE, round(SMALL_LOG_BYTES * scale / batch_size))
    small_batches = -(-small_batches // LATENCY_BUNDLE) * LATENCY_BUNDLE
    dense = LogConfig(flush_policy=FlushPolicy.NONE, index_interval_bytes=0)
    logs = [
        LatencyLog(
            "small-default",
            f"{human(small_batches * batch_size)}, default config",
            LogConfig(flush_policy=FlushPolicy.NONE),
            small_batches,
        ),
        LatencyLog(
            "small-dense",
            f"{human(small_batches * batch_size)}, dense index",
            dense,
            small_batches,
        ),
        LatencyLog(
            "10gib-equivalent",
            f"{EQUIV_REFERENCE_BYTES * scale / GIB:g} GiB-equivalent",
            LogConfig(
                flush_policy=FlushPolicy.NONE,
                index_interval_bytes=0,
                segment_bytes=per_segment * batch_size,
            ),
            EQUIV_SEGMENTS * per_segment,
        ),
    ]
    reads = max(1000, round(RANDOM_READS * scale))
    out: dict[str, Any] = {
        "batch_bytes": batch_size,
        "record_bytes": LATENCY_RECORD_BYTES,
        "reads": reads,
        "max_bytes": RANDOM_MAX_BYTES,
        "reference_log_bytes": round(EQUIV_REFERENCE_BYTES * scale),
        "reference_segments": EQUIV_SEGMENTS,
        "reference_index_entries_per_segment": per_segment,
        "logs": [],
    }
    with contextlib.ExitStack() as stack:
        opened: list[tuple[Log, dict[str, Any], list[int]]] = []
        rng = random.Random(42)
        for spec in logs:
            d = stack.enter_context(dirs.fresh(spec.name))
            say(f"latency: writing the {spec.description} log ({spec.batches:,} batches)")
            log = Log(d, spec.config)
            fill(log, bundle, spec.batches, spec.name)
            log.close()
            log = Log(d, spec.config)  # reopened: sealed segments mapped read-only
            stack.callback(log.close)
            segs = log.segments()
            entries = [s.index.entries for s in segs]
            leo = log.log_end_offset
            row: dict[str, Any] = {
                "name": spec.name,
                "description": spec.description,
                "log_bytes": log.size_bytes,
                "segments": len(segs),
                "index_entries_total": sum(entries),
                "index_entries_max_per_segment": max(entries),
                "index_interval_bytes": spec.config.index_interval_bytes,
                "segment_bytes": spec.config.segment_bytes,
            }
            opened.append((log, row, [rng.randrange(leo) for _ in range(RANDOM_WARMUP + reads)]))
            out["logs"].append(row)
        for label, max_bytes in (("64KiB", RANDOM_MAX_BYTES), ("one_batch", 1)):
            say(f"latency: {reads:,} random reads of {label} per log, the logs interleaved")
            lat = prof.call(
                f"random read {label} (all logs interleaved)",
                functools.partial(time_reads_interleaved, opened, max_bytes, label),
            )
            for (_log, row, _offsets), values in zip(opened, lat, strict=True):
                values.sort()
                row[label] = {
                    "p50_us": percentile(values, 50),
                    "p99_us": percentile(values, 99),
                    "mean_us": statistics.fmean(values),
                    "max_us": values[-1],
                }
    return out


def time_reads_interleaved(
    opened: Sequence[tuple[Log, dict[str, Any], list[int]]], max_bytes: int, label: str
) -> list[list[float]]:
    """Microseconds per Log.read, round robin over the logs so that all of them
    see the same background load; the first RANDOM_WARMUP rounds are dropped."""
    clock = time.perf_counter_ns
    reads = [log.read for log, _row, _offsets in opened]
    offsets = [o for _log, _row, o in opened]
    out: list[list[float]] = [[] for _ in opened]
    rounds = len(offsets[0])
    prog = Progress(f"random reads {label}", rounds, "rounds")
    gc.collect()
    for i in range(rounds):
        for k, read in enumerate(reads):
            t0 = clock()
            read(offsets[k][i], max_bytes)
            dt = clock() - t0
            if i >= RANDOM_WARMUP:
                out[k].append(dt / 1000.0)
        if i & 255 == 255:
            prog.update(i + 1)
    return out


# -- report --------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    fs = m["filesystem"]
    parts = [
        f"lograft storage benchmark  (scale {result['params']['scale']:g}, "
        f"median of {result['params']['repeat']} runs; MB = 10^6 bytes)",
        f"command: {result['command']}",
        f"machine: {m['cpu_model']}, {m['cores']} cores, RAM {m['ram_bytes'] / GIB:.1f} GiB, "
        f"{m['python']}, kernel {m['kernel']}",
        f"data dir: {m['data_dir']} on {fs['type']} ({fs['device']}, mounted at "
        f"{fs['mount_point']}, rotational={fs.get('rotational', '?')})",
        f"record scanner: {m['record_scanner']}",
        f"git: {m['git']['commit']}"
        + (
            f", uncommitted in lograft/storage: {'; '.join(m['git']['storage_uncommitted'])}"
            if m["git"]["storage_uncommitted"]
            else ""
        ),
        f"load average (1/5/15 min): start {result['load_start']}, end {result['load_end']}",
        f"wall time: {result['wall_seconds']:.0f} s",
    ]
    if result["params"]["profile"]:
        parts.append("PROFILED RUN: figures are inflated by cProfile")
    if "append" in result:
        parts += _render_append(result["append"])
    if "read" in result:
        parts += _render_read(result["read"])
    if "latency" in result:
        parts += _render_latency(result["latency"])
    return "\n".join(parts)


def _render_append(a: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    parts.append(
        "\n1. Append, flush_policy=none (append loop only; close+fsync timed apart). "
        "'validated' = validate_records=True (every record walked), "
        "'header-only' = validate_records=False (header + CRC)."
    )
    parts.append(
        table(
            [
                "record",
                "batch",
                "validation",
                "records/s",
                "MB/s",
                "us/append",
                "close+fsync s",
                "bare write MB/s",
                "ratio",
            ],
            [
                [
                    f"{c['record_bytes']} B",
                    c["records_per_batch"],
                    "validated" if c["validate_records"] else "header-only",
                    c["records_per_s"],
                    c["mb_per_s"],
                    c["us_per_append"],
                    c["close_fsync_seconds"],
                    c["bare_write_mb_per_s"],
                    c["ratio_to_bare"],
                ]
                for c in a["cases"]
            ],
        )
    )
    parts.append("\n   Building the batches (producer side, not in the figures above):")
    parts.append(
        table(
            ["record", "batch", "batches", "MB", "us/batch", "records/s", "MB/s"],
            [
                [
                    f"{b['record_bytes']} B",
                    b["records_per_batch"],
                    b["batches"],
                    b["bytes"] / MB,
                    b["us_per_batch"],
                    b["records_per_s"],
                    b["mb_per_s"],
                ]
                for b in a["build"]
            ],
        )
    )
    parts.append(
        "\n4. 'bare write MB/s' above: the same batch bytes written by an os.write loop, one "
        "call per batch, into a plain file (fsync after, not timed); 'ratio' = lograft "
        "append MB/s / bare write MB/s (issue 2's goal: >= 0.5 for batches of 1,000)."
    )
    return parts


def _render_read(r: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    parts.append(
        f"\n2. Sequential read from the start of a {r['log_bytes'] / GIB:.2f} GiB log "
        f"({r['record_bytes']}-byte records, batches of {r['records_per_batch']}), "
        f"Log.read(max_bytes={r['max_bytes'] // KIB} KiB) in a loop:"
    )
    parts.append(
        table(
            ["page cache", "MB/s", "records/s", "us/read", "reads"],
            [
                [
                    mode,
                    r[mode]["mb_per_s"],
                    r[mode]["records_per_s"],
                    r[mode]["us_per_read"],
                    r[mode]["read_calls"],
                ]
                for mode in ("cold", "warm")
            ],
        )
    )
    return parts


def _render_latency(lat: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    parts.append(
        f"\n3. Random-offset read latency, {lat['reads']:,} reads each, one-record "
        f"{lat['record_bytes']}-byte batches of {lat['batch_bytes']} bytes, page cache warm. "
        f"The {lat['reference_log_bytes'] / GIB:g} GiB-equivalent log has the segment and "
        f"index-entry counts of a {lat['reference_log_bytes'] / GIB:g} GiB log with the "
        f"default config ({lat['reference_segments']} segments x "
        f"{lat['reference_index_entries_per_segment']:,} entries, one per 4 KiB) with an entry "
        "per batch (index_interval_bytes=0) instead of per 4 KiB, so it needs far fewer bytes."
    )
    parts.append(
        table(
            [
                "log",
                "on disk MiB",
                "segments",
                "index entries",
                "64KiB p50 us",
                "64KiB p99 us",
                "1-batch p50 us",
                "1-batch p99 us",
            ],
            [
                [
                    x["description"],
                    x["log_bytes"] / MIB,
                    x["segments"],
                    x["index_entries_total"],
                    x["64KiB"]["p50_us"],
                    x["64KiB"]["p99_us"],
                    x["one_batch"]["p50_us"],
                    x["one_batch"]["p99_us"],
                ]
                for x in lat["logs"]
            ],
        )
    )
    return parts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Benchmark lograft's storage engine (append, sequential read, "
        "random-read latency, bare write loop). Progress goes to stderr.",
    )
    ap.add_argument(
        "--dir",
        type=Path,
        default=REPO / "bench-out",
        help="parent for the temporary data dirs (default: bench-out/ in the repo, "
        "i.e. the repo's filesystem); everything created is removed at the end",
    )
    ap.add_argument(
        "--scale", type=float, default=1.0, help="multiply every size (0.01 = quick run)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per append case (median)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per append case first")
    ap.add_argument("--json", action="store_true", help="print one JSON object, no table")
    ap.add_argument("--save-json", type=Path, help="also write the JSON object to this file")
    ap.add_argument(
        "--only",
        choices=["append", "read", "latency"],
        action="append",
        help="run only these measurements (repeatable; default all)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile the loops (to stderr)")
    ap.add_argument("--profile-top", type=int, default=15, help="entries per profile")
    args = ap.parse_args(argv)
    if args.scale <= 0 or args.repeat < 1:
        ap.error("--scale must be > 0 and --repeat >= 1")
    only = set(args.only or ["append", "read", "latency"])

    dirs = Dirs(args.dir)
    command = shlex.join(
        [os.path.relpath(sys.executable), os.path.relpath(sys.argv[0]), *sys.argv[1:]]
        if argv is None
        else ["bench_storage.py", *argv]
    )
    prof = Profiler(args.profile, args.profile_top)
    result: dict[str, Any] = {
        "command": command,
        "params": {
            "scale": args.scale,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "profile": args.profile,
        },
        "machine": machine_info(dirs.root),
        "load_start": "/".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    t0 = time.perf_counter()
    try:
        if "append" in only:
            result["append"] = bench_append(dirs, args.scale, args.repeat, args.warmup, prof)
        if "read" in only:
            result["read"] = bench_read(dirs, args.scale, prof)
        if "latency" in only:
            result["latency"] = bench_latency(dirs, args.scale, prof)
    finally:
        dirs.cleanup()
    result["wall_seconds"] = time.perf_counter() - t0
    result["load_end"] = "/".join(f"{x:.2f}" for x in os.getloadavg())
    if args.profile:
        result["profiles"] = prof.reports
    if args.save_json:
        args.save_json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result) if args.json else render(result))
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
