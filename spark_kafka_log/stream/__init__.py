"""Structured Streaming: ``readStream.format("pylog")`` and ``writeStream.format("pylog")``.

Runs on: driver (planning, commit); executors (task).

:mod:`~spark_kafka_log.stream.stream_reader` with :mod:`~spark_kafka_log.stream.stream_plan` (Spark's Kafka
source offsets, rate limits) plans micro-batches on the driver and reads them with the batch read task;
:mod:`~spark_kafka_log.stream.stream_writer` writes each micro-batch with the batch write task and commits it
through :mod:`spark_kafka_log.exactly_once.stream_commit`. Imports :mod:`spark_kafka_log.common`,
:mod:`spark_kafka_log.read`, :mod:`spark_kafka_log.write` and :mod:`spark_kafka_log.exactly_once`.
"""
