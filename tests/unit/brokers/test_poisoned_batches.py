"""A batch producer state cannot use never stops a replica.

Regression (issue 9, part 1): a leader before the client rules accepted a
batch with producer id -5. Followers appended it, then raised `invalid
producer id -5` recording producer state, for it and every later batch of
the fetch; after a restart, opening that log raised, and the node failed
every metadata apply (all partitions, not just this one). Logs written then
still exist: replicas must replicate and open them, skipping such batches for
producer state (logged once, counted).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lograft.brokers import producer_state
from lograft.brokers.partition import Assignment, Partition, PartitionSettings
from lograft.brokers.producer_state import ProducerBatch, ProducerStateManager
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Log
from tests.batch_forge import forge, records_batch

TP = TopicPartition("t", 0)
OTHER = TopicPartition("u", 0)

# What a pre-rules leader wrote: producer ids, epochs and sequences no state holds.
POISON = [
    forge(records_batch(), producer_id=-5, producer_epoch=0, base_sequence=0),
    forge(records_batch(), producer_id=3, producer_epoch=-1, base_sequence=0),
    forge(records_batch(), producer_id=3, producer_epoch=0, base_sequence=-9),
]


def poisoned_log(directory: Path) -> Log:
    """A log holding a good idempotent batch, the poison, then another good
    batch of the same producer (written straight to the log, as the old
    leader did: the client rules live on the leader's client path)."""
    log = Log(directory)
    log.append(records_batch(producer=(7, 0, 0)), leader_epoch=0)
    for bad in POISON:
        log.append(bad, leader_epoch=0)
    log.append(records_batch(producer=(7, 0, 2)), leader_epoch=0)
    return log


def replica(directory: Path, broker: int) -> Partition:
    return Partition(TP, Log(directory), broker, PartitionSettings(min_insync_replicas=1))


def test_a_follower_replicates_it_and_records_every_other_batch(tmp_path: Path) -> None:
    leader = Partition(TP, poisoned_log(tmp_path / "leader"), 1, PartitionSettings())
    leader.become_leader(Assignment((1, 2), (1, 2), 1, 0, 0), now_ms=0)
    follower = replica(tmp_path / "follower", 2)
    follower.become_follower(Assignment((1, 2), (1, 2), 1, 0, 0))
    res = leader.on_follower_fetch(2, follower.follower_fetch_request(), 1 << 20, 0)
    follower.apply_fetch_response(
        res.data,
        leader_high_watermark=res.high_watermark,
        leader_log_start_offset=res.log_start_offset,
        diverging=None,
    )
    assert follower.log.log_end_offset == leader.log.log_end_offset == 10
    # The batch after the poison was recorded: producer 7's state is whole.
    seven = follower.producers.producer(7)
    assert seven is not None
    assert [(b.first_seq, b.first_offset) for b in seven.batches] == [(0, 0), (2, 8)]
    assert follower.producers.unusable_batches == len(POISON)


def test_the_log_opens_after_a_restart_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    poisoned_log(tmp_path / "t-0").close()
    with caplog.at_level(logging.WARNING, logger=producer_state.__name__):
        reopened = replica(tmp_path / "t-0", 1)
    assert reopened.producers.unusable_batches == len(POISON)
    seven = reopened.producers.producer(7)
    assert seven is not None and len(seven.batches) == 2
    warnings = [r for r in caplog.records if r.name == producer_state.__name__]
    assert len(warnings) == 1
    assert "t-0" in warnings[0].getMessage() and "producer id -5" in warnings[0].getMessage()
    # It serves: the leader appends after it, and producer 7 goes on in sequence.
    reopened.become_leader(Assignment((1,), (1,), 1, 1, 0), now_ms=0)
    reopened.append_records(records_batch(producer=(7, 0, 4)), Acks.LEADER)


def test_rebuilds_count_afresh() -> None:
    state = ProducerStateManager(owner="t-0")
    bad = ProducerBatch(-5, 0, 0, 0, 1)
    state.rebuild_from_batches([bad, ProducerBatch(1, 0, 0, 2, 0)])
    state.rebuild_from_batches([bad, ProducerBatch(1, 0, 0, 2, 0)])
    assert state.unusable_batches == 1
    assert state.producer(1) is not None
    # The live path still refuses what a replay skips.
    with pytest.raises(Exception, match="invalid producer id"):
        state.record(-5, 0, 0, 0, 3, 3, 0)


async def test_a_node_holding_such_a_log_applies_metadata_after_a_restart(
    tmp_path: Path,
) -> None:
    meta = {
        TP: PartitionMeta("id-t", Assignment((1,), (1,), 1, 1, 0)),
        OTHER: PartitionMeta("id-u", Assignment((1,), (1,), 1, 1, 0)),
    }
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    rm.apply_metadata(meta)
    await rm.stop()
    log = Log(tmp_path / "logs" / "t-0")
    for bad in POISON:
        log.append(bad, leader_epoch=1)
    log.close()

    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    try:
        await rm.open_logs(meta)
        rm.apply_metadata(meta)
        assert rm.failed_replicas() == {}
        assert {tp: p.role.value for tp, p in rm.partitions.items()} == {
            TP: "leader",
            OTHER: "leader",
        }
        await rm.produce(TP, records_batch(), Acks.ALL)
    finally:
        await rm.stop()


async def test_any_failure_building_one_replica_is_contained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole class: whatever one replica's log makes the rebuild raise,
    that replica alone is failed (reported, logged once, its log closed) and
    every other partition is applied."""
    meta = {
        TP: PartitionMeta("id-t", Assignment((1,), (1,), 1, 1, 0)),
        OTHER: PartitionMeta("id-u", Assignment((1,), (1,), 1, 1, 0)),
    }
    real = ProducerStateManager.rebuild_from_batches
    opened: list[Log] = []
    real_log_init = Log.__init__

    def remember(self: Log, *args: object, **kwargs: object) -> None:
        real_log_init(self, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(self)

    def explode(self: ProducerStateManager, batches: object, now_ms: int | None = None) -> None:
        if self.owner == "t-0":
            raise RuntimeError("a bug meeting this log's content")
        real(self, batches, now_ms)  # type: ignore[arg-type]

    monkeypatch.setattr(ProducerStateManager, "rebuild_from_batches", explode)
    monkeypatch.setattr(Log, "__init__", remember)
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    try:
        with caplog.at_level(logging.ERROR):
            await rm.open_logs(meta)
            rm.apply_metadata(meta)
            rm.apply_metadata(dict(meta))  # the same metadata: not tried, not logged again
        assert rm.failed_replicas() == {"t-0": "RuntimeError: a bug meeting this log's content"}
        assert set(rm.partitions) == {OTHER}
        assert rm.partitions[OTHER].is_leader
        assert [log.closed for log in opened if log.directory.name == "t-0"] == [True]
        assert sum("replica t-0 failed" in r.getMessage() for r in caplog.records) == 1
    finally:
        await rm.stop()
