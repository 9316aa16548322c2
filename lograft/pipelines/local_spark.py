"""A SparkSession for this machine: the right Java, loopback only, this interpreter.

The tests and the example pipelines start Spark through `local_session()` (or
call `prepare_environment()` before their own builder) so that:

- JAVA_HOME names a Java the installed Spark supports (`lograft.pipelines.java`),
  and a missing one is one sentence, not a JVM stack trace;
- the driver, block manager and UI bind 127.0.0.1 (`SPARK_LOCAL_IP`), never a
  public interface;
- Python workers run the driver's own interpreter (`PYSPARK_PYTHON`), so they
  import the same lograft and pyarrow.

Values already in the environment win: a user who points SPARK_LOCAL_IP or
PYSPARK_PYTHON elsewhere (a real cluster) keeps them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING

from lograft.pipelines.java import JavaRuntime, use_java

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
    """Set JAVA_HOME, SPARK_LOCAL_IP and PYSPARK_PYTHON (unless set) before a JVM starts."""
    env = os.environ if env is None else env
    runtime = use_java(env)
    env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return runtime


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
