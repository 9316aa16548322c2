"""What every group coordinator handler returns: records to append, a response.

Handlers are pure: they read the `CoordinatorState` (and a group's soft
`GroupSessions`, and `now_ms`) and return a `GroupResult`. The runtime appends
`records` to the group's `__consumer_offsets` partition as one batch (none when
the tuple is empty) with acks=all, replays them into the state, and answers
with `response` once they are committed: the response describes the state
after the records. A refused request raises a `LograftError` and returns no
records.

`sessions` is the group's new soft state when the handler changed it (None:
unchanged); the runtime swaps it in at once, whether or not records follow.

Because handlers read the state the previous handler's records produced, the
runtime runs the handlers of one coordinator partition one at a time and
replays each result before the next handler runs. If an append fails, the
records may or may not be in the log: the runtime rebuilds the state from the
log (or rolls back to a `CoordinatorState.copy()` and re-reads), never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from lograft.brokers.groups.records import GroupRecord
from lograft.brokers.groups.sessions import GroupSessions

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupResult(Generic[T]):
    records: tuple[GroupRecord, ...]
    response: T
    sessions: GroupSessions | None = None
