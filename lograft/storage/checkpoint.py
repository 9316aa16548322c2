"""Small checkpoint files written atomically, in Kafka's text format.

Format (as Kafka's CheckpointFile)::

    <version>
    <entry count>
    <entry>          one per line, fields separated by one space

A file is replaced by writing `<name>.tmp`, fsyncing it, renaming it over the
old one and fsyncing the directory, so a crash leaves the old or the new file
whole, never a mix. A file that does not parse raises CorruptCheckpointError
naming the file, so the caller decides (recovery rebuilds from the log).
"""

from __future__ import annotations

import os
from pathlib import Path

from lograft import power_loss
from lograft.errors import LograftError

VERSION = 0


class CorruptCheckpointError(LograftError):
    code = "CORRUPT_CHECKPOINT"


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        power_loss.synced(tmp)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    power_loss.replaced(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
        power_loss.dir_synced(directory)
    finally:
        os.close(fd)


def write_entries(path: Path, entries: list[tuple[int | str, ...]]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def read_entries(path: Path, fields: int) -> list[tuple[str, ...]] | None:
    """The entries of a checkpoint, or None when the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    lines = text.splitlines()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"checkpoint {path} has no version/count header") from None
    if version != VERSION:
        raise CorruptCheckpointError(f"checkpoint {path} has unknown version {version}")
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(
            f"checkpoint {path} declares {count} entries but holds {len(body)}"
        )
    entries = [tuple(line.split(" ")) for line in body]
    for entry in entries:
        if len(entry) != fields:
            raise CorruptCheckpointError(f"checkpoint {path} has a malformed entry {entry!r}")
    return entries


def write_offset(path: Path, offset: int) -> None:
    write_entries(path, [(offset,)])


def read_offset(path: Path) -> int | None:
    entries = read_entries(path, 1)
    if entries is None:
        return None
    if len(entries) != 1:
        raise CorruptCheckpointError(f"checkpoint {path} must hold exactly one offset")
    try:
        return int(entries[0][0])
    except ValueError:
        raise CorruptCheckpointError(f"checkpoint {path} holds a non-integer offset") from None
