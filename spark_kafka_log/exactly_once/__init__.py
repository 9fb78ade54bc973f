"""Exactly-once: the driver ends the tasks' Kafka transactions, and records enough to finish a commit it lost.

Runs on: driver (commit); any machine (tool).

:mod:`~spark_kafka_log.exactly_once.task_transactions` (EndTxn on the tasks' producers' behalf) under both
protocols: :mod:`~spark_kafka_log.exactly_once.batch_commit` (commit intents of transactional batch writes, and
their resolution) and :mod:`~spark_kafka_log.exactly_once.stream_commit` (the streaming sink, one transaction per
task per micro-batch, recorded in :mod:`~spark_kafka_log.exactly_once.sink_log`). The tasks' side (a
transactional producer, flushed, never committed) is :mod:`spark_kafka_log.write.producer`. Imports only
:mod:`spark_kafka_log.common` of the connector.
"""
