"""The Raft snapshot ("full dump") file: the owner's snapshot bytes, never a pickle.

pysyncobj compacts its log by writing a full dump and keeping only the two
log entries around the last applied index. With its `serializer` hook it hands
us those two entries and we write this file; on restart (or when a leader
installs a snapshot on a lagging follower) the `deserializer` hook gives the
two entries back and the state machine gets `restore(state)`.

Layout (all integers big-endian):

    magic        8 bytes  b"LGRSNAP" + format version byte (1)
    last_index   u64      Raft index the state reflects (= last applied)
    last_term    u64
    prev_index   u64      the entry before it (pysyncobj keeps both)
    prev_term    u64
    last_len     u32      length of the last entry's raw pysyncobj command
    prev_len     u32
    state_len    u64      length of the owner's snapshot bytes
    last_command last_len bytes
    prev_command prev_len bytes
    state        state_len bytes
    crc32        u32      zlib.crc32 of every byte before it

Invariants: prev_index + 1 == last_index; a file that is short, long, has a
wrong magic or a wrong CRC is rejected with `SnapshotFormatError` and is never
half-restored. Writes are fsynced before the caller renames the file into
place (pysyncobj does the rename; see docs/quorum.md for what it syncs).
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from lograft import power_loss

MAGIC = b"LGRSNAP\x01"
_HEADER = struct.Struct(">8sQQQQIIQ")
_CRC = struct.Struct(">I")

# A pysyncobj log entry as its journal keeps it: (command bytes, index, term).
RaftEntry = tuple[bytes, int, int]


class SnapshotFormatError(ValueError):
    """The snapshot file is not a complete, intact lograft snapshot."""


@dataclass(frozen=True)
class Snapshot:
    last_entry: RaftEntry
    prev_entry: RaftEntry
    state: bytes

    def __post_init__(self) -> None:
        if self.prev_entry[1] + 1 != self.last_entry[1]:
            raise SnapshotFormatError(
                f"entries not adjacent: {self.prev_entry[1]} then {self.last_entry[1]}"
            )

    @property
    def last_index(self) -> int:
        return self.last_entry[1]


def as_entry(raw: object) -> RaftEntry:
    """Normalise a pysyncobj journal entry (command may be str in old journals)."""
    if not isinstance(raw, tuple | list) or len(raw) != 3:
        raise SnapshotFormatError(f"not a Raft entry: {raw!r:.80}")
    command, index, term = raw
    if isinstance(command, str):
        command = command.encode("utf-8")
    return bytes(command), int(index), int(term)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    last_cmd, last_idx, last_term = snapshot.last_entry
    prev_cmd, prev_idx, prev_term = snapshot.prev_entry
    header = _HEADER.pack(
        MAGIC,
        last_idx,
        last_term,
        prev_idx,
        prev_term,
        len(last_cmd),
        len(prev_cmd),
        len(snapshot.state),
    )
    body = b"".join((header, last_cmd, prev_cmd, snapshot.state))
    return body + _CRC.pack(zlib.crc32(body))


def decode_snapshot(data: bytes) -> Snapshot:
    if len(data) < _HEADER.size + _CRC.size:
        raise SnapshotFormatError(f"snapshot too short: {len(data)} bytes")
    magic, last_idx, last_term, prev_idx, prev_term, last_len, prev_len, state_len = (
        _HEADER.unpack_from(data)
    )
    if magic != MAGIC:
        raise SnapshotFormatError(f"bad magic {magic!r}; not a lograft snapshot")
    expected = _HEADER.size + last_len + prev_len + state_len + _CRC.size
    if len(data) != expected:
        raise SnapshotFormatError(f"snapshot is {len(data)} bytes, header says {expected}")
    body = memoryview(data)[: -_CRC.size]
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise SnapshotFormatError("snapshot CRC mismatch")
    pos = _HEADER.size
    last_cmd = bytes(data[pos : pos + last_len])
    pos += last_len
    prev_cmd = bytes(data[pos : pos + prev_len])
    pos += prev_len
    state = bytes(data[pos : pos + state_len])
    return Snapshot((last_cmd, last_idx, last_term), (prev_cmd, prev_idx, prev_term), state)


def write_snapshot_file(path: str | Path, snapshot: Snapshot) -> None:
    """Write and fsync; the caller (pysyncobj) renames the file into place."""
    data = encode_snapshot(snapshot)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    power_loss.synced(Path(path))


def read_snapshot_file(path: str | Path) -> Snapshot:
    with open(path, "rb") as f:
        return decode_snapshot(f.read())


def fsync_path(path: str | Path) -> None:
    """fsync a file or directory so that a rename into it survives power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    # The power-loss test mode records what this fsync made durable.
    if is_dir:
        power_loss.dir_synced(Path(path))
    else:
        power_loss.synced(Path(path))
