"""The process's file-descriptor limit, raised to what the node's settings need.

Every client connection, open segment file and Raft link is a descriptor. A
node whose soft limit (often 1024) is below `[http] connections_max` plus its
open files would fail to accept (asyncio then logs an ERROR per attempt) or to
open a segment long before its connection cap applies. So at start the node
raises its soft limit towards what it needs, up to the hard limit (as the Go
runtime does for every program), and warns when even that is too low.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# Descriptors for everything but client connections and segment files (Raft
# links, node-to-node connection pools, the metadata journal, the runtime), a
# generous guess.
OTHER_DESCRIPTORS = 1024


def ensure_fd_limit(needed: int) -> int:
    """Raise the soft RLIMIT_NOFILE to `needed` if it is lower (never above the
    hard limit); return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the open-files limit from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)
    if soft < needed:
        log.warning(
            "this process may open %d files, but its settings need about %d "
            "([http] connections_max + [broker] max_open_files + %d): raise the limit "
            "(ulimit -n, or LimitNOFILE / --ulimit nofile) or lower connections_max",
            soft,
            needed,
            OTHER_DESCRIPTORS,
        )
    return soft
