"""pylog's Spark connector: ``format("pylog")`` for Kafka-compatible topics.

Use::

    import spark_kafka_log
    spark_kafka_log.register(spark)          # or spark.dataSource.register(PylogDataSource)
    df.write.format("pylog").option("topic", "events").mode("append").save()

Where things run: :func:`register` on the driver; the data source's ``writer()`` on the driver; the
write tasks on the executors (see :mod:`spark_kafka_log.writer`).
"""

from __future__ import annotations

from typing import Any

from spark_kafka_log.datasource import PylogDataSource
from spark_kafka_log.embedded import ensure_embedded_broker, stop_embedded_broker

__all__ = ["PylogDataSource", "ensure_embedded_broker", "register", "stop_embedded_broker"]


def register(spark: Any) -> None:
    """Register the ``pylog`` data source with a SparkSession (driver; once per session)."""
    spark.dataSource.register(PylogDataSource)
