"""Fixtures of the connector tests: ONE local Spark session per test run, shared by writer and reader tests.

``local[2,2]``: two task threads and up to two attempts per task, so the task-retry tests can make Spark
retry a task; everything else behaves like ``local[2]``. Spark is kept small (2 shuffle partitions, no UI).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Writes without pylog.dataDir keep their small state files here, not in the working directory.
    os.environ.setdefault("PYLOG_DATA_DIR", str(tmp_path_factory.mktemp("pylog-data")))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pylog-connector-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real pylog broker (child process on a loopback port) for the tests of one module: ``host:port``."""
    from broker_runtime.launch import broker_process

    data_dir = tmp_path_factory.mktemp("broker")
    with broker_process(data_dir, overrides={"num.partitions": "3"}) as address:
        yield address
