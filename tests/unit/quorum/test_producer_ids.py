from __future__ import annotations

import pytest

from lograft.errors import BrokerIdNotRegisteredError, LograftError, StaleBrokerEpochError
from lograft.quorum.image import MetadataImage
from lograft.quorum.producer_ids import PRODUCER_ID_MAX, allocate_producer_ids
from lograft.quorum.records import ProducerIds

from .metadata_cluster import cluster_of


def test_blocks_are_contiguous_and_never_reused():
    cluster = cluster_of([1, 2])
    size = cluster.config.producer_id_block_size
    blocks = [
        cluster.apply(allocate_producer_ids(cluster.image, b, cluster.epochs[b], cluster.config))
        for b in (1, 2, 1)
    ]
    assert [block.broker_id for block in blocks] == [1, 2, 1]
    assert [block.first_producer_id for block in blocks] == [0, size, 2 * size]
    assert all(block.size == size for block in blocks)
    assert blocks[0].last_producer_id == size - 1
    assert cluster.image.next_producer_id == 3 * size


def test_block_size_is_configurable():
    cluster = cluster_of([1], producer_id_block_size=10)
    block = cluster.apply(
        allocate_producer_ids(cluster.image, 1, cluster.epochs[1], cluster.config)
    )
    assert (block.first_producer_id, block.last_producer_id) == (0, 9)


def test_only_current_broker_incarnations_get_blocks():
    cluster = cluster_of([1])
    with pytest.raises(StaleBrokerEpochError):
        allocate_producer_ids(cluster.image, 1, cluster.epochs[1] + 1, cluster.config)
    with pytest.raises(BrokerIdNotRegisteredError):
        allocate_producer_ids(cluster.image, 2, 0, cluster.config)


def test_exhausted_id_space():
    cluster = cluster_of([1])
    size = cluster.config.producer_id_block_size
    near_end = PRODUCER_ID_MAX - size + 2  # one block would pass the last id
    image = cluster.image.replay(ProducerIds(-1, -1, near_end), cluster.image.offset + 1)
    with pytest.raises(LograftError, match="exhausted"):
        allocate_producer_ids(image, 1, cluster.epochs[1], cluster.config)
    last_fit = cluster.image.replay(ProducerIds(-1, -1, near_end - 1), cluster.image.offset + 1)
    block = allocate_producer_ids(last_fit, 1, cluster.epochs[1], cluster.config).response
    assert block.last_producer_id == PRODUCER_ID_MAX


def test_empty_image_starts_at_zero():
    assert MetadataImage.empty().next_producer_id == 0
