"""One real `lograft node` (controller + broker, one voter) shared by the client
tests of this package, and a factory of fresh topics on it. The node is
SIGKILLed by pid after the package's last test (package scope: an idle node
still costs ~3 % of a core, which the rest of the run should not pay) and the
harness asserts nothing is left behind."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.client.support import Node
from tests.integration.cluster_harness import LograftCluster

_names = itertools.count()


@pytest.fixture(scope="package")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    cluster = LograftCluster(tmp_path_factory.mktemp("client-node"), 1)
    try:
        cluster.start()
        yield Node(cluster, cluster[1])
    finally:
        print(cluster.logs(lines=80))
        cluster.close()


@pytest.fixture
def topic(node: Node) -> Callable[..., str]:
    """`topic(partitions=1, **configs)` creates a fresh topic (replication factor 1,
    min_insync_replicas 1) and returns its name."""

    def make(partitions: int = 1, **configs: Any) -> str:
        name = f"client-{next(_names)}"
        node.cluster.create_topic(
            name,
            partitions=partitions,
            replication_factor=1,
            configs={"min_insync_replicas": 1, **configs},
        )
        node.wait_leaders(name, partitions)
        return name

    return make
