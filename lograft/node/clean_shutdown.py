"""The clean-shutdown file: how a restarted broker tells the controller whether
its logs may have lost records (Kafka's KIP-966 unclean shutdown detection).

A broker that stopped cleanly (controlled shutdown, then every log flushed and
closed) writes `clean-shutdown` in its data directory, holding the broker
epoch it stopped in. At the next start the file is read and removed (and the
removal made durable) before any log is opened, so any later end of this
process, kill -9 or power cut, leaves no file. The registration then carries
`previous_broker_epoch`: the epoch read, or -1 when there was no file. The
controller takes a registration whose previous epoch is not the replaced
incarnation's as unclean (lograft/quorum/broker_lifecycle.py).

File format: the epoch as decimal ASCII, written atomically (tmp, fsync,
rename, directory fsync: storage/checkpoint.write_atomic). Unreadable content
counts as no file: unclean, the cautious side.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from lograft.storage import checkpoint

log = logging.getLogger(__name__)

FILE_NAME = "clean-shutdown"
UNCLEAN = -1


def take_previous_epoch(data_dir: Path) -> int:
    """The epoch the last clean shutdown recorded (UNCLEAN if none), and the file
    gone for good: from here on, a crash must read as unclean."""
    path = data_dir / FILE_NAME
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return UNCLEAN
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("unreadable %s (%s): taking the last shutdown as unclean", path, exc)
        text = ""
    path.unlink()
    checkpoint.fsync_dir(data_dir)
    with contextlib.suppress(ValueError):
        epoch = int(text)
        if epoch >= 0:
            return epoch
    return UNCLEAN


def record_clean_shutdown(data_dir: Path, broker_epoch: int) -> None:
    """Say the logs were closed cleanly under `broker_epoch` (call only then)."""
    if broker_epoch < 0:
        return  # never registered: nothing to vouch for with the controller
    checkpoint.write_atomic(data_dir / FILE_NAME, str(broker_epoch).encode("ascii"))
