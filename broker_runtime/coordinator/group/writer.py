"""What the group coordinator writes to ``__consumer_offsets``, and the errors a client is told when it cannot
(the write path of Kafka's ``GroupMetadataManager.appendForGroup`` / ``storeGroup``).

Every write is one batch to the group's partition (:func:`~.log_format.partition_for`), appended through the
``append_records(partition, batch)`` the broker supplies before the client is answered: in a cluster the
leader's append with acks=-1 rules, on a single node :func:`local_appender` (append, then fsync). Both raise
:class:`~broker_runtime.errors.KafkaError` on failure, which :func:`append_error` maps as Kafka's
``appendForGroup`` callbacks do (NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR, NOT_ENOUGH_REPLICAS / timeouts ->
COORDINATOR_NOT_AVAILABLE, a fenced producer -> PRODUCER_FENCED). A transactional batch (TxnOffsetCommit)
continues the producer's sequence on the partition (0 at a new epoch), as the coordinator's own append, so the
partition's producer state and last stable offset follow the transaction. Each partition written is noted in
the ownership's ``appended`` set: the handler waits for its replication (``await_replication``; at once on a
single node) before it answers.

Thread-safety: event-loop thread only (storage calls are synchronous and short).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker_runtime.coordinator.group.log_format import (
    GroupMetadataRecord,
    MemberRecord,
    encode_group_key,
    encode_group_value,
)
from broker_runtime.coordinator.group.state import Group, GroupConfig
from broker_runtime.coordinator.ownership import PartitionOwnership
from broker_runtime.errors import ErrorCode, KafkaError, ProducerStateError
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.storage.partition_log import PartitionLog

__all__ = [
    "AppendRecords",
    "AwaitReplication",
    "GroupWriter",
    "OffsetsLog",
    "Shared",
    "append_error",
    "local_appender",
]

_log = logging.getLogger(__name__)

#: (partition, create) -> the local ``__consumer_offsets`` partition log, or None. ``create`` asks a single node
#: to create the topic on first write; in a cluster the metadata creates it and ``create`` is ignored.
OffsetsLog = Callable[[int, bool], PartitionLog | None]
#: (partition, batch): append one ``__consumer_offsets`` batch (acks=-1 rules in a cluster) or raise KafkaError.
AppendRecords = Callable[[int, bytes], None]
#: (partition, then): call ``then(None)`` once what was appended to the partition is replicated, else
#: ``then(NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE)``.
AwaitReplication = Callable[[int, Callable[[ErrorCode | None], None]], None]

#: A replicated append's error, as the client of the group coordinator is told it (Kafka's GroupMetadataManager).
_APPEND_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorCode.PRODUCER_FENCED,
    ErrorCode.PRODUCER_FENCED: ErrorCode.PRODUCER_FENCED,
}


def append_error(exc: Exception) -> ErrorCode:
    """The error code a client gets when the coordinator's append failed with ``exc``."""
    if isinstance(exc, ProducerStateError):
        return ErrorCode.PRODUCER_FENCED
    if isinstance(exc, KafkaError) and isinstance(exc.code, ErrorCode):
        return _APPEND_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def local_appender(offsets_log: OffsetsLog) -> AppendRecords:
    """A single node's ``append_records``: append to the local partition log (created on first write) and fsync
    it before the answer."""

    def append(partition: int, batch: bytes) -> None:
        log = offsets_log(partition, True)
        if log is None:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"__consumer_offsets-{partition} is not hosted here"
            )
        log.append(bytearray(batch))
        log.flush()

    return append


class GroupWriter:
    """See the module docstring."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        ownership: PartitionOwnership,
        append_records: AppendRecords,
        await_replication: AwaitReplication,
        now_ms: Callable[[], int],
    ) -> None:
        self._offsets_log = offsets_log
        self._ownership = ownership
        self._append_records = append_records
        self._await_replication = await_replication
        self._now_ms = now_ms

    def append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> None:
        """Append one batch to the group's partition (raises on failure); ``producer`` (id, epoch) makes it a
        transactional batch of that producer's open transaction."""
        partition = self._ownership.partition_for(group_id)
        log = self._offsets_log(partition, True)
        if log is None:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"__consumer_offsets-{partition} is not hosted here"
            )
        if producer is None:
            builder = RecordBatchBuilder()
        else:
            producer_id, epoch = producer
            entry = log.producer_state.last_entry(producer_id)
            seq = 0
            if entry is not None and entry.producer_epoch == epoch and entry.last_seq >= 0:
                seq = (entry.last_seq + 1) & 0x7FFFFFFF
            builder = RecordBatchBuilder(
                producer_id=producer_id, producer_epoch=epoch, base_sequence=seq, is_transactional=True
            )
        now = self._now_ms()
        for key, value in records:
            builder.append(now, key, value)
        self._append_records(partition, bytes(builder.build()))
        self._ownership.appended(partition)

    def store_group(self, group: Group) -> ErrorCode:
        """Write the group's metadata record; NONE, or the error its members are told (the failure is logged)."""
        value = GroupMetadataRecord(
            group.protocol_type or "",
            group.generation,
            group.protocol,
            group.leader,
            group.state_timestamp_ms,
            tuple(
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(group.protocol or ""),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )
        try:
            self.append(group.group_id, [(encode_group_key(group.group_id), encode_group_value(value))])
        except Exception as exc:
            _log.warning(
                "group %r: cannot write its metadata to __consumer_offsets (a restart forgets generation %d): %s",
                group.group_id,
                group.generation,
                exc,
            )
            return append_error(exc)
        return ErrorCode.NONE

    def after_write(self, group_id: str, then: Callable[[ErrorCode | None], None]) -> None:
        """Run ``then(None)`` once what was appended to the group's partition is replicated, or ``then(error)``
        when it cannot be (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        self._await_replication(self._ownership.partition_for(group_id), then)


@dataclass(frozen=True, slots=True)
class Shared:
    """What the coordinator's parts (membership, offsets) share: the settings, the one map of groups, the
    ownership check, the writer and the wall clock of record timestamps."""

    config: GroupConfig
    groups: dict[str, Group]
    owner_error: Callable[[str], ErrorCode]
    writer: GroupWriter
    now_ms: Callable[[], int]
