"""A metadata commit costs the broker in proportion to what it changed.

`hosted_partitions` hands back the previous answer's `PartitionMeta` objects
for partitions whose state did not change, and `ReplicaManager.apply_metadata`
reconciles only partitions whose meta is not the one it last applied.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from lograft.brokers.metadata_sync import hosted_partitions
from lograft.brokers.partition import Assignment, Partition
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.image import MetadataImage, PartitionState, TopicImage
from lograft.quorum.records import ConfigResourceType

BROKER = 7  # an id no other test uses: hosted_partitions keeps one answer per broker


def image_of(
    states: tuple[PartitionState, ...], offset: int, retention: str = "1000"
) -> MetadataImage:
    return MetadataImage(
        offset=offset,
        topics=MappingProxyType({"id-w": TopicImage("w", "id-w", states)}),
        topic_ids=MappingProxyType({"w": "id-w"}),
        configs=MappingProxyType(
            {(ConfigResourceType.TOPIC, "w"): MappingProxyType({"retention_ms": retention})}
        ),
    )


def states(count: int) -> tuple[PartitionState, ...]:
    # Partitions alternate between being led here and led by broker 8;
    # every third one has no replica here at all.
    return tuple(
        PartitionState(
            "id-w",
            p,
            (8, 9, 10) if p % 3 == 2 else (BROKER, 8, 9),
            (8, 9, 10) if p % 3 == 2 else (BROKER, 8, 9),
            8 if p % 3 == 2 else (BROKER if p % 2 == 0 else 8),
            0,
            0,
        )
        for p in range(count)
    )


def moved(parts: tuple[PartitionState, ...], index: int) -> tuple[PartitionState, ...]:
    """`parts` with partition `index`'s leadership moved (a new state object)."""
    p = parts[index]
    new_leader = 9 if p.leader != 9 else BROKER
    changed = replace(
        p, leader=new_leader, leader_epoch=p.leader_epoch + 1, partition_epoch=p.partition_epoch + 1
    )
    return (*parts[:index], changed, *parts[index + 1 :])


def test_unchanged_partitions_keep_their_meta_objects():
    first_states = states(30)
    first = hosted_partitions(image_of(first_states, 1), BROKER)
    assert len(first) == 20  # partitions 2, 5, 8, ... have no replica here
    second_states = moved(first_states, 4)
    second = hosted_partitions(image_of(second_states, 2), BROKER)
    assert second.keys() == first.keys()
    changed = [tp for tp in second if second[tp] is not first[tp]]
    assert changed == [TopicPartition("w", 4)]
    assert second[TopicPartition("w", 4)].assignment.leader == 9


def test_an_unchanged_topic_is_reused_whole_and_a_config_change_rebuilds_it():
    parts = states(9)
    first = hosted_partitions(image_of(parts, 1), BROKER)
    same = hosted_partitions(image_of(parts, 2), BROKER)
    assert all(same[tp] is first[tp] for tp in first)
    reconfigured = hosted_partitions(image_of(parts, 3, retention="5"), BROKER)
    assert all(reconfigured[tp] is not first[tp] for tp in first)
    assert all(m.topic_config == {"retention_ms": "5"} for m in reconfigured.values())


async def test_apply_reconciles_only_changed_partitions(tmp_path: Path, monkeypatch):
    rm = ReplicaManager(BROKER, tmp_path / "b", BrokerSettings())
    await rm.start()
    try:
        parts = states(60)
        rm.apply_metadata(hosted_partitions(image_of(parts, 1), BROKER))
        assert len(rm.partitions) == 40
        leaders = sum(p.is_leader for p in rm.partitions.values())
        assert leaders == 20

        transitions: list[TopicPartition] = []
        real_leader, real_follower = Partition.become_leader, Partition.become_follower

        def spy_leader(self: Partition, a, now_ms):  # type: ignore[no-untyped-def]
            transitions.append(self.tp)
            real_leader(self, a, now_ms)

        def spy_follower(self: Partition, a):  # type: ignore[no-untyped-def]
            transitions.append(self.tp)
            real_follower(self, a)

        monkeypatch.setattr(Partition, "become_leader", spy_leader)
        monkeypatch.setattr(Partition, "become_follower", spy_follower)
        parts = moved(parts, 0)  # led here -> led by 9
        rm.apply_metadata(hosted_partitions(image_of(parts, 2), BROKER))
        assert transitions == [TopicPartition("w", 0)]
        assert not rm.partitions[TopicPartition("w", 0)].is_leader
        transitions.clear()
        rm.apply_metadata(hosted_partitions(image_of(parts, 3), BROKER))
        assert transitions == []
    finally:
        await rm.stop()


async def test_new_leaderships_write_their_epoch_entries_off_the_loop(tmp_path: Path):
    rm = ReplicaManager(BROKER, tmp_path / "b", BrokerSettings())
    await rm.start()
    try:
        rm.apply_metadata(hosted_partitions(image_of(states(12), 1), BROKER))
        led = [p for p in rm.partitions.values() if p.is_leader]
        assert led and all(p.log.epochs.latest_epoch == 0 for p in led)
        assert rm._epoch_flush is not None
        await rm._epoch_flush
        assert not any(p.log.epochs.dirty for p in led)
        for p in led:
            text = (p.log.directory / "leader-epoch-checkpoint").read_text()
            assert text == "0\n1\n0 0\n"
    finally:
        await rm.stop()


async def test_created_replicas_are_frozen_out_of_the_cyclic_gc(tmp_path: Path):
    """A node freezes the heap after creating replicas (full collections over
    2,000 replicas stalled its loop and Raft thread for up to a second). That
    is only free of leaks while removing a replica leaves no cyclic garbage."""
    rm = ReplicaManager(BROKER, tmp_path / "b", BrokerSettings(), gc_freeze=True)
    await rm.start()
    try:
        gc.unfreeze()
        rm.apply_metadata(hosted_partitions(image_of(states(30), 1), BROKER))
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        gc.collect()
        rm.apply_metadata({})
        assert not rm.partitions
        assert gc.collect() == 0, "removing replicas left cyclic garbage"
    finally:
        gc.unfreeze()
        await rm.stop()


async def test_without_the_setting_nothing_is_frozen(tmp_path: Path):
    rm = ReplicaManager(BROKER, tmp_path / "b", BrokerSettings())
    await rm.start()
    try:
        gc.unfreeze()
        rm.apply_metadata(hosted_partitions(image_of(states(3), 1), BROKER))
        assert gc.get_freeze_count() == 0
    finally:
        await rm.stop()


async def test_a_partition_that_fails_to_open_does_not_stop_the_others(tmp_path: Path):
    """One replica's failure is its own: the apply goes on with the others
    (roles, fetchers), reports the failed one, and forgets it (and its
    directory) once it is no longer wanted here."""

    async def never(leader: int, body: bytes, timeout_s: float) -> bytes:
        await asyncio.Event().wait()  # a long-poll that never answers
        return b""

    rm = ReplicaManager(BROKER, tmp_path / "b", BrokerSettings(), fetch_transport=never)
    await rm.start()
    try:
        followed = TopicPartition("w", 0)
        broken = TopicPartition("w", 1)
        wanted = {
            broken: PartitionMeta("id-w", Assignment((9, BROKER), (9, BROKER), 9, 0, 0)),
            followed: PartitionMeta("id-w", Assignment((8, BROKER), (8, BROKER), 8, 0, 0)),
        }
        real_open = rm._open_log
        opens: list[TopicPartition] = []

        def open_or_fail(tp: TopicPartition, meta: PartitionMeta):  # type: ignore[no-untyped-def]
            opens.append(tp)
            if tp == broken:
                (rm.logs_dir / "w-1").mkdir(parents=True, exist_ok=True)
                raise OSError(5, "Input/output error")
            return real_open(tp, meta)

        rm._open_log = open_or_fail  # type: ignore[method-assign]
        rm.apply_metadata(wanted)
        assert rm.partitions[followed].role.value == "follower"
        assert rm.fetcher.leaders == {8}
        assert broken not in rm.partitions
        assert rm.failed_replicas() == {"w-1": "OSError: [Errno 5] Input/output error"}
        # Unchanged metadata is not tried again (no log line, no file work
        # per metadata commit) ...
        rm.apply_metadata(dict(wanted))
        assert opens.count(broken) == 1
        # ... changed metadata is, and a replica that opens is well again.
        rm._open_log = real_open  # type: ignore[method-assign]
        moved = PartitionMeta("id-w", Assignment((9, BROKER), (9, BROKER), 9, 1, 1))
        rm.apply_metadata({**wanted, broken: moved})
        assert rm.partitions[broken].role.value == "follower"
        assert rm.failed_replicas() == {}
        # A failed replica no longer wanted here is forgotten with its files.
        rm._open_log = open_or_fail  # type: ignore[method-assign]
        rm.apply_metadata({followed: wanted[followed]})
        rm.apply_metadata(wanted)
        assert rm.failed_replicas() == {"w-1": "OSError: [Errno 5] Input/output error"}
        rm.apply_metadata({followed: wanted[followed]})
        assert rm.failed_replicas() == {}
        assert not (rm.logs_dir / "w-1").exists()
    finally:
        await rm.stop()
