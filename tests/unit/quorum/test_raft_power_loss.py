"""The metadata quorum's files under the power-loss test mode
(lograft/power_loss.py): a simulated power cut keeps exactly what the Raft
journal, its meta file and fsync_path made durable, and drops the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft import power_loss
from lograft.quorum.raft.journal import DurableJournal
from lograft.quorum.raft.snapshot import fsync_path

from .test_raft_journal import entries, fill


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "record"
    monkeypatch.setattr(power_loss, "RECORDER", power_loss.Recorder(where))
    return where


def test_a_cut_keeps_the_synced_entries_term_and_vote_and_drops_the_rest(
    tmp_path: Path, record: Path
) -> None:
    root = tmp_path / "metadata"
    root.mkdir()
    path = root / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(20))
    j.sync()
    j.setCurrentTerm(3, "node-2")
    fill(j, entries(10, first=21))  # written, never synced: the page cache only
    report = power_loss.cut_power(record, root)
    assert report.bytes_dropped > 0
    again = DurableJournal(path)
    assert list(again[:]) == entries(20)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "node-2")


def test_a_compacted_journal_survives_a_cut_whole(tmp_path: Path, record: Path) -> None:
    # deleteEntriesTo rewrites the journal under a temporary name and renames
    # it over the old one: the cut must follow the rename.
    root = tmp_path / "metadata"
    root.mkdir()
    path = root / "raft.journal"
    j = DurableJournal(path)
    fill(j, entries(30))
    j.sync()
    j.deleteEntriesTo(10)
    power_loss.cut_power(record, root)
    assert list(DurableJournal(path)[:]) == entries(30)[10:]


def test_fsync_path_makes_a_file_and_its_name_survive(tmp_path: Path, record: Path) -> None:
    root = tmp_path / "metadata"
    root.mkdir()
    kept, lost = root / "raft.snapshot", root / "raft.snapshot.1.tmp"
    kept.write_bytes(b"snapshot")
    lost.write_bytes(b"never synced")
    fsync_path(kept)
    fsync_path(root)
    lost.write_bytes(b"never synced, name listed")
    power_loss.cut_power(record, root)
    assert kept.read_bytes() == b"snapshot"
    assert lost.read_bytes() == b""  # its name was synced, its bytes never
