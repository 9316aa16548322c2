"""How the cluster commands print: `--output table` (the default, for people:
tables drawn by rich) or `--output json` (for scripts: one JSON document on
stdout, its shape documented per command in docs/cli.md).

Tables go through a rich `Console`: styled (bold headers) on a terminal, and
plain text through a pipe, where they are never wrapped or cut (a pipe has no
width; `PIPE_WIDTH` stands in) and lines carry no trailing spaces.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import orjson
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

OUTPUTS = ("table", "json")
# Characters a line of table output may take when stdout is not a terminal.
PIPE_WIDTH = 10_000


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """`--output table|json` (`-o`), and `--json`, its older spelling."""
    way = parser.add_mutually_exclusive_group()
    way.add_argument(
        "--output",
        "-o",
        choices=OUTPUTS,
        default="table",
        help="table: for people (default); json: one JSON document for scripts (docs/cli.md)",
    )
    way.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as --output json"
    )


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "table") == "json"


def json_text(doc: Any) -> str:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def print_json(doc: Any, out: TextIO) -> None:
    out.write(json_text(doc) + "\n")


def cell(value: Any) -> str:
    """A table cell: `-` for nothing, yes/no, lists joined with commas."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def grid(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, indent: int = 0
) -> RenderableType:
    """Aligned columns two spaces apart, headers first, no borders."""
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, 1, 0, 1),
        show_edge=False,
        header_style="bold",
    )
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*(Text(cell(v)) for v in row))
    return Padding(table, (0, 0, 0, indent)) if indent else table


def pairs(items: Sequence[tuple[str, Any]]) -> Table:
    """`key  value` lines, the keys aligned (a summary above a table)."""
    table = Table(box=None, pad_edge=False, show_header=False, padding=(0, 1, 0, 1))
    table.add_column(no_wrap=True)
    table.add_column()
    for key, value in items:
        table.add_row(Text(key), Text(cell(value)))
    return table


def text(line: str) -> Text:
    """A line printed as it is (no markup, no highlighting)."""
    return Text(line)


def console_for(out: TextIO) -> Console:
    """The rich console of a terminal `out`."""
    return Console(file=out, highlight=False, markup=False, emoji=False, soft_wrap=False)


def print_rich(renderables: Iterable[RenderableType], out: TextIO) -> None:
    """Print to `out`: styled on a terminal; through a pipe plain, unwrapped, rstripped."""
    items = list(renderables)
    if _isatty(out):
        _print_each(console_for(out), items)
        return
    buffer = io.StringIO()
    plain = Console(
        file=buffer,
        width=PIPE_WIDTH,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
    )
    _print_each(plain, items)
    for line in buffer.getvalue().splitlines():
        out.write(line.rstrip() + "\n")


def render_text(renderables: Iterable[RenderableType], width: int) -> str:
    """What `renderables` look like on a terminal `width` wide, as plain text
    (trailing spaces dropped)."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    _print_each(console, renderables)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def _print_each(console: Console, renderables: Iterable[RenderableType]) -> None:
    # One print each: print(*items) would join them with spaces on one line.
    for item in renderables:
        console.print(item)


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
