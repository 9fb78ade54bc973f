"""The ``pylog`` Python data source: Spark's Kafka source schema, the batch and streaming readers and writers.

Where and when each method runs:

* ``PylogDataSource(options)`` -- built by Spark on the **driver** (and re-built in the Python workers that
  plan reads/writes) with the user's options in a case-insensitive dict (keys arrive lower-cased).
* :meth:`PylogDataSource.schema` -- **driver**, once per ``spark.read.format("pylog").load()``.
* :meth:`PylogDataSource.writer` -- **driver**, once per ``df.write.format("pylog")...save()``:
  :func:`spark_kafka_log.write_plan.prepare_write` parses the options, validates the DataFrame's columns,
  finds or starts the embedded broker when no ``kafka.bootstrap.servers`` is given, checks the ``topic``
  option's topic exists (auto-creating it) and warns once about options that weaken delivery. Every
  configuration error surfaces here, before any task runs.
* :meth:`PylogDataSource.streamWriter` -- **driver**, once per micro-batch (a new writer each time).
* :meth:`PylogDataSource.reader` -- **driver**, once per read; built by :mod:`spark_kafka_log.reader`.
* :meth:`PylogDataSource.streamReader` -- **driver**, once per streaming query run (``readStream``); built by
  :mod:`spark_kafka_log.stream_reader`.

Save modes: ``append`` only. ``overwrite`` is rejected (a Kafka topic is an append-only log, as Spark's
Kafka sink says); pyspark itself rejects ``error``/``ignore`` and a missing mode for Python data sources.
"""

from __future__ import annotations

import hashlib
import os

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from broker_runtime.errors import ConfigError
from spark_kafka_log.write_plan import prepare_write
from spark_kafka_log.writer import PylogBatchWriter, PylogStreamWriter

__all__ = ["PylogDataSource"]


class PylogDataSource(DataSource):
    """``format("pylog")``: Kafka-compatible topics of a pylog (or any Kafka) broker."""

    @classmethod
    def name(cls) -> str:
        return "pylog"

    def schema(self) -> StructType:
        """Spark's Kafka source schema (plus ``headers`` with ``includeHeaders=true``)."""
        from spark_kafka_log.schema import reader_schema

        return reader_schema(str(self.options.get("includeheaders", "false")).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        """Driver: the batch reader (see :mod:`spark_kafka_log.reader`)."""
        from spark_kafka_log.reader import create_reader

        return create_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Driver: the micro-batch reader of ``readStream`` (see :mod:`spark_kafka_log.stream_reader`)."""
        from spark_kafka_log.stream_reader import create_stream_reader

        return create_stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError(
                "Save mode overwrite not allowed for pylog: a topic is an append-only log. "
                "Use .mode('append')"
            )
        return PylogBatchWriter(*prepare_write(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options, layout, servers = prepare_write(self.options, schema)
        checkpoint = self.options.get("checkpointlocation") or self.options.get("path")
        if checkpoint:
            state_dir = os.path.join(str(checkpoint), "pylog-sink")
        else:
            # No checkpoint location reached the data source: keep the batch records in the data dir,
            # one folder per target (servers + topic), so two queries to different topics do not mix.
            target = hashlib.sha1(f"{servers}/{options.topic}".encode()).hexdigest()[:12]
            state_dir = os.path.join(options.data_dir, "sink-batches", target)
        return PylogStreamWriter(options, layout, servers, state_dir)
