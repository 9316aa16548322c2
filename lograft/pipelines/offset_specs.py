"""Turning `startingOffsets` / `endingOffsets` / timestamps into offsets.

An `OffsetSpec` (options.py) says where a read starts or ends; here it is
resolved against the partitions a subscription covers now and their bounds
(log start offset, high watermark), with Kafka's rules:

- earliest = the log start offset; latest = the high watermark;
- per-partition JSON must name every partition the subscription covers
  (-2 earliest, -1 latest), as Kafka asks; an offset past the high
  watermark is refused (it names records that do not exist);
- a timestamp resolves to the first record at or after it. When no record
  is that late: a start fails (startingOffsetsByTimestampStrategy=error, the
  default) or takes latest (=latest); an end takes latest.
"""

from __future__ import annotations

from collections.abc import Mapping

from lograft.errors import InvalidConfigError
from lograft.pipelines.cluster_lookup import Bounds, ClusterLookup
from lograft.pipelines.offsets import PartitionOffsets
from lograft.pipelines.options import EARLIEST, LATEST, OffsetSpec
from lograft.protocol.topic_partition import TopicPartition

EARLIEST_SPEC = OffsetSpec("earliest", option="startingOffsets")
LATEST_SPEC = OffsetSpec("latest", option="endingOffsets")


def _names(tps: object) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(tps)) + "]"  # type: ignore[call-overload]


def _check_covers(
    spec: OffsetSpec, given: Mapping[TopicPartition, int], tps: list[TopicPartition]
) -> None:
    if set(given) != set(tps):
        raise InvalidConfigError(
            f"If {spec.option} contains specific offsets, you must specify all "
            "TopicPartitions. Use -1 for latest, -2 for earliest. "
            f"Specified: {_names(given)} Assigned: {_names(tps)}",
            setting=spec.option,
        )


def resolve(
    spec: OffsetSpec,
    tps: list[TopicPartition],
    bounds: Mapping[TopicPartition, Bounds],
    lookup: ClusterLookup,
    *,
    is_start: bool,
    no_match: str,
) -> PartitionOffsets:
    """The offset of every partition in `tps` that `spec` names."""
    if spec.kind == "earliest":
        return {tp: bounds[tp].earliest for tp in tps}
    if spec.kind == "latest":
        return {tp: bounds[tp].latest for tp in tps}
    if spec.kind == "offsets":
        given = spec.per_partition()
        _check_covers(spec, given, tps)
        out: PartitionOffsets = {}
        for tp in tps:
            off = given[tp]
            if off == EARLIEST:
                out[tp] = bounds[tp].earliest
            elif off == LATEST:
                out[tp] = bounds[tp].latest
            elif off > bounds[tp].latest:
                raise InvalidConfigError(
                    f"{spec.option} for {tp} is {off}, past its high watermark "
                    f"{bounds[tp].latest}: there is no such record yet",
                    setting=spec.option,
                )
            else:
                out[tp] = off
        return out
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        wanted = dict.fromkeys(tps, spec.timestamp)
    else:
        wanted = spec.per_partition()
        _check_covers(spec, wanted, tps)
    found = lookup.offsets_for_times(wanted) if wanted else {}
    out = {}
    for tp in tps:
        matched = found[tp]
        if matched is not None:
            out[tp] = matched
        elif is_start and no_match == "error":
            raise InvalidConfigError(
                f"No offset matched from request of topic-partition {tp} and timestamp "
                f"{wanted[tp]} ({spec.option}): no record is that late. Set "
                "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead.",
                setting=spec.option,
            )
        else:
            out[tp] = bounds[tp].latest
    return out
