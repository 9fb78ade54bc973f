"""The exactly-once streaming sink's log: ``<checkpointLocation>/pylog-sink/<batchId>.json``, one file per micro-batch.

Where this runs: the **driver** only, in the Python workers where PySpark calls ``streamWriter()`` (before the
micro-batch's tasks start) and ``commit()`` / ``abort()`` (after they ended). One run of a query at a time
writes it (Spark refuses to start a second active run of one checkpoint); no locking, no threads.

Format (version 1): one UTF-8 JSON object per file, written whole with
:func:`broker_runtime.fsutil.write_atomically` (a crash leaves the old content or the new, never a mix)::

    {"version": 1, "batchId": 7, "status": "prepared" | "committed", "queryId": "<Spark query id>",
     "transactions": [{"transactionalId": "pylog-stream-<query id>-0", "producerId": 4000, "producerEpoch": 3,
                       "partitions": [["events", 0], ...], "startedMs": ..., "timeoutMs": 60000}, ...],
     "records": 1200, "partitions": [{"topic": "events", "partition": 0, "records": ..., "first_offset": ...}],
     "tasksEndedAtMs": 1795437640530, "commitCalledAtMs": 1795437640601, "preparedAtMs": 1795437640646,
     "committedAtMs": 1795437640711}

(``partitions`` per transaction, its start and timeout only explain a failure; ``tasksEndedAtMs``, the end of
the micro-batch's last task, ``commitCalledAtMs``, when Spark called ``commit()``, and the two stamps after
them show where the commit's time goes.)

Invariants (kept by :mod:`spark_kafka_log.stream_commit`):

* an entry is written ``prepared``, naming every transaction of the micro-batch, BEFORE the first EndTxn of
  that micro-batch, and rewritten ``committed`` after the last EndTxn(commit) succeeded;
* batch ids of entries only grow, and only the newest entry can be ``prepared`` (the next micro-batch is
  planned only after this one's ``commit()`` returned);
* ``batchId <= newest committed batchId`` means that micro-batch's rows are in the topic (the same rule as
  Spark's own file sink): a re-run of it must not make anything visible again.

Retention: the newest :data:`RETAINED_ENTRIES` entries are kept (Spark's ``minBatchesToRetain`` default); older
files are removed after a commit.

Checkpoint locations: a local path or a ``file:`` URI (the same directory Spark writes its checkpoint into).
Any other scheme (``hdfs:``, ``s3a:``, ``abfss:``, ...) is refused with a :class:`ConfigError` naming it: the
Python workers that run ``commit()`` have no access to Spark's Hadoop file systems, and pylog ships no other
client for them yet.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from broker_runtime.errors import ConfigError, StreamingSinkError
from broker_runtime.fsutil import write_atomically
from spark_kafka_log.txn_commit import TaskTransaction

__all__ = [
    "COMMITTED",
    "PREPARED",
    "RETAINED_ENTRIES",
    "SINK_DIR",
    "SinkEntry",
    "SinkLog",
    "checkpoint_dir",
    "query_id",
]

#: The sink's folder inside the query's checkpoint location.
SINK_DIR = "pylog-sink"
#: Entries kept (the newest ones); Spark's ``spark.sql.streaming.minBatchesToRetain`` default.
RETAINED_ENTRIES = 100
PREPARED = "prepared"
COMMITTED = "committed"
_VERSION = 1
_ENTRY = re.compile(r"^(\d+)\.json$")


def checkpoint_dir(location: str) -> str:
    """The local directory of a checkpoint location given as a path or a ``file:`` URI (absolute).

    Relative paths resolve against the working directory, as Spark's local file system does (the driver's
    Python workers run in the driver's working directory).
    """
    text = location.strip()
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else text
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise ConfigError(
                f"checkpointLocation {location!r}: a file: URI with a host ({parsed.netloc!r}) is not a local "
                "path; give file:///path or a plain path"
            )
        return os.path.abspath(path)
    if len(parsed.scheme) == 1:  # a Windows drive letter, "C:\\..."
        return os.path.abspath(text)
    raise ConfigError(
        f"checkpointLocation {location!r}: the pylog streaming sink keeps its exactly-once log in the checkpoint "
        f"and supports local paths and file: URIs, not {parsed.scheme}: (yet). Use a local or shared-mount "
        "path, or write at-least-once without the log (see the README's streaming sink section)"
    )


def query_id(checkpoint: str) -> str:
    """The streaming query's id from ``<checkpoint>/metadata`` (Spark's ``StreamMetadata``, written at query start).

    Stable across restarts from the same checkpoint, unlike the run id.
    """
    path = os.path.join(checkpoint, "metadata")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise StreamingSinkError(
            f"cannot read the streaming query's id from {path} ({e.strerror or e}): the pylog sink derives its "
            "transactional ids from it; is checkpointLocation the query's checkpoint directory?"
        ) from None
    try:
        ident = json.loads(text.splitlines()[0] if text else "")["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise StreamingSinkError(f"{path} holds no query id ({text[:80]!r})") from None
    if not isinstance(ident, str) or not ident:
        raise StreamingSinkError(f"{path} holds no query id ({text[:80]!r})")
    return ident


def _txn_json(t: TaskTransaction) -> dict[str, Any]:
    return {
        "transactionalId": t.transactional_id,
        "producerId": t.producer_id,
        "producerEpoch": t.producer_epoch,
        "partitions": [[topic, p] for topic, p in t.partitions],
        "startedMs": t.started_ms,
        "timeoutMs": t.timeout_ms,
    }


def _txn_from_json(doc: dict[str, Any]) -> TaskTransaction:
    return TaskTransaction(
        str(doc["transactionalId"]),
        int(doc["producerId"]),
        int(doc["producerEpoch"]),
        tuple((str(topic), int(p)) for topic, p in doc.get("partitions", [])),
        int(doc.get("startedMs", -1)),
        int(doc.get("timeoutMs", -1)),
    )


@dataclass
class SinkEntry:
    """What the sink log says about one micro-batch."""

    batch_id: int
    status: str
    query_id: str
    transactions: list[TaskTransaction]
    records: int = 0
    partitions: list[dict[str, Any]] = field(default_factory=list)
    tasks_ended_at_ms: int = -1
    commit_called_at_ms: int = -1
    prepared_at_ms: int = 0
    committed_at_ms: int | None = None

    @property
    def committed(self) -> bool:
        return self.status == COMMITTED

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "batchId": self.batch_id,
            "status": self.status,
            "queryId": self.query_id,
            "transactions": [_txn_json(t) for t in self.transactions],
            "records": self.records,
            "partitions": self.partitions,
            "tasksEndedAtMs": self.tasks_ended_at_ms,
            "commitCalledAtMs": self.commit_called_at_ms,
            "preparedAtMs": self.prepared_at_ms,
            "committedAtMs": self.committed_at_ms,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SinkEntry:
        if doc.get("version") != _VERSION:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        status = doc["status"]
        if status not in (PREPARED, COMMITTED):
            raise ValueError(f"unknown status {status!r}")
        return cls(
            batch_id=int(doc["batchId"]),
            status=status,
            query_id=str(doc["queryId"]),
            transactions=[_txn_from_json(t) for t in doc["transactions"]],
            records=int(doc.get("records", 0)),
            partitions=list(doc.get("partitions", [])),
            tasks_ended_at_ms=int(doc.get("tasksEndedAtMs", -1)),
            commit_called_at_ms=int(doc.get("commitCalledAtMs", -1)),
            prepared_at_ms=int(doc.get("preparedAtMs", 0)),
            committed_at_ms=doc.get("committedAtMs"),
        )


class SinkLog:
    """The entries under ``<checkpoint>/pylog-sink/`` (see the module docstring)."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.directory = os.path.join(checkpoint, SINK_DIR)

    def path(self, batch_id: int) -> str:
        return os.path.join(self.directory, f"{batch_id}.json")

    def batch_ids(self) -> list[int]:
        """Batch ids with an entry, ascending (none when the folder does not exist yet)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StreamingSinkError(f"cannot list the pylog sink log {self.directory}: {e}") from None
        return sorted(int(m.group(1)) for m in map(_ENTRY.match, names) if m)

    def read(self, batch_id: int) -> SinkEntry:
        path = self.path(batch_id)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            entry = SinkEntry.from_json(doc)
        except OSError as e:
            raise StreamingSinkError(f"cannot read the pylog sink log entry {path}: {e}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise StreamingSinkError(
                f"the pylog sink log entry {path} is corrupt ({e}); it was written atomically, so something "
                "else changed it. Restore it, or remove it only if you know how that micro-batch ended"
            ) from None
        if entry.batch_id != batch_id:
            raise StreamingSinkError(f"the pylog sink log entry {path} names batch {entry.batch_id}")
        return entry

    def newest(self) -> SinkEntry | None:
        """The entry of the highest batch id, or None when the log is empty."""
        ids = self.batch_ids()
        return self.read(ids[-1]) if ids else None

    def write(self, entry: SinkEntry) -> None:
        """Replace (or create) the entry of ``entry.batch_id`` durably and atomically."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            write_atomically(self.path(entry.batch_id), json.dumps(entry.to_json(), indent=1).encode())
        except OSError as e:
            raise StreamingSinkError(
                f"cannot write the pylog sink log entry {self.path(entry.batch_id)}: {e}"
            ) from None

    def mark_committed(self, entry: SinkEntry) -> SinkEntry:
        """Rewrite ``entry`` as committed (now) and drop entries beyond the retained ones."""
        entry.status = COMMITTED
        entry.committed_at_ms = int(time.time() * 1000)
        self.write(entry)
        self._purge()
        return entry

    def _purge(self) -> None:
        ids = self.batch_ids()
        for batch_id in ids[:-RETAINED_ENTRIES]:
            try:
                os.remove(self.path(batch_id))
            except FileNotFoundError:
                pass
            except OSError:
                return  # harmless: old committed entries are only kept for the record
