"""Spark-write provenance records: the one home of their topic and format. The connector's driver writes one
after each committed ``format("pylog")`` write (:mod:`spark_kafka_log.common.write_provenance`); the web console
reads them (:mod:`broker_runtime.console.spark_writes`).

Carrier: the topic :data:`TOPIC` (``__pylog_spark_writes``), one partition, ``cleanup.policy=compact,delete``
(compacted by key, so a write recorded twice keeps one record; deleted after :data:`RETENTION_MS`, so the topic
stays small), created on first use with the cluster's ``default.replication.factor`` (CreateTopics
``ReplicationFactor`` -1, KIP-464). A plain Kafka topic, so it works on Apache Kafka as well; record headers on
the data records would cost bytes on every record instead of one record per write.

Record: key = the write id (UTF-8); value = UTF-8 JSON object, version :data:`VERSION`::

    {"v": 1, "writeId": "write-<hex>", "kind": "batch" | "stream", "queryId": str | null,
     "batchId": int | null, "delivery": "idempotent" | "transactional" | "at-least-once" | "exactly-once"
     (followed by " (acks=N)" when acks is not all), "tasks": int, "rows": int, "bytes": int,
     "committedMs": int, "partitions": [[topic, partition, first offset, last offset, rows], ...]}

``rows`` counts the records the write made visible (a retried task's earlier attempts included); a partition's
offsets are -1 when unknown (``acks=0``). Nothing else is recorded: no option values (they may hold secrets), no
host names. A reader refuses (ValueError) a value that does not parse or is of a later version. Pure data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["RETENTION_MS", "TOPIC", "TOPIC_CONFIGS", "VERSION", "SparkWrite"]

TOPIC = "__pylog_spark_writes"
VERSION = 1
#: 30 days: long enough to trace last month's jobs, short enough to stay small (each write has its own key).
RETENTION_MS = 30 * 24 * 3600 * 1000
TOPIC_CONFIGS = {"cleanup.policy": "compact,delete", "retention.ms": str(RETENTION_MS)}


@dataclass(frozen=True)
class SparkWrite:
    write_id: str
    kind: str
    query_id: str | None
    batch_id: int | None
    delivery: str
    tasks: int
    rows: int
    #: bytes the tasks sent (the records' batches)
    size: int
    committed_ms: int
    #: (topic, partition, first offset, last offset, rows)
    partitions: tuple[tuple[str, int, int, int, int], ...]

    def to_value(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "writeId": self.write_id,
                "kind": self.kind,
                "queryId": self.query_id,
                "batchId": self.batch_id,
                "delivery": self.delivery,
                "tasks": self.tasks,
                "rows": self.rows,
                "bytes": self.size,
                "committedMs": self.committed_ms,
                "partitions": [list(p) for p in self.partitions],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_value(value: bytes) -> SparkWrite:
        """Parse a record value; ValueError (naming what is wrong) for anything not of :data:`VERSION`."""
        try:
            obj: Any = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict) or obj.get("v") != VERSION:
            raise ValueError(f"not a version {VERSION} record")
        try:
            parts = tuple(
                (str(t), int(p), int(first), int(last), int(rows))
                for t, p, first, last, rows in obj["partitions"]
            )
            batch = obj.get("batchId")
            query = obj.get("queryId")
            return SparkWrite(
                str(obj["writeId"]),
                str(obj["kind"]),
                None if query is None else str(query),
                None if batch is None else int(batch),
                str(obj["delivery"]),
                int(obj["tasks"]),
                int(obj["rows"]),
                int(obj["bytes"]),
                int(obj["committedMs"]),
                parts,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"field missing or of the wrong type: {exc!r}") from None

    def touches(self, topic: str) -> bool:
        return any(p[0] == topic for p in self.partitions)
