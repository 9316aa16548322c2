"""A test mode that simulates power loss: what the disk holds after a power
cut is what was fsynced, not what the page cache held.

Off unless the environment variable `LOGRAFT_TEST_POWER_LOSS_DIR` names a
directory (a node's own, outside its data dir). Then every fsync the storage
layer and the metadata quorum's files (quorum/raft/journal.py, snapshot.py,
core.py) make is recorded there, as it returns:

- a file's fsync (`synced`) keeps a copy of its bytes as of that fsync (for a
  segment `.log`, only the bytes the fsync covered: those written before it
  began, `size`);
- a directory's fsync (`dir_synced`) records its names (each with its inode);
- a rename followed by a directory fsync (`replaced`: checkpoints, swaps)
  carries the copy to the new name; a truncation (`truncated`) marks the
  bytes from there as changed, so the next fsync copies them again.

`cut_power(record_dir, root)` then, with the node killed (SIGKILL), puts
every file under `root` (a node's `logs` directory, or its `metadata`
directory: Raft journal, its meta file, snapshot) back as a power cut would
leave it:

- a name its directory's last fsync did not list disappears (a file created
  since, even if its data was fsynced; a directory too, with all it holds);
- a file whose name survives gets its bytes as of its last fsync, or none
  (0 bytes) if it was never fsynced;
- a deletion is taken as durable at once (nothing deleted comes back). Real
  file systems may bring back a file unlinked since its directory's last
  fsync; the storage layer never relies on either outcome.

It lives outside storage/ and quorum/ so that both record into it (quorum
never imports storage).

The record is a journal of JSON lines plus the copies, written without fsync:
the simulated cut happens to a process, not to the machine, so the test
process reads them back whole (a line torn by the kill is ignored; the fsync
it reports had not returned, so nothing was acknowledged on it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

ENV_VAR = "LOGRAFT_TEST_POWER_LOSS_DIR"
JOURNAL = "journal.jsonl"
COPIES = "copies"
# Segment files: appended to, so a copy grows by the bytes fsynced since the last.
_APPEND_ONLY_SUFFIX = ".log"


def _copy_name(path: str) -> str:
    return hashlib.sha1(path.encode()).hexdigest()


class Recorder:
    """Records fsyncs into `directory` (one node process's)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / COPIES).mkdir(parents=True, exist_ok=True)
        self._journal = open(directory / JOURNAL, "a", buffering=1)  # noqa: SIM115
        self._lock = threading.Lock()
        # Per path: the bytes its copy holds, and the first byte changed since
        # (a truncation); a path not seen in this process is copied whole.
        self._copied: dict[str, int] = {}
        self._changed_from: dict[str, int] = {}

    def _write(self, entry: dict[str, object]) -> None:
        self._journal.write(json.dumps(entry) + "\n")

    def synced(self, path: Path, size: int | None) -> None:
        key = os.path.abspath(path)
        copy = self.directory / COPIES / _copy_name(key)
        with self._lock:
            try:
                self._copy(key, copy, size)
            except FileNotFoundError:
                return  # deleted since its fsync: nothing of it survives

    def _copy(self, key: str, copy: Path, size: int | None) -> None:
        ino = os.stat(key).st_ino
        start = 0
        if key.endswith(_APPEND_ONLY_SUFFIX) and key in self._copied:
            start = min(self._copied[key], self._changed_from.get(key, self._copied[key]))
        with open(key, "rb") as src, open(copy, "r+b" if start else "wb") as dst:
            src.seek(start)
            dst.seek(start)
            want = None if size is None else max(size - start, 0)
            data = src.read() if want is None else src.read(want)
            dst.write(data)
            end = start + len(data)
            dst.truncate(end)
        self._copied[key] = end
        self._changed_from.pop(key, None)
        self._write({"op": "file", "path": key, "ino": ino, "size": end})

    def dir_synced(self, directory: Path) -> None:
        key = os.path.abspath(directory)
        with self._lock:
            try:
                names = {entry.name: entry.inode() for entry in os.scandir(key)}
            except FileNotFoundError:
                return
            self._write({"op": "dir", "path": key, "names": names})

    def truncated(self, path: Path, size: int) -> None:
        key = os.path.abspath(path)
        with self._lock:
            self._changed_from[key] = min(size, self._changed_from.get(key, size))

    def forget(self, path: Path) -> None:
        key = os.path.abspath(path)
        with self._lock:
            for known in [k for k in self._copied if k == key or k.startswith(key + os.sep)]:
                del self._copied[known]
                self._changed_from.pop(known, None)
                (self.directory / COPIES / _copy_name(known)).unlink(missing_ok=True)

    def replaced(self, src: Path, dst: Path) -> None:
        old, new = os.path.abspath(src), os.path.abspath(dst)
        with self._lock:
            copy = self.directory / COPIES / _copy_name(old)
            if copy.exists():
                os.replace(copy, self.directory / COPIES / _copy_name(new))
            if old in self._copied:
                self._copied[new] = self._copied.pop(old)
            self._changed_from.pop(new, None)
            self._write({"op": "rename", "src": old, "dst": new})


def _from_env() -> Recorder | None:
    where = os.environ.get(ENV_VAR)
    return Recorder(Path(where)) if where else None


RECORDER = _from_env()


def synced(path: Path, size: int | None = None) -> None:
    """`path` was fsynced; `size`: the bytes written before the fsync began
    (None: the whole file)."""
    if RECORDER is not None:
        RECORDER.synced(path, size)


def dir_synced(directory: Path) -> None:
    if RECORDER is not None:
        RECORDER.dir_synced(directory)


def truncated(path: Path, size: int) -> None:
    if RECORDER is not None:
        RECORDER.truncated(path, size)


def forget(path: Path) -> None:
    """`path` (a file, or a directory and all under it) was deleted: a file
    created there later starts a new copy."""
    if RECORDER is not None:
        RECORDER.forget(path)


def replaced(src: Path, dst: Path) -> None:
    if RECORDER is not None:
        RECORDER.replaced(src, dst)


# -- the cut (run by a test, with the node killed) -------------------------------------


@dataclass
class _Durable:
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (inode, size)
    dirs: dict[str, dict[str, int]] = field(default_factory=dict)  # path -> {name: inode}


@dataclass
class CutReport:
    removed: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    # Bytes the cut took from files (written but never fsynced), in all and
    # from segment `.log` files (the rest: preallocated indexes, rebuilt).
    bytes_dropped: int = 0
    log_bytes_dropped: int = 0

    def dropped(self, path: str, size: int) -> None:
        self.bytes_dropped += size
        if path.endswith(_APPEND_ONLY_SUFFIX):
            self.log_bytes_dropped += size


def _replay(record_dir: Path) -> _Durable:
    state = _Durable()
    journal = record_dir / JOURNAL
    if not journal.exists():
        return state
    for line in journal.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # torn by the kill
        if e["op"] == "file":
            state.files[e["path"]] = (e["ino"], e["size"])
        elif e["op"] == "dir":
            state.dirs[e["path"]] = e["names"]
        elif e["op"] == "rename" and e["src"] in state.files:
            state.files[e["dst"]] = state.files.pop(e["src"])
    return state


def cut_power(record_dir: Path, root: Path) -> CutReport:
    """Leave every file under `root` as a power cut would (see the module
    docstring), from the record a node kept in `record_dir`. `root` itself
    stays. The record stays too: it describes what is now on disk, and the
    restarted node adds to it (so a second cut in the same run is right)."""
    state = _replay(record_dir)
    report = CutReport()
    _cut_dir(os.path.abspath(root), state, record_dir, report)
    return report


def _cut_dir(directory: str, state: _Durable, record_dir: Path, report: CutReport) -> None:
    durable = state.dirs.get(directory, {})
    for entry in list(os.scandir(directory)):
        path = entry.path
        if entry.name not in durable:
            report.removed.append(path)
            if entry.is_dir(follow_symlinks=False):
                for file, size in _tree_files(path):
                    report.dropped(file, size)
                shutil.rmtree(path)
            else:
                report.dropped(path, entry.stat().st_size)
                os.unlink(path)
            continue
        if entry.is_dir(follow_symlinks=False):
            _cut_dir(path, state, record_dir, report)
            continue
        size = entry.stat().st_size
        known = state.files.get(path)
        if known is None or known[0] != entry.inode():
            os.truncate(path, 0)
            report.emptied.append(path)
            report.dropped(path, size)
            continue
        copy = record_dir / COPIES / _copy_name(path)
        data = copy.read_bytes()[: known[1]] if copy.exists() else b""
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
        report.restored.append(path)
        report.dropped(path, max(size - len(data), 0))


def _tree_files(path: str) -> list[tuple[str, int]]:
    out = []
    for parent, _dirs, files in os.walk(path):
        for name in files:
            file = os.path.join(parent, name)
            out.append((file, os.path.getsize(file)))
    return out
