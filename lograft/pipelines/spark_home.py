"""A SPARK_HOME for pip-installed PySpark whose Python workers import the installed pyspark.

Spark puts `SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) at the head
of every Python worker's PYTHONPATH (`PythonUtils.sparkPythonPath`). Python
never caches bytecode for modules it imports from a zip, so every worker
compiles the pyspark modules it imports from source: 1.6 s of CPU per start
against 0.45 s for the same imports from the installed package's cached
bytecode (Spark 4.3, Python 3.11; docs/benchmarks.md, issue 14). Most workers
fork from a daemon that paid this once, but the driver starts each Python
streaming source (`PythonStreamingSourceRunner`) as a fresh process and waits
a fixed 10 s for it to connect back (no setting changes it in Spark 4.3): on
a loaded 2-core machine that compile made queries fail at their start with
"Python worker failed to connect back".

With pyspark installed by pip, SPARK_HOME is the package directory, which
also holds pyspark.zip. `spark_home_for_workers()` returns a directory of
links to that installation's `bin`, `jars` and `sbin` and no `python/lib`,
so the workers import pyspark and py4j from the interpreter's site-packages:
the same installation, version and files the driver runs. It is built once
per installation under the user's cache directory and shared by every
session; the links are checked each time, a wrong one is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

# What spark-submit, spark-class and the standalone scripts read from
# SPARK_HOME (a pip installation has no conf/; Spark treats it as empty).
LINKED = ("bin", "jars", "sbin")


def pip_spark_home(package_dir: Path) -> bool:
    """Whether `package_dir` (the pyspark package) is a SPARK_HOME that
    ships pyspark.zip for its workers, as a pip installation does."""
    return (package_dir / "jars").is_dir() and (
        package_dir / "python" / "lib" / "pyspark.zip"
    ).is_file()


def spark_home_for_workers(package_dir: Path, cache_dir: Path) -> Path:
    """The SPARK_HOME of links into `package_dir` (see the module docstring),
    created under `cache_dir` if it is missing or wrong."""
    package_dir = package_dir.resolve()
    digest = hashlib.sha256(str(package_dir).encode()).hexdigest()[:16]
    home = cache_dir / f"spark-home-{digest}"
    if _links_ok(home, package_dir):
        return home
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Built aside and renamed into place: a session starting meanwhile in
    # another process sees the whole directory or none.
    staging = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=cache_dir))
    for name in LINKED:
        if (package_dir / name).exists():
            (staging / name).symlink_to(package_dir / name, target_is_directory=True)
    if home.exists() or home.is_symlink():
        _remove(home)
    try:
        staging.rename(home)
    except OSError:
        # Another process put its own in place first: it is built the same way.
        shutil.rmtree(staging, ignore_errors=True)
        if not _links_ok(home, package_dir):
            raise
    return home


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/lograft, else ~/.cache/lograft."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lograft"


def _links_ok(home: Path, package_dir: Path) -> bool:
    if home.is_symlink() or not home.is_dir():
        return False
    for name in LINKED:
        link = home / name
        if (package_dir / name).exists():
            if not link.is_symlink() or Path(os.readlink(link)) != package_dir / name:
                return False
        elif link.exists() or link.is_symlink():
            return False
    return not (home / "python").exists()


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)
