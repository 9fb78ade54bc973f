"""The records of the ``__transaction_state`` topic, in Kafka's format (``TransactionLogKey`` /
``TransactionLogValue``), and the partition a transactional id maps to.

Record key: int16 key version (0), then ``TransactionLogKey`` v0 (``TransactionalId``: int16 length + UTF-8).
Record value: int16 value version, then ``TransactionLogValue`` of that version::

    ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8,
    TransactionPartitions [Topic string, PartitionIds [int32]] (nullable), TransactionLastUpdateTimestampMs int64,
    TransactionStartTimestampMs int64
    v1 (flexible) adds the tagged fields PreviousProducerId (tag 0), NextProducerId (tag 1) and
    ClientTransactionVersion (tag 2)

Version 1 is written, as a Kafka broker does from ``transaction.version`` 1 (``TransactionVersion.
transactionLogValueVersion``; pylog finalizes level 2, see ``server/features.py``); version 0 records (written by
earlier pylog releases) are read with the tagged fields at their defaults (-1, -1, 0). A null value (tombstone)
removes the transactional id (its expiration). The partition of a transactional id is Kafka's ``abs(String.hashCode) % partitions``
(:func:`partition_for`, from :mod:`broker_runtime.coordinator.placement`), so a Kafka tool finds the same partition. Pure functions: thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_runtime.coordinator.placement import java_string_hash, partition_for
from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "VALUE_VERSION",
    "TxnLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"

_VERSION = struct.Struct(">h")
#: The value version written (see the module docstring).
VALUE_VERSION = 1

_KEY = Message(
    "TransactionLogKey",
    api_key=-1,
    versions="0",
    flexible="none",
    fields=[Field("TransactionalId", "string", "0")],
)

_VALUE = Message(
    "TransactionLogValue",
    api_key=-1,
    versions="0-1",
    flexible="1+",
    fields=[
        Field("ProducerId", "int64", "0+"),
        Field("PreviousProducerId", "int64", "1+", default=-1, tag=0, tagged="1+"),
        Field("NextProducerId", "int64", "1+", default=-1, tag=1, tagged="1+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("TransactionTimeoutMs", "int32", "0+"),
        Field("TransactionStatus", "int8", "0+"),
        Field(
            "TransactionPartitions",
            "[]PartitionsSchema",
            "0+",
            nullable="0+",
            fields=[Field("Topic", "string", "0+"), Field("PartitionIds", "[]int32", "0+")],
        ),
        Field("TransactionLastUpdateTimestampMs", "int64", "0+"),
        Field("TransactionStartTimestampMs", "int64", "0+"),
        Field("ClientTransactionVersion", "int16", "1+", default=0, tag=2, tagged="1+"),
    ],
)


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One decoded ``TransactionLogValue``."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    #: The producer id before the last rotation (transaction version 2: the epoch ran out at an EndTxn), -1 if none.
    previous_producer_id: int = -1
    #: The producer id a Prepare state rotates to once its markers are written (transaction version 2), -1 if none.
    next_producer_id: int = -1
    #: The transaction version of the client's requests that made this state (0, or 2 for EndTxn v5 / the
    #: partitions a leader adds for Produce v12 and TxnOffsetCommit v5).
    client_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    return _VERSION.pack(0) + _KEY.encode({"TransactionalId": transactional_id}, 0)


def encode_value(value: TxnLogValue) -> bytes:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        topics.setdefault(topic, []).append(partition)
    body = {
        "ProducerId": value.producer_id,
        "ProducerEpoch": value.producer_epoch,
        "TransactionTimeoutMs": value.timeout_ms,
        "TransactionStatus": value.status,
        "TransactionPartitions": [{"Topic": t, "PartitionIds": ps} for t, ps in topics.items()],
        "TransactionLastUpdateTimestampMs": value.last_update_ms,
        "TransactionStartTimestampMs": value.start_ms,
        "PreviousProducerId": value.previous_producer_id,
        "NextProducerId": value.next_producer_id,
        "ClientTransactionVersion": value.client_version,
    }
    return _VERSION.pack(VALUE_VERSION) + _VALUE.encode(body, VALUE_VERSION)


def decode_key(data: bytes | memoryview) -> str:
    """The transactional id of a record key; raises :class:`CorruptRecordError` for anything else."""
    if len(data) < _VERSION.size:
        raise CorruptRecordError(f"transaction log key of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != 0:
        raise CorruptRecordError(f"transaction log key version {version} is not 0")
    body, _ = _KEY.decode(data, _VERSION.size, 0)
    return str(body["TransactionalId"])


def decode_value(data: bytes | memoryview) -> TxnLogValue:
    if len(data) < _VERSION.size:
        raise CorruptRecordError(f"transaction log value of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version not in (0, 1):
        raise CorruptRecordError(f"transaction log value version {version} is not 0 or 1")
    body, _ = _VALUE.decode(data, _VERSION.size, version)
    partitions = frozenset(
        (t["Topic"], p) for t in body["TransactionPartitions"] or () for p in t["PartitionIds"]
    )
    return TxnLogValue(
        body["ProducerId"],
        body["ProducerEpoch"],
        body["TransactionTimeoutMs"],
        body["TransactionStatus"],
        partitions,
        body["TransactionLastUpdateTimestampMs"],
        body["TransactionStartTimestampMs"],
        body.get("PreviousProducerId", -1),
        body.get("NextProducerId", -1),
        body.get("ClientTransactionVersion", 0),
    )
