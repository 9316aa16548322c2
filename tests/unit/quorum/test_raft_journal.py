"""DurableJournal: the Raft log file, its recovery after torn writes, its fsyncs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pysyncobj.journal import FileJournal

from lograft.quorum.raft.journal import MAGIC, DurableJournal


def entries(n: int, term: int = 1, first: int = 1) -> list[tuple[bytes, int, int]]:
    return [(f"command-{i}".encode() * (i % 7 + 1), i, term) for i in range(first, first + n)]


def fill(journal: DurableJournal, items: list[tuple[bytes, int, int]]) -> None:
    for item in items:
        journal.add(*item)


def test_entries_term_and_vote_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(20))
    j.setCurrentTerm(3, "node-2")
    j.setRaftCommitIndex(17)
    j.onOneSecondTimer()
    j._destroy()
    again = DurableJournal(path)
    assert list(again[:]) == entries(20)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "node-2")
    assert again.getRaftCommitIndex() == 17
    assert json.loads((tmp_path / "raft.journal.meta").read_bytes())["currentTerm"] == 3
    again._destroy()


def test_sync_is_one_fsync_for_all_writes_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = DurableJournal(tmp_path / "raft.journal")
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    fill(j, entries(10))
    assert j.unsynced
    j.sync()
    j.sync()  # nothing new: no second fsync
    assert calls == [j._fd] and not j.unsynced and j.syncs == 1
    j._destroy()


def test_fsync_off_never_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    j = DurableJournal(tmp_path / "raft.journal", fsync=False)
    fill(j, entries(5))
    j.setCurrentTerm(2, None)
    j.sync()
    j.deleteEntriesTo(2)
    j._destroy()
    assert calls == [] and j.syncs == 0


@pytest.mark.parametrize("cut", [1, 5, 9, 13, 30])
def test_a_torn_last_record_is_dropped_and_the_rest_kept(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(8))
    end_of_seven = j._offsets[7]
    j._destroy()
    data = path.read_bytes()
    # A power cut in the middle of writing record 8: only its first `cut` bytes.
    path.write_bytes(data[: end_of_seven + cut])
    again = DurableJournal(path)
    assert list(again[:]) == entries(7)
    again.add(b"next", 8, 2)  # and appending goes on where the valid log ends
    again._destroy()
    assert list(DurableJournal(path)[:]) == [*entries(7), (b"next", 8, 2)]


def test_a_corrupt_record_ends_the_log_there(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(6))
    at = j._offsets[4] + 20  # inside record 5's body
    j._destroy()
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    assert list(DurableJournal(path)[:]) == entries(4)


def test_truncated_suffix_never_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(10, term=1))
    j.deleteEntriesFrom(4)  # a new leader's log differs from index 5 on
    j.add(b"x", 5, 2)
    j._destroy()
    assert list(DurableJournal(path)[:]) == [*entries(4, term=1), (b"x", 5, 2)]


def test_compaction_replaces_the_file_and_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(50))
    j.sync()
    before = path.stat().st_ino
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1]
    )
    j.deleteEntriesTo(45)
    assert path.stat().st_ino != before  # a new file renamed into place
    assert synced == [str(tmp_path / "raft.journal.tmp"), str(tmp_path)]
    j.add(b"after", 51, 1)
    j._destroy()
    assert list(DurableJournal(path)[:]) == [*entries(5, first=46), (b"after", 51, 1)]


def test_a_new_journal_is_durable_in_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1]
    )
    DurableJournal(tmp_path / "raft.journal")._destroy()
    assert str(tmp_path) in synced
    assert (tmp_path / "raft.journal").read_bytes().startswith(MAGIC)


def test_a_stock_pysyncobj_journal_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    stock = FileJournal(str(path))
    for command, index, term in entries(12, term=4):
        stock.add(command, index, term)
    stock.setCurrentTerm(4, "3")
    stock._destroy()
    converted = DurableJournal(path)
    assert list(converted[:]) == entries(12, term=4)
    assert (converted.getCurrentTerm(), converted.getVotedForNodeId()) == (4, "3")
    converted._destroy()
    assert path.read_bytes().startswith(MAGIC)


def test_an_unreadable_meta_file_refuses_to_start(tmp_path: Path) -> None:
    # Forgetting a vote could let this node vote twice in one term.
    (tmp_path / "raft.journal.meta").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="unreadable"):
        DurableJournal(tmp_path / "raft.journal")


def test_a_failed_fsync_is_never_retried_as_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = DurableJournal(tmp_path / "raft.journal")
    j.add(b"a", 1, 1)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        j.sync()
    monkeypatch.undo()
    with pytest.raises(OSError):
        j.sync()  # the pages may be gone: the journal stays failed
    os.close(j._fd)
