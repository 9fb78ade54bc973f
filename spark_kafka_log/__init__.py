"""pylog's Spark connector: ``format("pylog")`` for Kafka-compatible topics.

Use::

    import spark_kafka_log
    spark_kafka_log.register(spark)          # or spark.dataSource.register(PylogDataSource)
    df.write.format("pylog").option("topic", "events").mode("append").save()

Where things run: :func:`register` on the driver; the data source's ``writer()`` on the driver; the
write tasks on the executors (see :mod:`spark_kafka_log.writer`).

The zero-configuration broker is the embedded broker of ``pylog.dataDir`` (:mod:`broker_runtime.launch.embedded`,
whose functions are re-exported here): :func:`ensure_embedded_broker` runs on the **driver** in
``DataSource.writer()`` / ``reader()``, so the broker is up before any task starts; **executors** only look it
up with :func:`embedded_broker_address` and fall back to the address the driver resolved -- they never start a
broker (an executor on another machine has no such broker). The broker OUTLIVES the Spark job;
:func:`stop_embedded_broker` (or ``pylog-broker stop --data-dir DIR``) stops it.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.launch import (
    embedded_broker_address,
    embedded_broker_status,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from spark_kafka_log.datasource import PylogDataSource

__all__ = [
    "PylogDataSource",
    "embedded_broker_address",
    "embedded_broker_status",
    "ensure_embedded_broker",
    "register",
    "stop_embedded_broker",
]


def register(spark: Any) -> None:
    """Register the ``pylog`` data source with a SparkSession (driver; once per session)."""
    spark.dataSource.register(PylogDataSource)
