"""The streaming reader of ``spark.readStream.format("pylog")``: PySpark's micro-batch stream reader interface.

Runs on: driver (planning); executors (task).

Where each piece runs and when (PySpark 4.3's Python streaming source lifecycle):

* :func:`create_stream_reader` -- **driver**, from ``PylogDataSource.streamReader()``, once per query run, in a
  Python worker that PySpark keeps for the whole run and that answers every call below on the same object, one at
  a time (so the reader may keep state for the run: the initial offsets, the AvailableNow target, the time of the
  last batch). A query restarted from its checkpoint gets a new worker and continues from the offsets Spark wrote
  to ``<checkpoint>/offsets`` (Spark's Kafka source JSON, see :mod:`spark_kafka_log.stream.stream_plan`).
* :meth:`PylogStreamReader.initialOffset` -- **driver**, until the first batch is planned: where a new query
  starts (``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp``), resolved once per run.
* :meth:`PylogStreamReader.latestOffset` -- **driver**, every trigger: the end offsets of the next batch under the
  engine's read limit (``maxOffsetsPerTrigger``; ``minOffsetsPerTrigger`` with ``maxTriggerDelay``; the target
  of Trigger.AvailableNow; Trigger.Once passes ``ReadAllAvailable``). Returning the start offsets means "no batch".
* :meth:`PylogStreamReader.partitions` -- **driver**, once per batch (again for a batch replayed after a
  restart): :func:`spark_kafka_log.stream.stream_plan.batch_ranges`, then the batch reader's task split.
* :meth:`PylogStreamReader.read` -- **executors**, once per task: :func:`spark_kafka_log.read.read_task.read_range`,
  the batch reader's read (direct scan or Fetch; data loss at read time, e.g. retention since the batch was
  planned, is reported there).

Every broker call uses a client opened and closed within the call (the worker may live for days; a broker
restart between triggers must not leave it a dead connection). The reader keeps its position only in Spark's
checkpoint, as Spark's Kafka source. Opt-in (``commitOffsetsToGroup=true`` with ``kafka.group.id``): the offsets
of every batch Spark has committed are committed to that consumer group (OffsetCommit as an admin does: no member,
generation -1), so lag tools (``kafka-consumer-groups``, ``pylog-broker consumer-groups``, exporters) see the
stream's progress. Spark calls :meth:`PylogStreamReader.commit` with a batch's end only when it plans the NEXT
batch, so the reader also commits the ``start`` of each :meth:`PylogStreamReader.latestOffset` (Spark asks for it
only once the previous batch is in its commit log): the group then catches up at the next trigger even while no
data arrives. A query that stops right after a batch (Trigger.Once, ``stop()``) leaves that batch's end for its
next run to commit. The checkpoint stays the source of truth: nothing is ever read back from the group, and a
commit that fails (the group has active members, an ACL refuses it, the coordinator is away) logs a WARNING and
the query goes on; a later trigger's commit catches up.

Metrics: PySpark's Python streaming sources cannot report custom metrics, so the query progress has
``numInputRows`` and this source's ``startOffset`` / ``endOffset`` / ``latestOffset`` (the latter from
:meth:`reportLatestOffset`), but not Spark's ``minOffsetsBehindLatest`` / ``avgOffsetsBehindLatest`` /
``maxOffsetsBehindLatest``; compare ``latestOffset`` with ``endOffset`` instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from broker_runtime.client import KafkaClient
from broker_runtime.errors import KafkaError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from spark_kafka_log.common.connections import reader_client
from spark_kafka_log.common.reader_options import ReaderOptions, parse_reader_options
from spark_kafka_log.common.schema import arrow_schema, checked_reader_schema
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.read_plan import (
    input_partitions,
    list_offsets,
    resolve_bootstrap,
    resolve_bound,
    selected_partitions,
    with_offset_retries,
)
from spark_kafka_log.stream.stream_plan import (
    OffsetMap,
    available,
    batch_ranges,
    from_json,
    rate_limit,
    should_delay,
    to_json,
)

__all__ = ["PylogStreamReader", "create_stream_reader"]

log = logging.getLogger("spark_kafka_log.stream_reader")


class PylogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of pylog / Kafka topics with Spark's Kafka source offsets and trigger limits."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._bootstrap: str | None = None
        self._initial: dict[str, dict[str, int]] | None = None
        #: Trigger.AvailableNow: the latest offsets when the query started; never read past them.
        self._target: OffsetMap | None = None
        self._latest: OffsetMap | None = None
        #: minOffsetsPerTrigger: when the last batch was let through (0: none yet, so the first is never held).
        self._last_trigger_ms = 0.0
        #: commitOffsetsToGroup: the offsets last committed to the group (not committed twice).
        self._group_offsets: OffsetMap | None = None

    # -- driver ------------------------------------------------------------------------------------------------

    def _client(self) -> KafkaClient:
        if self._bootstrap is None:
            self._bootstrap = resolve_bootstrap(self.options)
        return reader_client(self._bootstrap, self.options)

    def initialOffset(self) -> dict:
        """Driver: the starting offsets of a new query, resolved once per run (Spark asks until the first batch)."""
        if self._initial is None:

            def attempt() -> OffsetMap:
                client = self._client()
                try:
                    tps = selected_partitions(client, self.options)
                    earliest = list_offsets(client, self.options, tps, EARLIEST_TIMESTAMP)
                    latest = list_offsets(client, self.options, tps, LATEST_TIMESTAMP)
                    return resolve_bound(
                        client, self.options, tps, self.options.starting, earliest, latest, starting=True
                    )
                finally:
                    client.close()

            self._initial = to_json(
                with_offset_retries(self.options, "resolve the starting offsets", attempt)
            )
        return self._initial

    def _latest_and_new(self, start: OffsetMap) -> tuple[OffsetMap, OffsetMap]:
        """(latest offset of every selected partition, earliest offset of those not in ``start``)."""

        def attempt() -> tuple[OffsetMap, OffsetMap]:
            client = self._client()
            try:
                if self._target is not None:
                    latest = dict(self._target)
                else:
                    latest = list_offsets(
                        client, self.options, selected_partitions(client, self.options), LATEST_TIMESTAMP
                    )
                new = [tp for tp in latest if tp not in start]
                return latest, list_offsets(client, self.options, new, EARLIEST_TIMESTAMP)
            finally:
                client.close()

        return with_offset_retries(self.options, "fetch the latest offsets", attempt)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Driver, every trigger: the end offsets of the next micro-batch (``start`` again: no batch now)."""
        begin = from_json(start)
        self._commit_to_group(begin)  # Spark plans a batch only after the previous one is committed
        latest, earliest_of_new = self._latest_and_new(begin)
        self._latest = latest
        end = latest
        if not isinstance(limit, ReadAllAvailable):
            minimum = self.options.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                minimum = limit.min_rows
            if minimum is not None and self._target is None:
                # Spark's delayBatch; not under Trigger.AvailableNow, which must reach its target.
                now = time.time() * 1000
                pending = available(begin, latest, earliest_of_new)
                if should_delay(
                    minimum, pending, now, self._last_trigger_ms, self.options.max_trigger_delay_ms
                ):
                    return to_json(begin)
                self._last_trigger_ms = now
            if isinstance(limit, ReadMaxRows):
                end = rate_limit(limit.max_rows, begin, latest, earliest_of_new)
        return to_json(end)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Driver: ``maxOffsetsPerTrigger`` as ``ReadMaxRows``, else ``minOffsetsPerTrigger`` as ``ReadMinRows``.

        With both, PySpark can pass one limit only: ``ReadMaxRows``; the minimum (and ``maxTriggerDelay``) is
        applied from the options whenever the engine does not ask for everything."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        """Driver: the latest offsets seen by the last ``latestOffset`` (the progress's ``latestOffset``)."""
        return None if self._latest is None else to_json(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        """Driver, once at the start of a Trigger.AvailableNow query: fix the target at today's latest offsets."""

        def attempt() -> OffsetMap:
            client = self._client()
            try:
                return list_offsets(
                    client, self.options, selected_partitions(client, self.options), LATEST_TIMESTAMP
                )
            finally:
                client.close()

        self._target = with_offset_retries(
            self.options, "fetch the Trigger.AvailableNow target offsets", attempt
        )

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Driver, once per micro-batch: the tasks reading ``[start, end)`` (new partitions from earliest)."""
        begin, until = from_json(start), from_json(end)

        def attempt() -> list[PylogInputPartition]:
            client = self._client()
            try:
                new = [tp for tp in until if tp not in begin]
                earliest_of_new = list_offsets(client, self.options, new, EARLIEST_TIMESTAMP)
                ranges = batch_ranges(begin, until, earliest_of_new, self.options.fail_on_data_loss)
                assert self._bootstrap is not None
                return input_partitions(client, self.options, self._bootstrap, ranges)
            finally:
                client.close()

        return with_offset_retries(self.options, "plan the micro-batch's offset ranges", attempt)

    def commit(self, end: dict) -> None:
        """Driver, when Spark plans the batch after the one ending at ``end`` (it is in Spark's commit log): with
        ``commitOffsetsToGroup=true``, commit ``end`` to the group ``kafka.group.id`` for lag tools."""
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, offsets: OffsetMap) -> None:
        """Commit ``offsets`` to the opted-in group, once per distinct value; a failure is a WARNING (the
        checkpoint, not the group, is the source of truth)."""
        group = self.options.commit_group
        if group is None or not offsets or offsets == self._group_offsets:
            return
        try:
            client = self._client()
            try:
                client.groups.commit_offsets(group, offsets)
            finally:
                client.close()
        except (KafkaError, OSError) as exc:
            log.warning(
                "pylog stream reader: could not commit the offsets %s to consumer group %r (commitOffsetsToGroup; "
                "lag tools show the group's previous offsets until a later trigger's commit succeeds; the query's "
                "checkpoint, not the group, says where it continues): %s",
                to_json(offsets),
                group,
                exc,
            )
            return
        self._group_offsets = dict(offsets)

    # -- executors ---------------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the records of one task's offset range as Arrow batches of the declared schema."""
        # Imported here: the record reading (and its log segment scan) is the executors', not the planning worker's.
        from spark_kafka_log.read.read_task import read_range

        if not isinstance(partition, PylogInputPartition):
            return iter(())
        return read_range(self.options, partition, arrow_schema(self.schema))


def create_stream_reader(options: Mapping[str, str], schema: StructType | None = None) -> PylogStreamReader:
    """Driver: the reader for ``spark.readStream.format("pylog")`` (a bad option fails here, naming it)."""
    parsed = parse_reader_options(options, streaming=True)
    return PylogStreamReader(parsed, checked_reader_schema(parsed.include_headers, schema))
