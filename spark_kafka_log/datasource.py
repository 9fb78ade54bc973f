"""The ``pylog`` Python data source: Spark's Kafka source schema, the batch and streaming readers and writers.

Runs on: driver (planning, commit).

Where and when each method runs:

* ``PylogDataSource(options)`` -- built by Spark on the **driver** (and re-built in the Python workers that
  plan reads/writes) with the user's options in a case-insensitive dict (keys arrive lower-cased).
* :meth:`PylogDataSource.schema` -- **driver**, once per ``spark.read.format("pylog").load()``.
* :meth:`PylogDataSource.writer` -- **driver**, once per ``df.write.format("pylog")...save()``:
  :func:`spark_kafka_log.write.write_plan.prepare_write` parses the options, validates the DataFrame's columns,
  finds or starts the embedded broker when no ``kafka.bootstrap.servers`` is given, checks the ``topic``
  option's topic exists (auto-creating it) and warns once about options that weaken delivery. Every
  configuration error surfaces here, before any task runs.
* :meth:`PylogDataSource.streamWriter` -- **driver**, twice per micro-batch (before its tasks, and for its
  commit; a new writer each time): exactly-once needs the query's ``checkpointLocation`` option (see
  :mod:`spark_kafka_log.stream.stream_writer`).
* :meth:`PylogDataSource.reader` -- **driver**, once per read; built by :mod:`spark_kafka_log.read.reader`.
* :meth:`PylogDataSource.streamReader` -- **driver**, once per streaming query run (``readStream``); built by
  :mod:`spark_kafka_log.stream.stream_reader`.

Each method imports its side only: the Python worker that plans a streaming read (it lives as long as the query
and starts with it) never loads the write path (its record encoder brings pandas through pyarrow), nor a writing
worker the read path.

Save modes: ``append`` only. ``overwrite`` is rejected (a Kafka topic is an append-only log, as Spark's
Kafka sink says); pyspark itself rejects ``error``/``ignore`` and a missing mode for Python data sources.
"""

from __future__ import annotations

import time

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from broker_runtime.errors import ConfigError
from spark_kafka_log.common.driver_log import driver_log

__all__ = ["PylogDataSource"]


class PylogDataSource(DataSource):
    """``format("pylog")``: Kafka-compatible topics of a pylog (or any Kafka) broker."""

    @classmethod
    def name(cls) -> str:
        return "pylog"

    def schema(self) -> StructType:
        """Spark's Kafka source schema (plus ``headers`` with ``includeHeaders=true``)."""
        from spark_kafka_log.common.schema import reader_schema

        return reader_schema(str(self.options.get("includeheaders", "false")).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        """Driver: the batch reader (see :mod:`spark_kafka_log.read.reader`)."""
        from spark_kafka_log.read.reader import create_reader

        return create_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Driver: the micro-batch reader of ``readStream`` (see :mod:`spark_kafka_log.stream.stream_reader`)."""
        from spark_kafka_log.stream.stream_reader import create_stream_reader

        return create_stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_kafka_log.common.writer_options import batch_options
        from spark_kafka_log.write.write_plan import prepare_write
        from spark_kafka_log.write.writer import PylogBatchWriter

        if overwrite:
            raise ConfigError(
                "Save mode overwrite not allowed for pylog: a topic is an append-only log. "
                "Use .mode('append')"
            )
        options, layout, servers = prepare_write(self.options, schema)
        return PylogBatchWriter(batch_options(options), layout, servers)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Driver, twice per micro-batch (before its tasks, and for its commit): see :mod:`.stream_writer`."""
        from spark_kafka_log.common.writer_options import stream_options
        from spark_kafka_log.exactly_once.sink_log import checkpoint_dir, query_id
        from spark_kafka_log.stream.stream_writer import PylogStreamWriter, SinkTarget
        from spark_kafka_log.write.write_plan import prepare_write

        called_ms = int(time.time() * 1000)
        parsed, layout, servers = prepare_write(self.options, schema, keep_client=True)
        options = stream_options(parsed)
        if not options.transactional:  # pylog.deliveryGuarantee=at-least-once
            _warn_at_least_once()
            return PylogStreamWriter(options, layout, servers, None)
        location = self.options.get("checkpointlocation")
        if not location:
            raise ConfigError(
                "writeStream.format('pylog') is exactly-once and keeps its log in the query's checkpoint, but no "
                "checkpoint location reached it: give it with .option('checkpointLocation', ...) (the conf "
                "spark.sql.streaming.checkpointLocation is not passed to Python sinks), or set "
                "pylog.deliveryGuarantee=at-least-once"
            )
        checkpoint = checkpoint_dir(str(location))
        return PylogStreamWriter(
            options, layout, servers, SinkTarget(checkpoint, query_id(checkpoint)), called_ms
        )


_warned_at_least_once = False


def _warn_at_least_once() -> None:
    """One WARNING per driver worker process (streamWriter() runs twice per micro-batch)."""
    global _warned_at_least_once
    if not _warned_at_least_once:
        _warned_at_least_once = True
        driver_log().warning(
            "pylog stream sink: delivery is weaker than the default (exactly-once) because of "
            "pylog.deliveryGuarantee=at-least-once: a micro-batch that a restarted query re-runs is written again"
        )
