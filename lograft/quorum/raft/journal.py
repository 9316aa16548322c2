"""The Raft log on disk: a pysyncobj journal that is fsynced before it counts.

Stock pysyncobj (`pysyncobj.journal.FileJournal`) writes entries into a
shared mmap and never syncs it, so a power cut can lose entries this node
already acknowledged. `DurableJournal` implements the same `Journal`
interface with its own file format and an explicit `sync()`:

- `add`, `clear` and `deleteEntriesFrom` write with `os.pwrite` (page cache
  only) and mark the journal unsynced. `sync()` makes every write so far
  durable with one `os.fsync`: that is the group commit, every entry written
  since the previous sync shares it. *When* `sync()` runs is decided by the
  Raft core and the transport (`quorum/raft/durability.py`): before any
  message that reflects the log leaves the node, and before the next tick
  in which the leader counts itself toward a commit.
- `deleteEntriesTo` (log compaction) rewrites the kept entries into a new
  file, fsyncs it, renames it over the journal and fsyncs the directory.
  Rewriting in place would leave a window in which entries this node had
  already acknowledged exist only in the page cache.
- Term, vote and commit index (`raft.journal.meta`) are written to a
  temporary file, fsynced, renamed and the directory fsynced, on every
  change of term or vote (before pysyncobj sends the vote) and once a second
  for the commit index. Raft needs term and vote durable before a vote is
  granted; a node that forgets its vote can vote twice in one term.

File format (`LGRJRNL` version 2): an 8-byte magic, then records
`size:u32 crc32:u32 index:u64 term:u64 command`, where `size` counts the
16 bytes of index and term plus the command and the CRC-32 covers them; an
all-zero 8-byte end mark follows the last record. Reading stops at the first
record that is not whole and valid (size past the file end, CRC mismatch,
index not the previous + 1, term below the previous): that is where writes
that had not reached the disk at a power cut begin, and none of them was
acknowledged. A stock pysyncobj journal (`PYSYNCOBJ` header) is read once
and rewritten in this format.

With `fsync=False` nothing is ever fsynced (the stock behaviour, for
benchmarks and for tests that do not care); the rename-based rewrites stay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pysyncobj.journal import Journal
from pysyncobj.pickle import loads as pysyncobj_loads

from lograft import power_loss
from lograft.quorum.raft.snapshot import fsync_path

log = logging.getLogger(__name__)

MAGIC = b"LGRJRNL\x02"
_RECORD_HEAD = struct.Struct("<II")  # size, crc32
_INDEX_TERM = struct.Struct("<QQ")
_END_MARK = b"\0" * _RECORD_HEAD.size
# pysyncobj's FileJournal: name (24) + version (8) + format (4) + last record offset (4).
_STOCK_NAME = b"PYSYNCOBJ"
_STOCK_LAST_OFFSET_AT = 36
_STOCK_FIRST_RECORD_AT = 40

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj keeps them


def encode_record(command: bytes, index: int, term: int) -> bytes:
    body = _INDEX_TERM.pack(index, term) + command
    return _RECORD_HEAD.pack(len(body), zlib.crc32(body)) + body


def decode_records(data: bytes, start: int) -> tuple[list[Entry], list[int], int]:
    """Whole, valid, consecutive records from `start`: (entries, their offsets, end)."""
    entries: list[Entry] = []
    offsets: list[int] = []
    pos = start
    while pos + _RECORD_HEAD.size <= len(data):
        size, crc = _RECORD_HEAD.unpack_from(data, pos)
        body_at = pos + _RECORD_HEAD.size
        if size < _INDEX_TERM.size or body_at + size > len(data):
            break
        body = data[body_at : body_at + size]
        if zlib.crc32(body) != crc:
            break
        index, term = _INDEX_TERM.unpack_from(body)
        if entries and (index != entries[-1][1] + 1 or term < entries[-1][2]):
            break
        entries.append((bytes(body[_INDEX_TERM.size :]), index, term))
        offsets.append(pos)
        pos = body_at + size
    return entries, offsets, pos


def decode_stock_journal(data: bytes) -> list[Entry]:
    """The entries of a pysyncobj FileJournal file (its own reading loop)."""
    (last,) = struct.unpack_from("<I", data, _STOCK_LAST_OFFSET_AT)
    entries: list[Entry] = []
    pos = _STOCK_FIRST_RECORD_AT
    while pos + 4 <= min(last, len(data)):
        (size,) = struct.unpack_from("<I", data, pos)
        if size < _INDEX_TERM.size or pos + 4 + size > len(data):
            break  # torn: pysyncobj never synced its journal
        record = data[pos + 4 : pos + 4 + size]
        index, term = _INDEX_TERM.unpack_from(record)
        entries.append((bytes(record[_INDEX_TERM.size :]), index, term))
        pos += size + 8
    return entries


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class DurableJournal(Journal):
    """pysyncobj's Journal interface over a file that `sync()` makes durable."""

    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self._path = Path(path)
        self._tmp_path = self._path.with_name(self._path.name + ".tmp")
        self._meta_path = self._path.with_name(self._path.name + ".meta")
        self._fsync = fsync
        self._unsynced = False
        # The first write or fsync that failed. The journal is unusable from
        # then on (the kernel may have dropped dirty pages: an fsync retried
        # after a failure can succeed without the data), so sync() raises it.
        self.failure: OSError | None = None
        self.syncs = 0
        self.sync_seconds = 0.0
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._end = len(MAGIC)
        self._meta_saved = True
        self._meta = self._load_meta()  # first: it may refuse, and nothing is open yet
        self._fd = self._open()

    # -- durability ----------------------------------------------------------------

    @property
    def fsync_enabled(self) -> bool:
        return self._fsync

    @property
    def unsynced(self) -> bool:
        """Writes were made since the last sync (always False with fsync off)."""
        return self._unsynced

    def sync(self) -> None:
        """Make every write so far durable: one fsync for all of them."""
        if self.failure is not None:
            raise self.failure
        if not self._unsynced:
            return
        started = time.perf_counter()
        with self._failing():
            os.fsync(self._fd)
        power_loss.synced(self._path)
        self.sync_seconds += time.perf_counter() - started
        self.syncs += 1
        self._unsynced = False

    def _wrote(self) -> None:
        if self._fsync:
            self._unsynced = True

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            if self.failure is None:
                self.failure = exc
            raise

    # -- pysyncobj's Journal interface ------------------------------------------------

    def add(self, command: Any, idx: int, term: int) -> None:
        data = command if isinstance(command, bytes) else bytes(command, "utf-8")
        record = encode_record(data, idx, term)
        # The end mark after the record stops a reader at the true end once
        # synced, even where older, longer logs left records behind.
        with self._failing():
            _pwrite_all(self._fd, record + _END_MARK, self._end)
        self._entries.append((data, idx, term))
        self._offsets.append(self._end)
        self._end += len(record)
        self._wrote()

    def clear(self) -> None:
        self._truncate_at(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self._truncate_at(entryFrom)

    def deleteEntriesTo(self, entryTo: int) -> None:
        old_fd = self._fd
        with self._failing():
            self._fd = self._rewrite(self._entries[entryTo:])
        os.close(old_fd)

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd < 0:
            return
        self.sync()
        os.close(self._fd)
        self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Stored by onOneSecondTimer: losing it costs only a re-commit.
        if self._meta.get("raftCommitIndex") != raftCommitIndex:
            self._meta["raftCommitIndex"] = raftCommitIndex
            self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # pysyncobj sends the vote (or the vote request) right after this
        # returns, so term and vote are on disk before any peer can count them.
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        with self._failing():
            self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            with self._failing():
                self._store_meta()

    # -- the file --------------------------------------------------------------------

    def _open(self) -> int:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return self._rewrite([])
        if data.startswith(MAGIC):
            self._entries, self._offsets, self._end = decode_records(data, len(MAGIC))
            if data[self._end : self._end + len(_END_MARK)].strip(b"\0"):
                log.warning(
                    "Raft journal %s: %d bytes after the last whole record (index %s) "
                    "ignored: writes that never reached the disk",
                    self._path,
                    len(data) - self._end,
                    self._entries[-1][1] if self._entries else None,
                )
            fd = os.open(self._path, os.O_RDWR)
            # Mark the end now, so the ignored tail can never be read back.
            _pwrite_all(fd, _END_MARK, self._end)
            if self._fsync:
                os.fsync(fd)
                power_loss.synced(self._path)
            return fd
        if data.startswith(_STOCK_NAME):
            log.info("Raft journal %s: converting from the pysyncobj format", self._path)
            return self._rewrite(decode_stock_journal(data))
        raise ValueError(f"{self._path} is not a Raft journal (unknown header {data[:8]!r})")

    def _rewrite(self, entries: list[Entry]) -> int:
        """Write `entries` to a new file that atomically replaces the journal."""
        blob = bytearray(MAGIC)
        offsets = []
        for command, index, term in entries:
            offsets.append(len(blob))
            blob += encode_record(command, index, term)
        end = len(blob)
        blob += _END_MARK
        fd = os.open(self._tmp_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, bytes(blob), 0)
            if self._fsync:
                os.fsync(fd)
                power_loss.synced(self._tmp_path)
            os.replace(self._tmp_path, self._path)
            power_loss.replaced(self._tmp_path, self._path)
            if self._fsync:
                fsync_path(self._path.parent)
        except BaseException:
            os.close(fd)
            raise
        self._entries = list(entries)
        self._offsets = offsets
        self._end = end
        self._unsynced = False
        return fd

    def _truncate_at(self, entry: int) -> None:
        if entry >= len(self._entries):
            return
        self._end = self._offsets[entry]
        del self._entries[entry:]
        del self._offsets[entry:]
        with self._failing():
            _pwrite_all(self._fd, _END_MARK, self._end)
        self._wrote()

    # -- term, vote, commit index -------------------------------------------------------

    def _load_meta(self) -> dict[str, Any]:
        try:
            raw = self._meta_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            meta = json.loads(raw)
        except ValueError:
            try:
                # A journal written by stock pysyncobj: its meta is a pickle.
                meta = pysyncobj_loads(raw)
            except Exception as exc:
                raise ValueError(f"{self._meta_path} is unreadable: {exc!r}") from exc
            self._meta_saved = False  # rewrite it as JSON on the next timer
        if not isinstance(meta, dict):
            raise ValueError(f"{self._meta_path} does not hold a JSON object")
        return meta

    def _store_meta(self) -> None:
        tmp = self._meta_path.with_name(self._meta_path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(self._meta).encode())
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        if self._fsync:
            power_loss.synced(tmp)
        os.replace(tmp, self._meta_path)
        power_loss.replaced(tmp, self._meta_path)
        if self._fsync:
            fsync_path(self._meta_path.parent)
        self._meta_saved = True
