"""Batch reads, ``spark.read.format("pylog")``: planning offset ranges on the driver, reading them on executors.

Runs on: driver (planning); executors (task).

Driver: :mod:`~spark_kafka_log.read.reader` (PySpark's reader), :mod:`~spark_kafka_log.read.read_plan`,
:mod:`~spark_kafka_log.read.pushdown`, :mod:`~spark_kafka_log.read.input_partition` (built here, pickled to a
task). Executors: :mod:`~spark_kafka_log.read.read_task` over :mod:`~spark_kafka_log.read.local_scan` or Fetch,
:mod:`~spark_kafka_log.read.txn_filter` for read_committed. The streaming reader
(:mod:`spark_kafka_log.stream`) reuses the planner's pieces and the read task. Imports only
:mod:`spark_kafka_log.common` of the connector.
"""
