"""A SparkSession for this machine: the right Java, loopback only, this interpreter.

The tests and the example pipelines start Spark through `local_session()` (or
call `prepare_environment()` before their own builder) so that:

- JAVA_HOME names a Java the installed Spark supports (`lograft.pipelines.java`),
  and a missing one is one sentence, not a JVM stack trace;
- the driver, block manager and UI bind 127.0.0.1 (`SPARK_LOCAL_IP`), never a
  public interface;
- Python workers run the driver's own interpreter (`PYSPARK_PYTHON`), so they
  import the same lograft and pyarrow;
- with pyspark installed by pip, SPARK_HOME is a directory of links to it
  without pyspark.zip (`lograft.pipelines.spark_home`), so Python workers
  import the installed pyspark and its cached bytecode instead of compiling
  it from the zip at every start (which made streaming queries fail to start
  on a loaded machine).

Values already in the environment win: a user who points SPARK_LOCAL_IP,
PYSPARK_PYTHON or SPARK_HOME elsewhere (a real cluster) keeps them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from lograft.pipelines.java import JavaRuntime, use_java
from lograft.pipelines.spark_home import default_cache_dir, pip_spark_home, spark_home_for_workers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"

# Small-machine defaults: a 2-core laptop or CI runner, a few MB of test data.
# shuffle partitions 200 (Spark's default) would make every aggregation run
# 200 tiny tasks; the UI would open a port per session.
LOCAL_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}


def prepare_environment(env: MutableMapping[str, str] | None = None) -> JavaRuntime:
    """Set JAVA_HOME, SPARK_LOCAL_IP, PYSPARK_PYTHON and SPARK_HOME (unless
    set) before a JVM starts."""
    env = os.environ if env is None else env
    runtime = use_java(env)
    env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "SPARK_HOME" not in env:
        package = _pyspark_dir()
        if package is not None and pip_spark_home(package):
            env["SPARK_HOME"] = str(spark_home_for_workers(package, default_cache_dir(env)))
    return runtime


def _pyspark_dir() -> Path | None:
    """The installed pyspark package's directory (found, not imported)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession (the running one if there is one) with LOCAL_CONF, then `conf` on top."""
    prepare_environment()
    from pyspark.sql import SparkSession  # import after JAVA_HOME is set

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
