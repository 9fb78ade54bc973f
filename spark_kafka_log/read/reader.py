"""The batch reader of ``spark.read.format("pylog")``: PySpark's reader interface over the planner and the read task.

Runs on: driver (planning); executors (task).

Where each piece runs and when (PySpark's Python Data Source lifecycle):

* :func:`create_reader` -- **driver** (the planner's Python worker), from ``PylogDataSource.reader()``, once
  per query: parses the options (:mod:`spark_kafka_log.common.reader_options`; a bad option fails here with a
  :class:`~broker_runtime.errors.ConfigError` naming it) and returns a :class:`PylogPushdownReader` when
  ``spark.sql.python.filterPushdown.enabled`` is true, else a :class:`PylogReader` (PySpark refuses a reader
  implementing ``pushFilters`` while the conf is off; PySpark does not tell ``reader()`` the conf, see
  :mod:`spark_kafka_log.common.spark_compat`).
* :meth:`PylogPushdownReader.pushFilters` -- **driver**, once, before ``partitions()``: keeps what
  :mod:`spark_kafka_log.read.pushdown` can turn into offset ranges.
* :meth:`PylogReader.partitions` -- **driver**, once: :func:`spark_kafka_log.read.read_plan.plan_input_partitions`.
* :meth:`PylogReader.read` -- **executors**, once per input partition:
  :func:`spark_kafka_log.read.read_task.read_range`.

The streaming reader (``readStream``) is :mod:`spark_kafka_log.stream.stream_reader`; both share the planner's pieces and
the read task.

The reader object is pickled by PySpark before ``partitions()`` runs, so everything an executor needs travels
in the input partitions, not in attributes set during planning.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from spark_kafka_log.common.reader_options import ReaderOptions, parse_reader_options
from spark_kafka_log.common.schema import arrow_schema, checked_reader_schema, reader_schema
from spark_kafka_log.common.spark_compat import reader_pushdown_choice
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.pushdown import PushedFilters, push_filter
from spark_kafka_log.read.read_plan import plan_input_partitions
from spark_kafka_log.read.read_task import read_range

__all__ = [
    "PylogPushdownReader",
    "PylogReader",
    "arrow_schema",
    "create_reader",
    "reader_schema",
]


class PylogReader(DataSourceReader):
    """Batch reader of pylog / Kafka topics (no filter pushdown; see :class:`PylogPushdownReader`)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._pushed = PushedFilters()

    def partitions(self) -> Sequence[InputPartition]:
        """Driver: resolve and split the offset ranges of every selected topic partition."""
        return plan_input_partitions(self.options, self._pushed)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: yield the records of one input partition as Arrow batches of the declared schema."""
        if not isinstance(partition, PylogInputPartition):
            return iter(())
        return read_range(self.options, partition, arrow_schema(self.schema))


class PylogPushdownReader(PylogReader):
    """:class:`PylogReader` plus ``pushFilters`` (used when Spark's Python filter pushdown is enabled)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Driver, once, before ``partitions()``: keep what narrows offset ranges; yield the rest back."""
        for f in filters:
            self._pushed, exact = push_filter(self._pushed, f)
            if not exact:
                yield f


def create_reader(options: Mapping[str, str], schema: StructType | None = None) -> PylogReader:
    """Driver: the reader for ``spark.read.format("pylog")`` with these options and schema.

    ``schema`` is what Spark passes to ``DataSource.reader()``: it must be the Kafka source schema (with
    ``headers`` exactly when ``includeHeaders`` is true); a user-specified schema is rejected as Spark's
    Kafka source rejects it.
    """
    parsed = parse_reader_options(options)
    expected = checked_reader_schema(parsed.include_headers, schema)
    cls = PylogPushdownReader if reader_pushdown_choice() else PylogReader
    return cls(parsed, expected)
