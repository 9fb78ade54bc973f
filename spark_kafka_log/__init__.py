"""pylog's Spark connector: ``format("pylog")`` for Kafka-compatible topics.

Runs on: driver (session).

Use::

    import spark_kafka_log
    spark_kafka_log.register(spark)          # or spark.dataSource.register(PylogDataSource)
    df.write.format("pylog").option("topic", "events").mode("append").save()

Where things run: :func:`register` on the driver, in the user's Python process; the data source's ``writer()``
and ``reader()`` on the driver (in Python workers Spark starts); the read and write tasks on the executors (see
:mod:`spark_kafka_log.write.writer`, :mod:`spark_kafka_log.read.reader`).

:func:`register` also checks, for a local master, that the interpreter Spark will start its Python workers
with can import pylog, and fails with one line naming the interpreter and the fix when it cannot
(:func:`spark_kafka_log.common.spark_compat.check_worker_python`); otherwise the first write or read would fail deep in
a pickling traceback with ``No module named 'spark_kafka_log'``.

The zero-configuration broker is the embedded broker of ``pylog.dataDir`` (:mod:`broker_runtime.launch.embedded`,
whose functions are re-exported here): :func:`ensure_embedded_broker` runs on the **driver** in
``DataSource.writer()`` / ``reader()``, so the broker is up before any task starts; **executors** only look it
up with :func:`embedded_broker_address` and fall back to the address the driver resolved -- they never start a
broker (an executor on another machine has no such broker). The broker OUTLIVES the Spark job;
:func:`stop_embedded_broker` (or ``pylog-broker stop --data-dir DIR``) stops it. :func:`start_console`
(:mod:`spark_kafka_log.console`) serves the web console of that broker on loopback (read-only unless
``allow_writes=True``) and prints its URL.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.launch import (
    embedded_broker_address,
    embedded_broker_status,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from spark_kafka_log.common.spark_compat import check_worker_python
from spark_kafka_log.console import start_console
from spark_kafka_log.datasource import PylogDataSource

__all__ = [
    "PylogDataSource",
    "embedded_broker_address",
    "embedded_broker_status",
    "ensure_embedded_broker",
    "register",
    "start_console",
    "stop_embedded_broker",
]


def register(spark: Any) -> None:
    """Register the ``pylog`` data source with a SparkSession (driver; once per session).

    Raises :class:`~broker_runtime.errors.WorkerPythonError` when Spark's local Python workers would run an
    interpreter that cannot import pylog.
    """
    check_worker_python(spark)
    spark.dataSource.register(PylogDataSource)
