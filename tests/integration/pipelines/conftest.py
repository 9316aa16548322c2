"""One SparkSession (local[2]) and one three-node lograft cluster shared by the
Spark tests of this package: a JVM and a cluster take seconds to start, so
every test builds fresh topics instead of a fresh cluster. Both are
package-scoped: they stop after this package's last test instead of idling
(a JVM and three nodes still cost CPU) through the rest of the run.

The Spark tests are skipped, with the reason, only when pyspark cannot be
imported (`pip install -e '.[spark]'`); a missing Java fails them, as it
would fail a user. Each test takes `spark` as its first fixture.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import running_cluster, wait_in_sync

_topics = itertools.count()

# JVM flags for the tests' short-lived Spark JVMs (the driver here; the
# standalone test's JVMs take scripts/spark_standalone.py's JVM_OPTIONS):
# the C1 compiler only, one compiler thread and the serial collector. A test
# runs each query a few times on a few MB, so C2's optimisation never pays
# back its compile time: on this 2-core machine (load 11-15) a session's
# start plus a few small queries cost the JVM 46 s of CPU with the defaults
# and 25 s with these. Correctness does not depend on them.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


@pytest.fixture(scope="package")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Every Spark test takes this fixture first, so that without pyspark it
    is skipped before a cluster is started for it."""
    pytest.importorskip(
        "pyspark",
        reason="pyspark is not installed: the Spark tests need the spark extra (.[spark])",
    )
    from lograft.pipelines import LograftDataSource
    from lograft.pipelines.local_spark import local_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_session(
        "lograft-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
        },
        log_level="ERROR",
    )
    session.dataSource.register(LograftDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    # A restarted node takes back its preferred partitions soon.
    with running_cluster(
        tmp_path_factory,
        "spark-cluster",
        log_lines=80,
        controller={"leader_imbalance_check_interval_ms": 500},
    ) as c:
        yield c


@pytest.fixture
def bootstrap(cluster: LograftCluster) -> str:
    return ",".join(n.url for n in cluster)


@pytest.fixture
def new_topic(cluster: LograftCluster) -> Callable[..., str]:
    """`new_topic(partitions=3, **configs)`: a fresh topic (replication factor
    3) whose partitions all have a live leader and a full ISR."""

    def make(partitions: int = 3, **configs: Any) -> str:
        name = f"spark-{next(_topics)}"
        cluster.create_topic(name, partitions=partitions, replication_factor=3, configs=configs)
        wait_in_sync(cluster, name)
        return name

    return make


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
