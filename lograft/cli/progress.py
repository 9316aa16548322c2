"""A one-line progress display on stderr, redrawn in place, at most every
`REDRAW_INTERVAL_S`; the clock is passed in so tests control time."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

REDRAW_INTERVAL_S = 0.2
# `auto` mode shows the bar only once a run has lasted this long (a large input).
AUTO_SHOW_AFTER_S = 1.0
BAR_WIDTH = 24


class Progress:
    def __init__(
        self,
        out: TextIO,
        *,
        mode: bool | None,
        total_bytes: int | None,
        clock: Callable[[], float],
    ) -> None:
        """`mode` True: always; False: never; None: only if `out` is a terminal and the
        run lasts longer than AUTO_SHOW_AFTER_S."""
        self.out = out
        self.enabled = mode if mode is not None else _isatty(out)
        self.show_after_s = 0.0 if mode else AUTO_SHOW_AFTER_S
        self.total_bytes = total_bytes if total_bytes else None
        self.clock = clock
        self.started = clock()
        self._drawn_at: float | None = None
        self._width = 0

    def rate(self, records: int) -> float:
        elapsed = self.clock() - self.started
        return records / elapsed if elapsed > 0 else 0.0

    def update(self, records: int, bytes_read: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.show_after_s:
            return
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_INTERVAL_S:
            return
        self._drawn_at = now
        self._draw(self.line(records, bytes_read))

    def line(self, records: int, bytes_read: int) -> str:
        text = f"{records:,} records sent  {self.rate(records):,.0f} records/s"
        if self.total_bytes is None:
            return text
        fraction = min(bytes_read / self.total_bytes, 1.0)
        filled = int(fraction * BAR_WIDTH)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return f"[{bar}] {fraction * 100:3.0f}%  {text}"

    def _draw(self, text: str) -> None:
        pad = max(self._width - len(text), 0)
        self.out.write("\r" + text + " " * pad)
        self.out.flush()
        self._width = len(text)

    def clear(self) -> None:
        """Erase the bar so the summary line starts on a clean line."""
        if self._drawn_at is not None:
            self.out.write("\r" + " " * self._width + "\r")
            self.out.flush()
            self._drawn_at = None
            self._width = 0


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
