"""How long the application has gone without calling poll (Kafka's
`max.poll.interval.ms`).

A member whose application stopped polling (stuck processing) would keep its
partitions forever, because heartbeats run in the background. The heartbeat
loop asks this timer whether poll is overdue and, if so, leaves the group.

Time spent waiting for records *inside* poll does not count (Kafka bounds
that wait by the poll deadline and resets the timer; here the wait is simply
excluded), but time in rebalance callbacks does, as in Kafka: a callback that
hangs is as stuck as a program that does not poll.

Pure: the clock (monotonic seconds) is injected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


class PollTimer:
    def __init__(self, max_interval_ms: int, clock: Callable[[], float]) -> None:
        self.max_interval_ms = max_interval_ms
        self.clock = clock
        self.last_poll = clock()
        self._waiting = 0  # polls now waiting for records (concurrent async polls)

    def polled(self) -> None:
        """The application is in poll now."""
        self.last_poll = self.clock()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Poll is waiting for records: not overdue meanwhile; the time
        counts again from when the wait ends."""
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            self.polled()

    @property
    def poll_waiting(self) -> bool:
        return self._waiting > 0

    def since_poll_ms(self) -> int:
        return int((self.clock() - self.last_poll) * 1000)

    def overdue(self) -> bool:
        """True once max_interval_ms passed since the last poll (and poll is
        not waiting for records now)."""
        return not self._waiting and self._left_s() <= 0.0

    def check_in_s(self) -> float:
        """How long the heartbeat loop may sleep before it must look again:
        until poll becomes overdue, or, while poll waits for records, the
        whole interval (the wait ends no earlier than now, and then the whole
        interval runs). Above 0 unless overdue, so a loop sleeping this never
        spins."""
        if self._waiting:
            return self.max_interval_ms / 1000
        return max(0.0, self._left_s())

    def _left_s(self) -> float:
        return self.last_poll + self.max_interval_ms / 1000 - self.clock()
