"""Fixtures for process-level tests: `lograft_cluster` builds clusters of real
`lograft node` processes and tears every one of them down (SIGKILL by pid,
then an assertion that no process or port is left), printing node logs so
they show in a failing test's output."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster_harness import LograftCluster


@pytest.fixture
def lograft_cluster(tmp_path: Path) -> Iterator[Callable[..., LograftCluster]]:
    """A factory: `lograft_cluster(size=3, raft={...}, controller={...}, overrides={...})`.
    The cluster is not started; call `.start()`."""
    clusters: list[LograftCluster] = []

    def make(size: int = 3, **kwargs: Any) -> LograftCluster:
        cluster = LograftCluster(tmp_path / f"cluster-{len(clusters)}", size, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    errors: list[str] = []
    for cluster in clusters:
        print(cluster.logs(lines=200))
        try:
            cluster.close()
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, "teardown left things behind: " + "; ".join(errors)
