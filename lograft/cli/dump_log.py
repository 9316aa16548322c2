"""`lograft dump-log PATH...`: what segment, index and time-index files hold, as
kafka-dump-log prints it (`--output table`, the default) or as JSON Lines
(`--output json`: one object per entry, shapes in docs/cli.md).

Large segments show a progress bar on stderr (bytes of the file walked,
batches read) under the same rules as `produce`'s (`cli.progress`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import orjson

from lograft.cli.output import add_output_args, wants_json
from lograft.cli.progress import Progress
from lograft.errors import LograftError


def add_parser(sub: Any) -> None:
    dump = sub.add_parser(
        "dump-log",
        help="print the batches (and records) of segment, index or time-index files",
        description="Print each record batch of a segment file, as kafka-dump-log does.",
    )
    dump.add_argument("files", nargs="+", metavar="PATH", help=".log, .index or .timeindex file")
    dump.add_argument("--records", action="store_true", help="also print every record")
    add_output_args(dump)
    dump.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr for .log files (default: when stderr is a "
        "terminal and the file takes over a second)",
    )
    dump.set_defaults(func=cmd_dump_log)


def cmd_dump_log(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    status = 0
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            err.write(f"lograft dump-log: {path}: no such file\n")
            status = 1
            continue
        progress = Progress(
            err, mode=args.progress, total=path.stat().st_size, what="batches read", clock=clock
        )
        try:
            _dump(path, args, out, progress)
        except LograftError as exc:
            err.write(f"lograft dump-log: {exc.message}\n")
            status = 1
        except BrokenPipeError:
            return status
        finally:
            progress.clear()
    return status


def _dump(path: Path, args: argparse.Namespace, out: TextIO, progress: Progress) -> None:
    from lograft.storage.dump import dump_entries, entry_line

    as_json = wants_json(args)
    batches = 0
    for entry in dump_entries(path, records=args.records):
        out.write(orjson.dumps(entry).decode() if as_json else entry_line(entry))
        out.write("\n")
        if entry["type"] == "batch":
            batches += 1
            progress.update(batches, entry["position"] + entry["size"])
