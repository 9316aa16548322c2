"""A new leader's epoch entry is written off the append path, but never after
a batch of its epoch: `assign_deferred` changes the cache in memory only, and
the first append (`assign`, even when its entry changes nothing) writes the
cache before the batch is written. A failed write keeps the batch out."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.errors import StorageError
from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage import checkpoint, epoch_cache
from lograft.storage.epoch_cache import FILE_NAME, LeaderEpochCache
from lograft.storage.log import Log


def on_disk(directory: Path) -> list[tuple[int, int]]:
    return LeaderEpochCache(directory).entries()


def one_batch() -> bytes:
    return build_batch([RecordInput(b"v", b"k")], timestamp_ms=1)


def test_deferred_entry_is_in_memory_only_until_flushed(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign_deferred(2, 5)
    assert cache.latest_epoch == 2 and cache.dirty
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert on_disk(tmp_path) == [(1, 0)]
    assert cache.flush() is True
    assert not cache.dirty and on_disk(tmp_path) == [(1, 0), (2, 5)]
    assert cache.flush() is False  # nothing left to write


def test_an_append_of_the_deferred_epoch_writes_it_first(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign_deferred(3, 0)
    cache.assign(3, 0)  # the batch's own entry is no change, yet the cache is written
    assert on_disk(tmp_path) == [(3, 0)] and not cache.dirty


def test_a_deferred_entry_never_trails_a_batch_of_its_epoch(tmp_path, monkeypatch):
    """Through the Log: the checkpoint holds the epoch before the batch exists."""
    log = Log(tmp_path / "p")
    log.epochs.assign_deferred(4, log.log_end_offset)
    assert on_disk(log.directory) == []
    written: list[list[tuple[int, int]]] = []
    real_write = checkpoint.write_entries

    def spy(path: Path, entries: list[tuple[int | str, ...]]) -> None:
        # What the log holds at the moment the checkpoint is written.
        assert log.log_end_offset == 0
        written.append([(int(e), int(s)) for e, s in entries])
        real_write(path, entries)

    monkeypatch.setattr(epoch_cache.checkpoint, "write_entries", spy)
    log.append(one_batch(), leader_epoch=4)
    monkeypatch.undo()
    assert written == [[(4, 0)]]
    assert log.log_end_offset == 1
    log.close()
    assert on_disk(log.directory) == [(4, 0)]


def test_a_failed_write_keeps_the_batch_out_and_the_entry_pending(tmp_path, monkeypatch):
    log = Log(tmp_path / "p")
    log.epochs.assign_deferred(2, 0)

    def full(path: Path, entries: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(epoch_cache.checkpoint, "write_entries", full)
    with pytest.raises(StorageError):
        log.append(one_batch(), leader_epoch=2)
    assert log.log_end_offset == 0
    assert not (log.directory / FILE_NAME).exists()
    monkeypatch.undo()
    info = log.append(one_batch(), leader_epoch=2)
    assert (info.first_offset, on_disk(log.directory)) == (0, [(2, 0)])
    log.close()


def test_lost_deferred_entry_answers_followers_as_before(tmp_path):
    """A crash before the flush loses an entry that described no batch: the
    reopened log's answers for the previous epoch are the ones the leader gave."""
    directory = tmp_path / "p"
    log = Log(directory)
    log.append(one_batch(), leader_epoch=1)
    log.epochs.assign_deferred(2, log.log_end_offset)
    before = log.epochs.end_offset_for(1, log.log_end_offset)
    log.close_unclean()
    reopened = Log(directory)
    assert reopened.epochs.entries() == [(1, 0)]
    assert reopened.epochs.end_offset_for(1, reopened.log_end_offset) == before == (1, 1)
    reopened.close()
