"""The clean-shutdown file (lograft/node/clean_shutdown.py)."""

from __future__ import annotations

from pathlib import Path

from lograft.node.clean_shutdown import (
    FILE_NAME,
    UNCLEAN,
    record_clean_shutdown,
    take_previous_epoch,
)


def test_no_file_reads_as_unclean(tmp_path: Path) -> None:
    assert take_previous_epoch(tmp_path) == UNCLEAN


def test_a_recorded_epoch_is_read_once(tmp_path: Path) -> None:
    record_clean_shutdown(tmp_path, 42)
    assert take_previous_epoch(tmp_path) == 42
    # Taken: a crash of this incarnation must read as unclean.
    assert not (tmp_path / FILE_NAME).exists()
    assert take_previous_epoch(tmp_path) == UNCLEAN


def test_a_broker_that_never_registered_vouches_for_nothing(tmp_path: Path) -> None:
    record_clean_shutdown(tmp_path, -1)
    assert not (tmp_path / FILE_NAME).exists()


def test_garbage_reads_as_unclean_and_is_removed(tmp_path: Path) -> None:
    for text in (b"", b"x", b"-5", b"\xff\xfe"):
        (tmp_path / FILE_NAME).write_bytes(text)
        assert take_previous_epoch(tmp_path) == UNCLEAN
        assert not (tmp_path / FILE_NAME).exists()
