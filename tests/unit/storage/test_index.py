"""Sparse offset and time indexes: lookups agree with a linear scan of the
same entries, before and after trimming, reopening and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.storage.index import IndexFullError, OffsetIndex, TimeIndex

from .storage_support import example_dir

BASE = 1_000


def _linear_offset_lookup(entries, base, target):
    found = (base, 0)
    for offset, pos in entries:
        if offset <= target:
            found = (offset, pos)
    return found


def _linear_time_lookup(entries, base, target):
    found = base
    for ts, offset in entries:
        if ts <= target:
            found = offset
    return found


offset_steps = st.lists(
    st.tuples(st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=5000)),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(steps=offset_steps, probes=st.lists(st.integers(min_value=-10, max_value=4000), max_size=30))
def test_offset_index_lookup_matches_linear_scan(tmp_path_factory, steps, probes):
    entries, offset, pos = [], BASE - 1, -1
    for d_off, d_pos in steps:
        offset += d_off
        pos += d_pos
        entries.append((offset, pos))
    targets = sorted(set(probes) | {o for o, _ in entries} | {o - 1 for o, _ in entries})
    with example_dir(tmp_path_factory) as tmp:
        path = Path(tmp) / "x.index"
        index = OffsetIndex(path, BASE, 4096, writable=True)
        for o, p in entries:
            index.append(o, p)
        assert index.entry_list() == entries
        for t in targets:
            assert index.lookup(t) == _linear_offset_lookup(entries, BASE, t)
        # Trimmed and reopened read-only: the same answers, from the file.
        index.close_and_trim()
        assert path.stat().st_size == 8 * len(entries)
        reopened = OffsetIndex(path, BASE, 4096, writable=False)
        assert reopened.entry_list() == entries
        for t in targets:
            assert reopened.lookup(t) == _linear_offset_lookup(entries, BASE, t)
        assert reopened.last_entry() == (entries[-1] if entries else (BASE, 0))
        assert reopened.is_sane(pos + 1)
        reopened.close()


@settings(max_examples=40, deadline=None)
@given(steps=offset_steps, cut=st.integers(min_value=0, max_value=3000))
def test_offset_index_truncate_to_offset(tmp_path_factory, steps, cut):
    entries, offset, pos = [], BASE - 1, -1
    for d_off, d_pos in steps:
        offset += d_off
        pos += d_pos
        entries.append((offset, pos))
    with example_dir(tmp_path_factory) as tmp:
        index = OffsetIndex(Path(tmp) / "x.index", BASE, 4096, writable=True)
        for o, p in entries:
            index.append(o, p)
        index.truncate_to_offset(BASE + cut)
        kept = [(o, p) for o, p in entries if o < BASE + cut]
        assert index.entry_list() == kept
        # Appending continues after the kept entries.
        nxt = (kept[-1][0] + 1, kept[-1][1] + 1) if kept else (BASE, 0)
        index.append(*nxt)
        assert index.entry_list() == [*kept, nxt]
        index.close()


time_steps = st.lists(
    st.tuples(st.integers(min_value=-20, max_value=40), st.integers(min_value=0, max_value=30)),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(steps=time_steps, probes=st.lists(st.integers(min_value=-50, max_value=1500), max_size=30))
def test_time_index_lookup_matches_linear_scan(tmp_path_factory, steps, probes):
    with example_dir(tmp_path_factory) as tmp:
        path = Path(tmp) / "x.timeindex"
        index = TimeIndex(path, BASE, 4096, writable=True)
        ts, offset, kept = 0, BASE, []
        for d_ts, d_off in steps:
            ts += d_ts
            offset += d_off
            index.maybe_append(ts, offset)
            # Only a strictly newer timestamp makes an entry.
            if not kept or ts > kept[-1][0]:
                kept.append((ts, offset))
        assert index.entry_list() == kept
        assert index.is_sane()
        targets = set(probes) | {t for t, _ in kept} | {t - 1 for t, _ in kept}
        for t in sorted(targets):
            assert index.lookup(t) == _linear_time_lookup(kept, BASE, t)
        assert index.last_entry() == (kept[-1] if kept else None)
        index.close_and_trim()
        reopened = TimeIndex(path, BASE, 4096, writable=False)
        assert reopened.entry_list() == kept
        for t in sorted(targets):
            assert reopened.lookup(t) == _linear_time_lookup(kept, BASE, t)
        reopened.close()


@settings(max_examples=40, deadline=None)
@given(steps=time_steps, cut=st.integers(min_value=0, max_value=1000))
def test_time_index_truncate_to_offset(tmp_path_factory, steps, cut):
    with example_dir(tmp_path_factory) as tmp:
        index = TimeIndex(Path(tmp) / "x.timeindex", BASE, 4096, writable=True)
        ts, offset = 0, BASE
        for d_ts, d_off in steps:
            ts += d_ts
            offset += d_off
            index.maybe_append(ts, offset)
        before = index.entry_list()
        index.truncate_to_offset(BASE + cut)
        assert index.entry_list() == [(t, o) for t, o in before if o < BASE + cut]
        index.close()


def test_offset_index_refuses_entries_that_do_not_increase(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=True)
    index.append(5, 100)
    for offset, pos in [(5, 200), (4, 200), (6, 100), (6, 50)]:
        with pytest.raises(AssertionError):
            index.append(offset, pos)
    assert index.entry_list() == [(5, 100)]


def test_time_index_refuses_offsets_that_go_backwards(tmp_path):
    index = TimeIndex(tmp_path / "x.timeindex", 10, 4096, writable=True)
    index.maybe_append(100, 20)
    with pytest.raises(AssertionError):
        index.maybe_append(200, 19)


def test_full_index_refuses_one_more_entry(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=True)
    for i in range(512):
        assert not index.is_full
        index.append(i, i)
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.append(600, 600)
    assert index.entries == 512


def test_preallocated_file_left_by_a_crash_is_not_sane(tmp_path):
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0, 4096, writable=True)
    index.append(3, 0)
    index.append(7, 500)
    index.close()  # no trim: what a crash leaves
    assert path.stat().st_size == 4096
    reopened = OffsetIndex(path, 0, 4096, writable=False)
    assert reopened.entries == 512
    assert not reopened.tail_is_sane(1000)
    assert not reopened.is_sane(1000)
    reopened.close()


def test_index_past_the_end_of_its_log_is_not_sane(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=True)
    index.append(3, 0)
    index.append(7, 500)
    assert index.tail_is_sane(501)
    assert not index.tail_is_sane(500)
    index.close()


def test_missing_read_only_index_is_empty(tmp_path):
    index = OffsetIndex(tmp_path / "gone.index", 50, 4096, writable=False)
    assert index.entries == 0
    assert index.lookup(70) == (50, 0)
    assert TimeIndex(tmp_path / "gone.timeindex", 50, 4096, writable=False).lookup(9) == 50


def test_reset_zeroes_entries_so_a_crash_cannot_resurrect_them(tmp_path):
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0, 4096, writable=True)
    for i in range(10):
        index.append(i, i * 10)
    index.truncate_entries(4)
    index.close()
    raw = path.read_bytes()
    assert raw[4 * 8 : 10 * 8] == bytes(6 * 8)


def test_dropping_many_entries_zeroes_them_without_writing_the_pages(tmp_path):
    """What recovery does to an index a crash left preallocated: every slot
    counts as an entry and all are dropped. Every dropped byte reads zero,
    the kept ones are intact (the partial pages at both ends too), and the
    whole pages in between are punched out, not written: the file holds no
    disk blocks (nor dirty page cache) for them."""
    path = tmp_path / "x.index"
    size = 64 * 4096
    index = OffsetIndex(path, 0, size, writable=True)
    for i in range(size // 8):
        index.append(i, i * 10)
    index.close()  # no trim: what a crash leaves, here with every page written
    reopened = OffsetIndex(path, 0, size, writable=True)
    assert reopened.entries == size // 8
    reopened.truncate_entries(3)  # a partial first page stays
    reopened.close()
    raw = path.read_bytes()
    assert raw[: 3 * 8] == b"".join(
        i.to_bytes(4, "big") + (i * 10).to_bytes(4, "big") for i in range(3)
    )
    assert raw[3 * 8 :] == bytes(size - 3 * 8)
    probe = tmp_path / "probe"
    if _can_punch(probe):
        assert path.stat().st_blocks * 512 <= 2 * 4096


def _can_punch(path: Path) -> bool:
    """Whether this filesystem frees a page punched out of a file mapping."""
    import mmap

    path.write_bytes(b"x" * 8192)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 8192) as mm:
        try:
            mm.madvise(mmap.MADV_REMOVE, 0, 8192)
        except (AttributeError, OSError):
            return False
    return path.stat().st_blocks == 0


def test_appends_compare_against_the_newest_entry_after_truncation_and_reopen(tmp_path):
    """An append checks its entry against the newest one, which a writable
    index keeps in memory: truncation and reopening must refresh it."""
    offsets = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=True)
    times = TimeIndex(tmp_path / "x.timeindex", 0, 4096, writable=True)
    offsets.append(5, 100)
    offsets.append(10, 200)
    times.maybe_append(1_000, 5)
    times.maybe_append(2_000, 10)
    offsets.truncate_to_offset(10)
    times.truncate_to_offset(10)
    offsets.append(7, 150)  # below the dropped (10, 200), above the kept (5, 100)
    times.maybe_append(1_500, 7)  # older than the dropped entry: still appended
    with pytest.raises(AssertionError):
        offsets.append(6, 160)
    assert offsets.entry_list() == [(5, 100), (7, 150)]
    assert times.entry_list() == [(1_000, 5), (1_500, 7)]
    offsets.trim()
    times.trim()
    offsets.make_writable()
    times.make_writable()
    with pytest.raises(AssertionError):
        offsets.append(7, 170)
    times.maybe_append(1_500, 8)  # not newer than the last entry: skipped
    offsets.append(8, 170)
    assert offsets.entry_list() == [(5, 100), (7, 150), (8, 170)]
    assert times.entry_list() == [(1_000, 5), (1_500, 7)]
    offsets.reset()
    offsets.append(1, 10)  # nothing left to compare against
    assert offsets.entry_list() == [(1, 10)]
    offsets.close()
    times.close()
