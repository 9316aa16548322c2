"""The progress bar of long CLI runs (produce, consume of a range, dump-log),
drawn by rich on stderr, and `waiting`, a spinner for one long request
(groups reset-offsets).

It never touches stdout, where the data goes. `mode` is the command's
`--progress/--no-progress`: True always draws (even when stderr is not a
terminal), False never, None (the default) only when stderr is a terminal and
the run has lasted `AUTO_SHOW_AFTER_S` (a short run never flashes a bar). The
bar is redrawn by `update`, at most every `REDRAW_INTERVAL_S` (no refresh
thread: the clock is passed in so tests control time), and erased by `clear`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    ProgressColumn,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress

# Seconds between two redraws, at least.
REDRAW_INTERVAL_S = 0.2
# `auto` mode shows the bar only once a run has lasted this long, s.
AUTO_SHOW_AFTER_S = 1.0
# Characters of the bar itself.
BAR_WIDTH = 24


class Progress:
    def __init__(
        self,
        out: TextIO,
        *,
        mode: bool | None,
        total: int | None,
        what: str,
        clock: Callable[[], float],
    ) -> None:
        """`total`: the size of the work in the unit `update`'s `completed` counts
        (bytes of input, records to read), or None when unknown (no bar, no
        percentage); `what` names what `update`'s `count` counts (`records sent`)."""
        self.out = out
        self.enabled = mode if mode is not None else isatty(out)
        self.show_after_s = 0.0 if mode else AUTO_SHOW_AFTER_S
        self.total = total if total else None
        self.what = what
        self.clock = clock
        self.started = clock()
        self._drawn_at: float | None = None
        self._bar: RichProgress | None = None

    def rate(self, count: int) -> float:
        elapsed = self.clock() - self.started
        return count / elapsed if elapsed > 0 else 0.0

    def status(self, count: int) -> str:
        return f"{count:,} {self.what}  {self.rate(count):,.0f} {self.what.split()[0]}/s"

    def update(self, count: int, completed: int = 0) -> None:
        """`count` things done so far; `completed` units of `total` done."""
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.show_after_s:
            return
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_INTERVAL_S:
            return
        self._drawn_at = now
        if self._bar is None:
            self._bar = self._make()
            self._bar.update(self._bar.task_ids[0], completed=completed, status=self.status(count))
            self._bar.start()  # draws the first frame
            return
        self._bar.update(self._bar.task_ids[0], completed=completed, status=self.status(count))
        self._bar.refresh()

    def _make(self) -> RichProgress:
        console = _console(self.out)
        columns: list[ProgressColumn] = []
        if self.total is not None:
            columns += [BarColumn(bar_width=BAR_WIDTH), TaskProgressColumn()]
        columns.append(TextColumn("{task.fields[status]}", markup=False))
        bar = RichProgress(
            *columns,
            console=console,
            auto_refresh=False,
            transient=True,
            # stdout carries the data: never route it through the bar's console.
            redirect_stdout=False,
            redirect_stderr=False,
            get_time=self.clock,
        )
        bar.add_task("", total=self.total, status="")
        return bar

    def clear(self) -> None:
        """Erase the bar so the summary line starts on a clean line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            self._drawn_at = None


@contextmanager
def waiting(out: TextIO, *, mode: bool | None, message: str) -> Iterator[None]:
    """A spinner with `message` and the time elapsed on `out` while the body runs
    (one request that may take long: no count to show), erased after it. The
    same rules as `Progress`: `mode` True at once, None only on a terminal
    and once the wait has lasted AUTO_SHOW_AFTER_S, False never."""
    if not (mode if mode is not None else isatty(out)):
        yield
        return
    spinner = RichProgress(
        SpinnerColumn(),
        TextColumn(message, markup=False),
        TimeElapsedColumn(),
        console=_console(out),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    spinner.add_task("", total=None)
    lock = threading.Lock()
    state = {"shown": False, "over": False}

    def show() -> None:
        with lock:
            if not state["over"]:
                spinner.start()  # rich's refresh thread animates it from here
                state["shown"] = True

    timer = threading.Timer(AUTO_SHOW_AFTER_S, show)
    timer.daemon = True
    if mode:
        show()
    else:
        timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["over"] = True
            if state["shown"]:
                spinner.stop()


def _console(out: TextIO) -> Console:
    # Only called when drawing is on: forced, or `out` is a terminal.
    return Console(file=out, force_terminal=True, highlight=False, markup=False, emoji=False)


def isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
