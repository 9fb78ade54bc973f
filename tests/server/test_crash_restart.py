"""A broker process SIGKILLed under an idempotent librdkafka producer, restarted on the same directory and port.

Small segments (many rolls, so the recovery point moves during the run). Checked: every acknowledged record is
in the log exactly once and in order, the producer carries on across the restart without a sequence error
(OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID would be fatal for an idempotent producer), and -- in the torn
variant, with bytes cut off the active segment and a bit flipped in the oldest one while the broker was down --
what the recovery policy says: the tail is cut at the torn batch with a WARNING in the broker's log, the old
segment is not re-validated (every later record survives) and its corruption is reported when it is read.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker_runtime.client import KafkaClient
from broker_runtime.errors import CorruptRecordError
from broker_runtime.launch import broker_process, create_topic
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.records import read_batches
from tests.server.rawclient import RawConnection, produce_body
from tests.support.processes import kill_broker

pytestmark = pytest.mark.timeout(180)

TOPIC = "crash"
SEGMENT_BYTES = 4096


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _broker(data: Path, port: int) -> Iterator[str]:
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.segment.bytes": str(SEGMENT_BYTES)}
    with broker_process(data, overrides) as bootstrap:
        yield bootstrap


class _Producing:
    """An idempotent confluent-kafka producer of the values 0, 1, 2, ... and what it was told."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[int] = []
        self.errors: list[Any] = []
        self.fatal: list[Any] = []
        self.next_value = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.num.messages": 40,
                "message.timeout.ms": 90000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 300,
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append(int(msg.value()))

    def produce(self, count: int) -> None:
        for _ in range(count):
            value = str(self.next_value).encode()
            while True:
                try:
                    self.producer.produce(TOPIC, value=value, partition=0, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.next_value += 1
            self.producer.poll(0)

    def produce_until_acked(self, acked: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < acked:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {acked} acknowledged"
            if len(self.producer) < 400:  # keep a few batches in flight, not a backlog
                self.produce(40)
            self.producer.poll(0.005)

    def flush(self) -> None:
        assert self.producer.flush(90) == 0, "records left unacknowledged"

    def close(self) -> None:
        """Drop the producer now (its callbacks refer back here: without this, only a GC pass would)."""
        self.producer.flush(0)
        del self.producer


def _values(bootstrap: str) -> list[int]:
    """Every record of the partition, read from offset 0 by a librdkafka consumer (dense offsets required)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < high:
            assert time.monotonic() < deadline, f"read {len(values)} of {high}"
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                assert msg.offset() == len(values)
                values.append(int(msg.value()))
        return values
    finally:
        consumer.close()


def _segments(data: Path) -> list[Path]:
    return sorted((data / "logs" / f"{TOPIC}-0").glob("*.log"))


def test_sigkill_mid_produce_loses_nothing_acknowledged_and_the_producer_continues(tmp_path: Path) -> None:
    data, port = tmp_path / "broker", _free_port()
    with _broker(data, port) as bootstrap:
        create_topic(bootstrap, TOPIC, 1)
        producing = _Producing(bootstrap)
        producing.produce_until_acked(3000)
        producing.produce(300)  # in flight when the broker dies
        kill_broker(data)
        acked_at_kill = len(producing.acked)
        producing.produce(500)  # queued while the broker is down
    assert len(_segments(data)) > 3
    with _broker(data, port) as bootstrap:
        producing.flush()
        producing.produce(1000)
        producing.flush()
        values = _values(bootstrap)
        with KafkaClient(bootstrap) as client:
            tail = client.fetch({(TOPIC, 0): len(values) - 1}, max_wait_ms=0)[(TOPIC, 0)]
        assert tail.records is not None
        [last] = list(read_batches(tail.records, allow_partial_tail=True))
        kill_broker(data)  # a second crash, then the last batch again, as a producer's retry would send it
    producing.close()
    assert not producing.fatal and not producing.errors, (producing.fatal, producing.errors[:3])
    assert len(producing.acked) > acked_at_kill
    assert values == list(range(producing.next_value)), "every record once, in order"
    assert sorted(producing.acked) == values
    assert last.producer_id >= 0 and last.last_offset == len(values) - 1
    with _broker(data, port) as bootstrap, RawConnection(bootstrap) as conn:
        resend = bytearray(last.raw())
        resend[0:8] = bytes(8)  # base offset 0, as a producer sends it (outside the CRC)
        answer = conn.call(ApiKey.PRODUCE, 9, produce_body(TOPIC, 0, resend, acks=-1))
        partition = answer["Responses"][0]["PartitionResponses"][0]
        assert (partition["ErrorCode"], partition["BaseOffset"]) == (0, last.base_offset), "a duplicate"
        assert _values(bootstrap) == values, "the restarted broker still knows the producer's sequence"


def test_torn_active_segment_and_flipped_old_segment(tmp_path: Path) -> None:
    data, port = tmp_path / "broker", _free_port()
    with _broker(data, port) as bootstrap:
        create_topic(bootstrap, TOPIC, 1)
        producing = _Producing(bootstrap)
        producing.produce_until_acked(3000)
        producing.flush()
        kill_broker(data)
    producing.close()
    segments = _segments(data)
    assert len(segments) > 3
    active, oldest = segments[-1], segments[0]
    size = active.stat().st_size
    os.truncate(active, size - 5)  # tears the last batch
    with open(oldest, "r+b") as f:  # one bit inside the first batch's records (the CRC covers them)
        f.seek(8)
        batch_length = int.from_bytes(f.read(4), "big")  # bytes after the length field; records from 61
        assert batch_length > 49, "the first batch holds at least one record"
        # Not a fixed position: with a small first batch one could land in the second batch's base offset,
        # which no CRC covers (then nothing is corrupt as far as the CRC can tell).
        pos = 61 + (12 + batch_length - 61) // 2
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0x04]))
    log_size = (data / "broker.log").stat().st_size
    with _broker(data, port) as bootstrap, KafkaClient(bootstrap) as client:
        result = client.fetch({(TOPIC, 0): 0}, max_wait_ms=0)[(TOPIC, 0)]
        leo = result.high_watermark
        assert result.records is not None
        with pytest.raises(CorruptRecordError, match="CRC-32C"):
            list(read_batches(result.records, allow_partial_tail=True))
        later = client.fetch({(TOPIC, 0): leo - 1}, max_wait_ms=0)[(TOPIC, 0)]
        assert later.records is not None
        assert [b.last_offset for b in read_batches(later.records, allow_partial_tail=True)][-1] == leo - 1
    log = (data / "broker.log").read_text()[log_size:]
    torn = [line for line in log.splitlines() if "recovery truncated segment" in line]
    assert len(torn) == 1 and f"{TOPIC}-0: recovery truncated segment {active.name}" in torn[0], log
    assert "WARNING" in torn[0] and f"offset {leo}" in torn[0] and "byte(s) dropped" in torn[0]
    assert "recovery deleted segment" not in log
    # Everything acknowledged before the torn batch is there: the cut lost only that last batch.
    assert len(producing.acked) - 40 <= leo < len(producing.acked)
