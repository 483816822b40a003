"""The SparkSession the jobs run in: local mode on this machine by default, any Spark master by option."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"


def spark_session(master: str | None = None, app_name: str = "kafkasim-analysis",
                  shuffle_partitions: int = 4) -> SparkSession:
    """``master`` falls back to $KAFKASIM_SPARK_MASTER, then local[2]. Trace analyses are a handful of
    small shuffles, so few shuffle partitions beat Spark's default 200 by a wide margin on one machine."""
    # the workers must run the same interpreter as the driver (the project venv, with pydantic)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app_name)
               .master(master or os.environ.get("KAFKASIM_SPARK_MASTER", DEFAULT_MASTER))
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               # trace files are a few large files: smaller splits keep every core busy while parsing
               .config("spark.sql.files.maxPartitionBytes", str(32 * 1024 * 1024))
               .config("spark.driver.memory", os.environ.get("KAFKASIM_SPARK_DRIVER_MEMORY", "2g")))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
