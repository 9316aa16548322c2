"""What a chaos run recorded: the plain data the checker (tests/chaos/checker.py) judges.

Every value a writer sends is unique ("<writer>-<seq>"), so a value names
exactly one send. Times are `time.monotonic()` seconds of the test process,
taken just before a send was handed to the client or the HTTP request
(`invoked_s`) and when its outcome was known (`completed_s`).

Outcomes follow Jepsen's: `OK` is an acknowledgement with the offset the
broker reported; `FAIL` is a definite failure (the request never reached a
broker, or the broker said nothing was written, e.g. NOT_ENOUGH_REPLICAS);
`UNKNOWN` is everything else (a timeout, a broken connection, a client closed
with the record in flight): the value may or may not be in the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(enum.Enum):
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Send:
    writer: str
    idempotent: bool
    value: str
    partition: int
    invoked_s: float
    completed_s: float
    outcome: Outcome
    offset: int | None = None  # OK only
    # The node the request went to, when the writer knows it (raw HTTP writers).
    node: int | None = None
    error: str | None = None  # the error code of FAIL / UNKNOWN


@dataclass(frozen=True)
class Read:
    """One record a consumer returned during the run, in the order it returned them."""

    reader: str
    partition: int
    offset: int
    value: str
    at_s: float


@dataclass(frozen=True)
class Isolation:
    """A window in which `node` was cut off from every other node but not from clients:
    nothing it answers for a send invoked inside the window may be acknowledged."""

    node: int
    from_s: float
    until_s: float


@dataclass(frozen=True)
class StaleWindow:
    """A window in which `node`, restarted after it led `partition`, could not reach
    the metadata quorum (its Raft links held) while clients reached it: its
    metadata is its journal's stale image, so nothing it answers for a send
    invoked inside the window may be acknowledged (issue 13)."""

    node: int
    partition: int
    from_s: float
    until_s: float


@dataclass(frozen=True)
class LeaderKill:
    """`node` was killed at `at_s` while leading `partitions`: produce to them must
    succeed again within the failover budget."""

    node: int
    partitions: tuple[int, ...]
    at_s: float


@dataclass(frozen=True)
class Stall:
    """`node` stopped answering at `at_s` (SIGSTOP) without closing its connections:
    `partitions`, which it did not lead, must acknowledge a send invoked after
    `at_s` within the failover budget (a stopped node must not stall the rest)."""

    node: int
    partitions: tuple[int, ...]
    at_s: float


# partition -> offset -> value
PartitionLog = dict[int, dict[int, str]]


@dataclass
class History:
    topic: str
    partitions: list[int]
    start_s: float
    end_s: float  # when the writers were stopped
    sends: list[Send] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    # The final read of every partition from its start, after healing.
    final: PartitionLog = field(default_factory=dict)
    high_watermarks: dict[int, int] = field(default_factory=dict)
    # partition -> its log start offset when it was finally read (0 if absent).
    log_start_offsets: dict[int, int] = field(default_factory=dict)
    # The topic's cleanup policy compacts: offsets may then be missing below the HW.
    compacted: bool = False
    # node -> its replicas' records below the final high watermark (from disk).
    replicas: dict[int, PartitionLog] = field(default_factory=dict)
    isolations: list[Isolation] = field(default_factory=list)
    stale_windows: list[StaleWindow] = field(default_factory=list)
    leader_kills: list[LeaderKill] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
