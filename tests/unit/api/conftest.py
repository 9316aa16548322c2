"""Fixtures for the CLI tests (see cli_support)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.unit.cli.cli_support import Broker, FakeCluster, LoopThread, Result, run_cli

PARTITIONS = 3


@dataclass
class DataServer:
    """One broker hosting `orders` (3 partitions) and `strict` (1 partition whose
    min_insync_replicas=2 cannot be met, so acks=all fails)."""

    url: str
    cluster: FakeCluster
    broker: Broker
    loop: LoopThread

    def cli(self, *argv: str, stdin: bytes = b"") -> Result:
        return run_cli([*argv, "--bootstrap", self.url], stdin=stdin)


@pytest.fixture
def srv(tmp_path, monkeypatch) -> Iterator[DataServer]:
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP", raising=False)
    loop = LoopThread()
    cluster = FakeCluster()
    cluster.add_topic("orders", PARTITIONS)
    cluster.add_topic("strict", 1, config={"min_insync_replicas": "2"})
    broker = Broker(loop, cluster, 1, tmp_path / "broker-1")
    broker.host_topics()
    try:
        yield DataServer(broker.url, cluster, broker, loop)
    finally:
        broker.stop()
        loop.close()
