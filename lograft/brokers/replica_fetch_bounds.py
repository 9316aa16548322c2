"""What a leader serves of a follower's fetch, whatever the fetch asks.

A replica fetch comes from anyone holding the cluster secret, over
`POST /internal/v1/replica-fetch` or a replica stream. Served as asked, one
small fetch could make the leader read and answer its whole log (a
`max_bytes` of 2^62, or one partition named a hundred times, each
occurrence read again: an 8.5 KB fetch answered with 150 MB). So the leader
serves at most its own replica fetch sizes (`[broker]
replica_fetch_max_bytes`, `replica_fetch_partition_max_bytes`: a follower
asking more gets answers of those sizes, and still progresses), and refuses
a fetch naming one partition twice, or more than
`replica_fetch_partitions_max` partitions (by default more than a request
within `[http] request_bytes_max` can name; the leader decides a fetch's
partitions in slices between event-loop turns, replica_manager.py).
"""

from __future__ import annotations

import dataclasses

from lograft.errors import InvalidRequestError
from lograft.protocol.fetch_wire import ReplicaFetchRequest


def within_bounds(
    req: ReplicaFetchRequest, *, max_bytes: int, partition_max_bytes: int, partitions_max: int
) -> ReplicaFetchRequest:
    """`req` with its sizes capped at `max_bytes` / `partition_max_bytes`
    (`req` itself when within them); InvalidRequestError when it names (and
    forgets) more than `partitions_max` partitions, or a partition twice."""
    named = len(req.partitions) + len(req.forgotten)
    if named > partitions_max:
        raise InvalidRequestError(
            f"a replica fetch names at most {partitions_max} partitions "
            f"([broker] replica_fetch_partitions_max); this one names {named}"
        )
    twice = _named_twice(req)
    if twice is not None:
        raise InvalidRequestError(
            f"a replica fetch names partition {twice[0]}-{twice[1]} more than once; "
            "name each partition once"
        )
    capped_max = min(req.max_bytes, max_bytes)
    capped_partition = min(req.partition_max_bytes, partition_max_bytes)
    if capped_max == req.max_bytes and capped_partition == req.partition_max_bytes:
        return req
    return dataclasses.replace(req, max_bytes=capped_max, partition_max_bytes=capped_partition)


def _named_twice(req: ReplicaFetchRequest) -> tuple[str, int] | None:
    seen: set[tuple[str, int]] = set()
    for p in req.partitions:
        key = (p.topic, p.partition)
        if key in seen:
            return key
        seen.add(key)
    return None


__all__ = ["within_bounds"]
