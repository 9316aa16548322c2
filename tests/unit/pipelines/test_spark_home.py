"""The SPARK_HOME whose Python workers import the installed pyspark, not pyspark.zip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lograft.pipelines.local_spark import prepare_environment
from lograft.pipelines.spark_home import pip_spark_home, spark_home_for_workers


def fake_pip_pyspark(root: Path) -> Path:
    package = root / "site-packages" / "pyspark"
    for name in ("bin", "jars", "sbin", "python/lib"):
        (package / name).mkdir(parents=True)
    (package / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (package / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    return package


def test_links_everything_spark_reads_but_the_workers_zip(tmp_path: Path) -> None:
    package = fake_pip_pyspark(tmp_path)
    assert pip_spark_home(package)
    home = spark_home_for_workers(package, tmp_path / "cache")
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars", "sbin"]
    assert (home / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    assert not (home / "python").exists()
    # Built once: the same directory, untouched, the next time.
    inode = home.stat().st_ino
    assert spark_home_for_workers(package, tmp_path / "cache") == home
    assert home.stat().st_ino == inode
    assert not [p for p in (tmp_path / "cache").iterdir() if p != home]


def test_a_wrong_home_is_rebuilt(tmp_path: Path) -> None:
    package = fake_pip_pyspark(tmp_path)
    home = spark_home_for_workers(package, tmp_path / "cache")
    (home / "jars").unlink()
    (home / "jars").symlink_to(tmp_path, target_is_directory=True)
    (home / "python").mkdir()
    assert spark_home_for_workers(package, tmp_path / "cache") == home
    assert os.readlink(home / "jars") == str(package.resolve() / "jars")
    assert not (home / "python").exists()


def test_a_spark_distribution_is_not_a_pip_install(tmp_path: Path) -> None:
    package = fake_pip_pyspark(tmp_path)
    (package / "python" / "lib" / "pyspark.zip").unlink()
    assert not pip_spark_home(package)


def test_the_environment_gets_it_unless_spark_home_is_set(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    prepare_environment(env)
    assert Path(env["SPARK_HOME"]).parent == tmp_path / "lograft"
    home = Path(env["SPARK_HOME"])
    assert (home / "jars").is_dir() and (home / "bin" / "spark-submit").is_file()
    assert not (home / "python").exists()
    mine = {"SPARK_HOME": "/opt/spark"}
    prepare_environment(mine)
    assert mine["SPARK_HOME"] == "/opt/spark"
