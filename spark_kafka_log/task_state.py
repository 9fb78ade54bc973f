"""Producer identity shared by the attempts of one Spark task, so a retried task does not write twice.

Where this runs: :class:`TaskState` on the **executors**, inside a write task, before anything is sent;
:func:`forget_write` on the **driver** in ``commit()``/``abort()``.

Why: Spark retries a failed task from its first row. The idempotent producer alone only deduplicates
resends of ONE producer id, and a new attempt would get a new id. So the first attempt stores its producer
id and epoch, and for every partition it is about to write, the partition's log end offset before its
first record, in one small JSON file (written atomically, before the corresponding data is sent)::

    <state dir>/<write id>/task-<spark partition id>.json
        {"producer_id": 7, "producer_epoch": 0, "start_offsets": {"events\\u00000": 1200, ...}}

A later attempt finds the file, keeps the same producer id and epoch, and reads each recorded partition
from its start offset (Fetch, batch headers only) to learn the last sequence number that producer wrote
there. Sequence numbers count records per partition from 0, so the retry skips exactly that many of its
own records for the partition and continues with the next sequence number: the broker accepts them in
order and nothing is written twice.

Assumption (documented for users): the retried task sees the same rows in the same order, as Spark
guarantees for deterministic plans. It is checked: the last record the earlier attempt wrote to a partition
must equal the retry's record at that position, else the task fails rather than lose or duplicate data; speculative execution must stay off (two live attempts would share a
producer id). The state dir must be visible to every executor that may run a retry (local mode and the
embedded broker: the data dir; a cluster: a shared path given with ``pylog.producerStateDir``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.errors import KafkaError
from broker_runtime.fsutil import write_atomically
from broker_runtime.protocol.arrow_records import decode_batches
from broker_runtime.protocol.batch_header import iter_batch_spans

__all__ = ["Resume", "TaskIdentity", "TaskState", "forget_write", "last_sequences"]

_SEP = "\u0000"  # topic names cannot contain NUL
_FETCH_BYTES = 8 << 20


@dataclass(frozen=True)
class TaskIdentity:
    """Which write, which Spark partition, which attempt."""

    write_id: str
    task: int
    attempt: int


@dataclass
class TaskState:
    """The JSON file of one task: producer id/epoch and the start offset of each partition it writes."""

    path: Path
    producer_id: int = -1
    producer_epoch: int = -1
    start_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def for_task(cls, state_dir: str, identity: TaskIdentity) -> TaskState:
        return cls(Path(state_dir) / identity.write_id / f"task-{identity.task}.json")

    def load(self) -> bool:
        """Read the file of an earlier attempt; False when there is none (nothing was sent before)."""
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return False
        self.producer_id = int(doc["producer_id"])
        self.producer_epoch = int(doc["producer_epoch"])
        self.start_offsets = {}
        for key, offset in doc["start_offsets"].items():
            topic, _, partition = key.rpartition(_SEP)
            self.start_offsets[(topic, int(partition))] = int(offset)
        return True

    def save(self) -> None:
        """Write the file atomically and durably (:func:`broker_runtime.fsutil.write_atomically`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "start_offsets": {f"{t}{_SEP}{p}": o for (t, p), o in self.start_offsets.items()},
        }
        write_atomically(self.path, json.dumps(doc).encode())


@dataclass(frozen=True)
class Resume:
    """Where an earlier attempt's producer stopped in one partition."""

    last_sequence: int  # -1: it wrote nothing there
    last_key: bytes | None = None  # the key and value of that last record, to check the retry's input
    last_value: bytes | None = None


def last_sequences(client: KafkaClient, state: TaskState) -> dict[tuple[str, int], Resume]:
    """Per recorded partition, the last record ``state.producer_id`` wrote there (batch headers walk)."""
    out: dict[tuple[str, int], Resume] = {}
    for (topic, partition), start in state.start_offsets.items():
        last = -1
        last_batch = b""
        offset = start
        while True:
            result = client.fetch(
                {(topic, partition): offset},
                max_bytes=_FETCH_BYTES,
                partition_max_bytes=_FETCH_BYTES,
                max_wait_ms=0,
                min_bytes=0,
            )[(topic, partition)]
            if result.error:
                raise KafkaError(result.error, f"Fetch {topic}-{partition} at offset {offset}")
            data, high_watermark = bytes(result.records or b""), result.high_watermark
            spans = iter_batch_spans(data)
            for position, header in spans:
                if header.producer_id == state.producer_id and header.base_sequence >= 0:
                    seq = header.base_sequence + header.last_offset_delta
                    if seq > last:
                        last, last_batch = seq, bytes(data[position : position + header.size])
            if not spans:
                break
            offset = spans[-1][1].next_offset
            if offset >= high_watermark:
                break
        if last < 0:
            out[(topic, partition)] = Resume(-1)
            continue
        records = decode_batches(last_batch)
        key = records.column("key")[records.num_rows - 1].as_py()
        value = records.column("value")[records.num_rows - 1].as_py()
        out[(topic, partition)] = Resume(last, key, value)
    return out


def forget_write(state_dir: str | None, write_id: str) -> None:
    """Remove the task files of a finished write (driver, after commit or abort)."""
    if state_dir:
        with contextlib.suppress(OSError):
            shutil.rmtree(Path(state_dir) / write_id)
