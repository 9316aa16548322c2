"""What every controller handler returns: records to append, and a response.

Handlers are pure: they read an image (and soft state, and `now_ms`) and return
a `ControllerResult`. The runtime appends `records` as one atomic batch (none
when the tuple is empty), waits until the batch is committed and applied, and
only then sends `response`: the response describes the state *after* the
records. A rejected request raises a `LograftError` and appends nothing.

`sessions` is the new soft state when the handler changed it (None: unchanged);
the runtime swaps it in at once, whether or not records follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from lograft.quorum.records import Record
from lograft.quorum.sessions import BrokerSessions

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: tuple[Record, ...]
    response: T
    sessions: BrokerSessions | None = None
