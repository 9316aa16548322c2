"""The page-view pipeline submitted to a Spark standalone cluster (a master and two workers
in their own JVMs, from the installed pyspark): the executors, not the driver, read from and
write to the partition leaders. scripts/spark_standalone.py runs the same by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))

import spark_standalone  # a script, not a package

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_page_views_on_a_standalone_cluster(bootstrap, tmp_path):
    pytest.importorskip("pyspark", reason="the Spark tests need the spark extra (.[spark])")
    with spark_standalone.StandaloneCluster(tmp_path / "spark") as cluster:
        done = spark_standalone.submit_page_views(cluster, bootstrap, events=600, timeout_s=300)
        executors = cluster.python_executors()
        pids = [proc.pid for _, proc in cluster.procs]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "30 window counts: Spark's match plain Python's" in done.stdout, done.stdout
    # One executor per worker, and each ran Python tasks of the pipeline.
    assert {w: len(d) for w, d in executors.items()} == {"worker-1": 1, "worker-2": 1}
    # Everything the cluster started is gone.
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        )
