"""A partition replica as leader and follower, replicating in-process."""

from __future__ import annotations

import asyncio

import pytest

from lograft.brokers.partition import Assignment, Partition, PartitionSettings, Role
from lograft.errors import NotEnoughReplicasError, NotLeaderOrFollowerError
from lograft.protocol.batch import RecordInput, build_batch, iter_records
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Log

TP = TopicPartition("t", 0)


def _batch(n: int = 3, pid: int = -1, epoch: int = -1, seq: int = -1, tag: str = "v") -> bytes:
    recs = [RecordInput(f"{tag}{i}".encode(), b"k") for i in range(n)]
    return build_batch(
        recs, timestamp_ms=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def _replica(tmp_path, broker: int, **settings) -> Partition:
    log = Log(tmp_path / f"b{broker}" / "t-0")
    return Partition(TP, log, broker, PartitionSettings(**settings))


def _assign(leader: int, epoch: int, isr=(1, 2, 3), pepoch: int = 0) -> Assignment:
    return Assignment((1, 2, 3), tuple(isr), leader, epoch, pepoch)


def _replicate(leader: Partition, follower: Partition, now: int = 0) -> None:
    """One follower fetch round trip."""
    req = follower.follower_fetch_request()
    res = leader.on_follower_fetch(follower.broker_id, req, 1 << 20, now)
    assert res.error is None, res.error
    follower.apply_fetch_response(
        res.data,
        leader_high_watermark=res.high_watermark,
        leader_log_start_offset=res.log_start_offset,
        diverging=res.diverging,
    )


async def test_acks_all_waits_for_the_isr_and_followers_catch_up(tmp_path):
    leader, f2, f3 = (_replica(tmp_path, b) for b in (1, 2, 3))
    leader.become_leader(_assign(1, 1), now_ms=0)
    f2.become_follower(_assign(1, 1))
    f3.become_follower(_assign(1, 1))
    res = leader.append_records(_batch(), Acks.ALL)
    assert (res.first_offset, res.last_offset) == (0, 2)
    waiter = leader.wait_for_high_watermark(res.last_offset + 1)
    assert leader.high_watermark == 0 and not waiter.done()
    assert leader.read_for_consumer(0, 1 << 20) == b"", "consumers never see above the HW"
    for f in (f2, f3):
        _replicate(leader, f)  # copies the batch
    assert not waiter.done(), "the leader learns follower LEOs from their next fetch"
    for f in (f2, f3):
        _replicate(leader, f)
    await asyncio.wait_for(waiter, 1)
    assert leader.high_watermark == 3
    assert f2.log.log_end_offset == 3
    assert f2.high_watermark == 0, "f2 fetched before f3 caught up"
    _replicate(leader, f2)
    assert f2.high_watermark == 3, "followers learn the HW from the next fetch"
    assert [r.value for r in iter_records(leader.read_for_consumer(0, 1 << 20))] == [
        b"v0",
        b"v1",
        b"v2",
    ]


def test_acks_all_refused_below_min_insync_replicas_and_nothing_written(tmp_path):
    leader = _replica(tmp_path, 1)
    leader.become_leader(_assign(1, 1, isr=(1,)), now_ms=0)
    with pytest.raises(NotEnoughReplicasError):
        leader.append_records(_batch(), Acks.ALL)
    assert leader.log.log_end_offset == 0
    leader.append_records(_batch(), Acks.LEADER)
    assert leader.log.log_end_offset == 3
    assert leader.high_watermark == 0, "HW never covers what fewer than min ISR hold"


def test_idempotent_retry_returns_the_original_offsets(tmp_path):
    leader = _replica(tmp_path, 1, min_insync_replicas=1)
    leader.become_leader(_assign(1, 1, isr=(1,)), now_ms=0)
    first = leader.append_records(_batch(pid=7, epoch=0, seq=0), Acks.LEADER)
    leader.append_records(_batch(pid=8, epoch=0, seq=0), Acks.LEADER)
    again = leader.append_records(_batch(pid=7, epoch=0, seq=0), Acks.LEADER)
    assert again.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert leader.log.log_end_offset == 6


async def test_leadership_loss_fails_waiters_and_refuses_produce(tmp_path):
    leader = _replica(tmp_path, 1)
    leader.become_leader(_assign(1, 1), now_ms=0)
    leader.append_records(_batch(), Acks.ALL)
    waiter = leader.wait_for_high_watermark(3)
    leader.become_follower(_assign(2, 2))
    with pytest.raises(NotLeaderOrFollowerError):
        await waiter
    with pytest.raises(NotLeaderOrFollowerError) as info:
        leader.append_records(_batch(), Acks.LEADER)
    assert info.value.details["leader_id"] == 2


def test_divergent_follower_truncates_to_the_new_leader(tmp_path):
    a, b = _replica(tmp_path, 1), _replica(tmp_path, 2)
    a.become_leader(_assign(1, 1), now_ms=0)
    b.become_follower(_assign(1, 1))
    a.append_records(_batch(tag="common"), Acks.LEADER)
    _replicate(a, b)
    # a writes alone in epoch 1, then b becomes leader in epoch 2 and writes.
    a.append_records(_batch(tag="lost"), Acks.LEADER)
    b.become_leader(_assign(2, 2, isr=(2, 3)), now_ms=0)
    b.append_records(_batch(tag="new"), Acks.LEADER)
    a.become_follower(_assign(2, 2, isr=(2, 3)))
    for _ in range(3):
        _replicate(b, a)
    values = [r.value for r in iter_records(a.log.read(0, 1 << 20))]
    assert values == [b"common0", b"common1", b"common2", b"new0", b"new1", b"new2"]


def test_isr_shrinks_after_lag_and_expands_when_caught_up(tmp_path):
    leader, f2, f3 = (_replica(tmp_path, b, replica_lag_time_max_ms=100) for b in (1, 2, 3))
    leader.become_leader(_assign(1, 1), now_ms=0)
    for f in (f2, f3):
        f.become_follower(_assign(1, 1))
    leader.append_records(_batch(), Acks.LEADER)
    _replicate(leader, f2, now=50)
    _replicate(leader, f2, now=60)
    proposal = leader.isr_change(now_ms=500)
    assert proposal is not None and proposal.isr == (1, 2)
    assert leader.isr_change(now_ms=500) is None, "one AlterPartition in flight"
    leader.isr_change_done(_assign(1, 1, isr=(1, 2), pepoch=1))
    _replicate(leader, f3, now=600)
    _replicate(leader, f3, now=610)
    proposal = leader.isr_change(now_ms=610)
    assert proposal is not None and proposal.isr == (1, 2, 3)


def test_stopped_is_final(tmp_path):
    p = _replica(tmp_path, 1)
    p.stop()
    assert p.role is Role.STOPPED
    with pytest.raises(AssertionError, match="illegal transition"):
        p.become_leader(_assign(1, 1), now_ms=0)


def test_a_leader_that_wrote_nothing_rejoins_as_follower(tmp_path):
    """Elected (epoch 2) and replaced (epoch 3) before anything was appended:
    its epoch cache ends with an entry for epoch 2 at its log end, which the
    new leader never had. Truncating "to the log end" must still drop that
    entry (Kafka does the same), or every fetch diverges again forever and the
    replica never rejoins the ISR."""
    a, b = _replica(tmp_path, 1), _replica(tmp_path, 2)
    a.become_leader(_assign(1, 1), now_ms=0)
    b.become_follower(_assign(1, 1))
    a.append_records(_batch(), Acks.LEADER)
    _replicate(a, b)
    _replicate(a, b)
    a.become_leader(_assign(1, 2), now_ms=0)  # a new term, no append in it
    b.become_leader(_assign(2, 3), now_ms=0)
    a.become_follower(_assign(2, 3))
    assert a.log.epochs.latest_epoch == 2

    req = a.follower_fetch_request()
    res = b.on_follower_fetch(1, req, 1 << 20, now_ms=1)
    assert res.diverging is not None and res.error is None
    a.apply_fetch_response(
        res.data,
        leader_high_watermark=res.high_watermark,
        leader_log_start_offset=res.log_start_offset,
        diverging=res.diverging,
    )
    assert a.log.log_end_offset == 3, "nothing to remove: the records are the leader's"
    assert a.log.epochs.latest_epoch == 1
    # The next fetch is an ordinary one, so the leader counts it as caught up.
    res = b.on_follower_fetch(1, a.follower_fetch_request(), 1 << 20, now_ms=2)
    assert res.diverging is None and res.error is None
    b.append_records(_batch(tag="w"), Acks.LEADER)
    _replicate(b, a)
    assert a.log.log_end_offset == 6
