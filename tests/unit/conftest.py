"""Every unit test must end the threads it started.

A non-daemon thread left running (an unclosed thread pool: a RecordWork, an
executor) keeps the interpreter from exiting and piles up across the suite.
After each test, threads it started that are still alive get a bounded join
(a pool told to shut down needs a moment to see it); any still alive then
fails the test, by name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

# Total time a test's leftover threads get to finish, however many there are:
# enough for a shut-down pool on a loaded 2-core machine, short enough that a
# real leak fails fast.
THREAD_JOIN_DEADLINE_S = 10.0


def _live_non_daemon() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive() and not t.daemon}


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = _live_non_daemon()
    yield
    deadline = time.monotonic() + THREAD_JOIN_DEADLINE_S
    for thread in _live_non_daemon() - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaked = sorted(t.name for t in _live_non_daemon() - before)
    if leaked:
        pytest.fail(
            f"the test left {len(leaked)} non-daemon thread(s) running: {', '.join(leaked)}",
            pytrace=False,
        )
