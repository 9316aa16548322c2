"""Bounded resources: the FilePool keeps at most max_open_files descriptors
of sealed segments (LRU, never closing one in use), a log of 300 segments
read end to end never holds more, and a Log's Python memory does not grow
with the data it holds."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lograft
from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import FakeClock, batch_bases, no_fsync  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_fsync")


# -- the pool ----------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"%d" % i)
        paths.append(str(p))
    return paths


def _held_paths() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own, already closed
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
    return out


def test_pool_is_lru_and_bounded(files, tmp_path):
    pool = FilePool(max_open_files=3)
    for p in files[:3]:
        with pool.borrow(p) as fd:
            assert os.pread(fd, 1, 0) == p[-1].encode()
    assert pool.open_count == 3
    with pool.borrow(files[0]):  # touch f0: f1 is now the oldest
        pass
    with pool.borrow(files[3]):
        pass
    assert pool.open_count == 3
    assert _held_in(tmp_path) == 3
    held = _held_paths()
    assert [p in held for p in files[:4]] == [True, False, True, True]


def test_mappings_count_against_the_same_limit(files, tmp_path):
    pool = FilePool(max_open_files=2)
    for p in files[:4]:
        with pool.borrow_map(p) as mm:
            assert mm[:1] == p[-1].encode()
        with pool.borrow(p) as fd:
            assert os.pread(fd, 1, 0) == p[-1].encode()
        assert pool.open_count <= 2
        assert _held_in(tmp_path) <= 2
    pool.discard(files[3])
    assert pool.open_count == 0
    assert _held_in(tmp_path) == 0


def test_pool_never_closes_a_descriptor_in_use(files):
    pool = FilePool(max_open_files=2)
    with pool.borrow(files[0]) as fd0, pool.borrow(files[1]) as fd1:
        with pool.borrow(files[2]) as fd2:
            # Over the limit while all three are pinned; each still reads.
            for fd, p in ((fd0, files[0]), (fd1, files[1]), (fd2, files[2])):
                assert os.pread(fd, 1, 0) == p[-1].encode()
        pool.discard(files[0])  # doomed while pinned: closed on release
        assert os.pread(fd0, 1, 0) == b"0"
    with pool.borrow(files[3]):
        pass
    assert pool.open_count <= 2
    pool.close_all()
    assert pool.open_count == 0


def test_pool_refuses_a_zero_limit():
    with pytest.raises(ValueError):
        FilePool(max_open_files=0)


# -- a log of many segments -----------------------------------------------------------------


SEGMENTS = 300


@pytest.fixture(scope="module")
def many_segments(tmp_path_factory):
    """300 segments of one ~1 KiB batch each (the log is closed when done)."""
    directory = tmp_path_factory.mktemp("many") / "p"
    config = LogConfig(segment_bytes=1024, segment_index_bytes=4096)
    log = Log(directory, config, pool=FilePool(8), clock=FakeClock())
    for i in range(SEGMENTS):
        log.append(
            build_batch([RecordInput(b"x" * 900, timestamp=10 * i)], timestamp_ms=0),
            leader_epoch=0,
        )
    assert log.segment_count == SEGMENTS
    log.close()
    return directory, config


def _held_in(directory) -> int:
    """Descriptors this process holds on files of `directory` (mappings included:
    CPython's mmap holds a dup of its descriptor)."""
    prefix = f"{directory}/"
    return sum(p.startswith(prefix) for p in _held_paths())


class FdWatcher:
    """Wraps os.pread to sample, mid-read, the descriptors held on the log."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.real = os.pread
        self.most = 0

    def __call__(self, fd, n, pos):
        self.most = max(self.most, _held_in(self.directory))
        return self.real(fd, n, pos)


@pytest.mark.parametrize("clean", [True, False])
def test_reads_across_300_segments_hold_at_most_8_descriptors(many_segments, monkeypatch, clean):
    directory, config = many_segments
    if not clean:
        # A crash before any flush: every segment is re-validated.
        (directory / ".clean-shutdown").unlink(missing_ok=True)
        (directory / "recovery-point-checkpoint").unlink(missing_ok=True)
    assert _held_in(directory) == 0
    pool = FilePool(max_open_files=8)
    watcher = FdWatcher(directory)
    monkeypatch.setattr(os, "pread", watcher)
    log = Log(directory, config, pool=pool, clock=FakeClock())
    # Recovery (all 300 segments when unclean) borrows from the same pool.
    assert log.recovery.segments_recovered == (0 if clean else SEGMENTS)
    # Beyond the pool's 8, the log holds its active segment's three (the
    # .log and the two writable index mappings).
    allowed = 3 + 8
    assert pool.open_count <= 8
    # Recovery maps the two indexes of the one segment it is rebuilding.
    assert watcher.most <= allowed + (0 if clean else 2)
    watcher.most = 0
    for offset in range(SEGMENTS):
        assert batch_bases(log.read(offset, 1 << 20))[0][0] == offset
        assert pool.open_count <= 8
    assert log.offset_for_timestamp(10 * (SEGMENTS - 1)).offset == SEGMENTS - 1
    assert pool.open_count <= 8
    assert watcher.most <= allowed
    log.close()
    assert pool.open_count == 0
    assert _held_in(directory) == 0


# -- memory -----------------------------------------------------------------------------------

_PROBE = Path(__file__).with_name("memory_probe.py")


def _probe(scenario: str, directory: Path) -> dict[str, int]:
    """memory_probe.py's figures, measured in a fresh interpreter (see its
    docstring: in this process other tests' threads and leftovers land in
    tracemalloc's window) that imports the same lograft as this one."""
    root = str(Path(lograft.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(_PROBE), scenario, str(directory)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    figures: dict[str, int] = json.loads(out.stdout)
    return figures


def test_memory_does_not_grow_with_the_data(tmp_path):
    m = _probe("data", tmp_path / "p")
    grew = m["large"] - m["small"]
    assert grew < 16 * 1024, f"grew {grew} bytes for 1 MB more data"
    assert m["after_reads"] - m["large"] < 16 * 1024


def test_memory_per_segment_is_small_and_flat(tmp_path):
    m = _probe("segments", tmp_path / "p")
    assert m["segment_count"] == 140
    per_segment = (m["many"] - m["few"]) / m["added"]
    # A segment costs its Python objects (paths, two index mappings), not its data.
    assert per_segment < 4 * 1024, f"{per_segment:.0f} bytes per segment"
