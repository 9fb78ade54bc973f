"""Helpers of the storage tests: batches built by kafka-python (an independent implementation) and a
controllable clock."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords


class FakeClock:
    """A zero-arg millisecond clock the test moves by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_batch(
    count: int = 1,
    *,
    timestamps: Sequence[int] | None = None,
    ts: int = 1_000,
    value_size: int = 10,
    base_offset: int = 0,
) -> bytes:
    """One uncompressed magic-2 batch of ``count`` records built by kafka-python (base offset 0 unless given)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    stamps = list(timestamps) if timestamps is not None else [ts + i for i in range(count)]
    for i, t in enumerate(stamps):
        builder.append(i, timestamp=t, key=None, value=bytes([i % 251]) * value_size, headers=[])
    data = bytearray(builder.build())
    if base_offset:
        data[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(data)


#: The producer id :func:`idempotent_batch` uses unless told otherwise.
PID = 4242


def idempotent_batch(
    seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0, ts: int = 1_700_000_000_000
) -> bytes:
    """An uncompressed idempotent batch built by kafka-python (base offset 0, as a producer sends it)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        batch_size=1 << 30,
    )
    for i in range(count):
        builder.append(i, timestamp=ts + i, key=None, value=b"v" * 20, headers=[])
    return bytes(builder.build())


def decode_all(data: bytes) -> list[tuple[int, int, int]]:
    """(batch base offset, record offset, record timestamp) for every record, decoded by kafka-python."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"bad CRC in batch at base offset {batch.base_offset}"
        for rec in batch:
            out.append((batch.base_offset, rec.offset, rec.timestamp))
    return out
