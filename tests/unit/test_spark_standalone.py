"""scripts/spark_standalone.py runs Spark's programs from the SPARK_HOME of the
environment it gives them (the one `prepare_environment` built, which may name a
home of links for the Python workers), not from this process's environment.
Nothing is started: the process calls are recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import spark_standalone  # a script, not a package


class Recorder:
    """Stands for subprocess.Popen and subprocess.run: keeps argv and env."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> Any:
        self.calls.append((argv, kwargs["env"]))
        return SimpleNamespace(pid=0, returncode=0, stdout="", stderr="")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> spark_standalone.StandaloneCluster:
    # This process names no SPARK_HOME; the environment built for Spark does.
    monkeypatch.delenv("SPARK_HOME", raising=False)
    cluster = spark_standalone.StandaloneCluster(tmp_path / "spark")
    cluster.workdir.mkdir()
    cluster._env = {"SPARK_HOME": str(tmp_path / "links"), "PATH": "/usr/bin"}
    return cluster


def test_daemons_and_submit_come_from_the_home_their_environment_names(cluster, monkeypatch):
    record = Recorder()
    monkeypatch.setattr(subprocess, "Popen", record)
    monkeypatch.setattr(subprocess, "run", record)
    cluster._spawn("master", "org.apache.spark.deploy.master.Master")
    spark_standalone.submit_page_views(cluster, "http://127.0.0.1:1", events=1, timeout_s=1)
    home = Path(cluster.env["SPARK_HOME"])
    assert [(argv[0], env) for argv, env in record.calls] == [
        (str(home / "bin" / "spark-class"), cluster.env),
        (str(home / "bin" / "spark-submit"), cluster.env),
    ]


def test_without_a_spark_home_it_is_the_installed_pyspark(tmp_path, monkeypatch):
    pytest.importorskip("pyspark", reason="the Spark tests need the spark extra (.[spark])")
    from pyspark.find_spark_home import _find_spark_home

    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_standalone.spark_home({}) == Path(_find_spark_home())
