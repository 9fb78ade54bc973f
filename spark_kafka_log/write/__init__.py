"""Batch writes, ``df.write.format("pylog")``: the driver's checks, the executors' producer, the driver's commit.

Runs on: driver (planning, commit); executors (task).

Driver, before the tasks: :mod:`~spark_kafka_log.write.write_plan`. Executors, one producer per task:
:mod:`~spark_kafka_log.write.producer` = :mod:`~spark_kafka_log.write.accumulator` (with
:mod:`~spark_kafka_log.write.partitioner`) + :mod:`~spark_kafka_log.write.sender`, with the re-run identity of
:mod:`~spark_kafka_log.write.task_state`. :mod:`~spark_kafka_log.write.writer` holds both sides of PySpark's
writer: ``write()`` (executors) and ``commit()`` / ``abort()`` (driver, which hands transactional writes to
:mod:`spark_kafka_log.exactly_once`). Imports :mod:`spark_kafka_log.common` and
:mod:`spark_kafka_log.exactly_once` of the connector.
"""
