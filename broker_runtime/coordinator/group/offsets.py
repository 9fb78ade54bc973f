"""Committed offsets of groups (Kafka's ``OffsetMetadataManager``): OffsetCommit, TxnOffsetCommit and their
completion by transaction markers, OffsetFetch, OffsetDelete, ``offsets.retention.minutes`` expiration.

* :meth:`OffsetManager.commit`: a commit from a member of the current generation (its session timer restarts;
  REBALANCE_IN_PROGRESS while the group completes a rebalance), or a "simple" commit (generation -1, no member
  id) while the group has no member (consumers using ``assign()``); ILLEGAL_GENERATION for a simple commit into
  a group with members, GROUP_ID_NOT_FOUND for a generation (>= 0) of a group that does not exist. A partition of an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, metadata longer than
  ``offset.metadata.max.bytes`` OFFSET_METADATA_TOO_LARGE; the others are appended as one batch
  (:class:`~.writer.GroupWriter`) before the answer and only then visible.
* :meth:`OffsetManager.txn_commit`: as a commit, but the records are a transactional batch of the producer and
  the offsets stay pending per producer id (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with RequireStable:
  :meth:`OffsetManager.pending`) until :meth:`OffsetManager.complete_txn` (the producer's COMMIT/ABORT marker on
  the group's partition, at once or on replay) makes them committed or drops them, as Kafka's
  ``handleTxnCompletion``. A member id or generation (v3+, KIP-447) is checked against the group; without them
  (v0-2) the commit is taken whatever the group's members, as Kafka does.
* :meth:`OffsetManager.fetch` answers from memory (None: no committed offset).
* :meth:`OffsetManager.expire` (periodic): in a group without members, offsets committed longer ago than the
  retention are removed (tombstones written), as Kafka does for Empty groups; a group left with no offset and no
  member is forgotten (its metadata tombstoned).
* :meth:`OffsetManager.delete` (OffsetDelete, KIP-496): a partition of a topic the members subscribe to is
  GROUP_SUBSCRIBED_TO_TOPIC; the others are removed (tombstones written).

The in-memory state follows the leader's own log at once (a commit whose replication then fails is visible on
this leader, as it is in its log; a new leader that lacks it never had it).

Thread-safety: event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker_runtime.coordinator.group import consumer_records
from broker_runtime.coordinator.group.log_format import (
    OffsetRecord,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from broker_runtime.coordinator.group.membership import GroupMembership
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState
from broker_runtime.coordinator.group.writer import Shared, append_error
from broker_runtime.errors import ErrorCode, KafkaError, ProducerStateError
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = ["Committer", "OffsetManager", "Offsets"]

_log = logging.getLogger(__name__)

#: (topic, partition) -> (offset, leader epoch, metadata) of a commit request.
Offsets = dict[TopicPartition, tuple[int, int, str | None]]


@dataclass(frozen=True, slots=True)
class Committer:
    """Who commits: a member of a generation, or nobody (generation -1, no member id: a "simple" commit of a
    consumer using ``assign()``; a TxnOffsetCommit before v3)."""

    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetManager:
    """See the module docstring. ``groups`` is the coordinator's map, shared with the membership."""

    def __init__(
        self,
        shared: Shared,
        membership: GroupMembership,
        partition_for: Callable[[str], int],
        topic_partitions: Callable[[str], int | None],
    ) -> None:
        self.config = shared.config
        self._groups = shared.groups
        self._owner_error = shared.owner_error
        self._writer = shared.writer
        self._membership = membership
        self._partition_for = partition_for
        self._topic_partitions = topic_partitions
        self._now_ms = shared.now_ms

    def _refused(self, group_id: str, offsets: Offsets) -> dict[TopicPartition, ErrorCode] | None:
        """Every partition's error when the request cannot reach a group (no id, another coordinator's)."""
        if not group_id:
            return dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID)
        if self._owner_error(group_id) != ErrorCode.NONE:
            return dict.fromkeys(offsets, ErrorCode.NOT_COORDINATOR)
        return None

    def _live(self, group_id: str) -> Group | None:
        group = self._groups.get(group_id)
        return None if group is None or group.state == GroupState.DEAD else group

    def _records(
        self, group_id: str, offsets: Offsets
    ) -> tuple[
        list[tuple[bytes, bytes | None]],
        dict[TopicPartition, CommittedOffset],
        dict[TopicPartition, ErrorCode],
    ]:
        """The records of a commit, the offsets they carry, and the errors of the partitions refused."""
        result: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        now = self._now_ms()
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            count = self._topic_partitions(topic)
            if count is None or not 0 <= partition < count:
                result[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            meta = metadata or ""
            if len(meta.encode()) > self.config.offset_metadata_max_bytes:
                result[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            value = OffsetRecord(offset, epoch, meta, now)
            records.append((encode_offset_key(group_id, topic, partition), encode_offset_value(value)))
            accepted[(topic, partition)] = CommittedOffset(offset, epoch, meta, now)
        return records, accepted, result

    def commit(
        self, group_id: str, committer: Committer, offsets: Offsets
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: ``(topic, partition) -> (offset, leader epoch, metadata)``; an error per partition."""
        refused = self._refused(group_id, offsets)
        if refused is not None:
            return refused
        generation, member_id = committer.generation, committer.member_id
        group = self._live(group_id)
        if group is not None and group.consumer is not None:
            code = self._check_consumer_member(group, committer)
            if code != ErrorCode.NONE:
                return dict.fromkeys(offsets, code)
        elif generation < 0 and not member_id:
            if group is not None and group.members:
                return dict.fromkeys(
                    offsets, ErrorCode.ILLEGAL_GENERATION
                )  # a simple commit into an active group
        elif group is None and generation >= 0:
            # Kafka: a generation for a group that does not exist; OffsetCommit before v9 answers it
            # ILLEGAL_GENERATION instead (the handler's part)
            return dict.fromkeys(offsets, ErrorCode.GROUP_ID_NOT_FOUND)
        else:
            code, member = self._membership.check_member(
                group, member_id, committer.group_instance_id, generation
            )
            if code != ErrorCode.NONE or group is None or member is None:
                return dict.fromkeys(offsets, code)
            if group.state == GroupState.COMPLETING_REBALANCE:
                return dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS)
            self._membership.touch(group, member)
        records, accepted, result = self._records(group_id, offsets)
        if records:
            try:
                self._writer.append(group_id, records)
            except Exception as exc:
                _log.warning("group %r: offset commit not stored in __consumer_offsets: %s", group_id, exc)
                return {**result, **dict.fromkeys(accepted, append_error(exc))}
            if group is None:
                group = self._groups[group_id] = Group(group_id)
            group.offsets.update(accepted)
            result.update(dict.fromkeys(accepted, ErrorCode.NONE))
        return result

    @staticmethod
    def _check_consumer_member(group: Group, committer: Committer) -> ErrorCode:
        """A commit into a consumer group (KIP-848, Kafka's ``ConsumerGroup.validateOffsetCommit``): without a
        member (epoch < 0) only while the group has no member; else the member must be known
        (UNKNOWN_MEMBER_ID) and commit at its own member epoch (STALE_MEMBER_EPOCH)."""
        cg = group.consumer
        assert cg is not None
        if committer.generation < 0 and not cg.members:
            return ErrorCode.NONE
        member = cg.members.get(committer.member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if committer.generation != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def txn_commit(
        self, group_id: str, producer: tuple[int, int], committer: Committer, offsets: Offsets
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit of ``producer`` (id, epoch): see the module docstring."""
        refused = self._refused(group_id, offsets)
        if refused is not None:
            return refused
        group = self._live(group_id)
        if committer.generation >= 0 or committer.member_id:
            code, member = self._membership.check_member(
                group, committer.member_id, committer.group_instance_id, committer.generation
            )
            if code != ErrorCode.NONE or group is None or member is None:
                return dict.fromkeys(offsets, code)
        records, accepted, result = self._records(group_id, offsets)
        if records:
            producer_id = producer[0]
            try:
                self._writer.append(group_id, records, producer)
            except ProducerStateError as exc:  # a fenced (older) producer epoch
                _log.info("group %r: transactional offset commit refused: %s", group_id, exc)
                return dict.fromkeys(offsets, ErrorCode.PRODUCER_FENCED)
            except KafkaError as exc:
                _log.warning("group %r: transactional offset commit not stored: %s", group_id, exc)
                return {**result, **dict.fromkeys(accepted, append_error(exc))}
            except Exception as exc:
                _log.warning(
                    "group %r: transactional offset commit of producer %d not stored in __consumer_offsets: %s",
                    group_id,
                    producer_id,
                    exc,
                )
                return {**result, **dict.fromkeys(accepted, ErrorCode.UNKNOWN_SERVER_ERROR)}
            if group is None:
                group = self._groups[group_id] = Group(group_id)
            group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
            result.update(dict.fromkeys(accepted, ErrorCode.NONE))
        return result

    def complete_txn(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """A COMMIT (or ABORT) marker of ``producer_id`` landed on ``offsets_partition`` of ``__consumer_offsets``
        (Kafka's ``handleTxnCompletion``): the producer's pending offsets of the groups on that partition become
        committed (or are dropped)."""
        for group in list(self._groups.values()):
            if producer_id not in group.pending_txn_offsets:
                continue
            if self._partition_for(group.group_id) != offsets_partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id)
            if commit:
                group.offsets.update(pending)

    def pending(self, group_id: str) -> set[TopicPartition]:
        """The partitions with an offset committed in a transaction not yet complete (RequireStable)."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    def fetch(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """OffsetFetch: the committed offset of each partition (None: none), all of them when ``None``."""
        group = self._live(group_id)
        offsets = {} if group is None else group.offsets
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member of a consumer group (KIP-848, Kafka's
        ``ConsumerGroup.validateOffsetFetch``): no member id and a negative epoch (an admin client, a consumer
        using ``assign()``) is accepted; else the member must be known (UNKNOWN_MEMBER_ID) and fetch at its own
        member epoch (STALE_MEMBER_EPOCH). A classic group or no group checks nothing, as in Kafka."""
        group = self._live(group_id)
        if group is None or group.consumer is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NONE
        member = group.consumer.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def expire(self) -> int:
        """``offsets.retention.minutes`` (see the module docstring); returns the number of offsets removed."""
        now = self._now_ms()
        removed = 0
        for group in list(self._groups.values()):
            if group.has_members or group.state not in (GroupState.EMPTY, GroupState.DEAD):
                continue
            expired = [
                tp
                for tp, committed in group.offsets.items()
                if committed.commit_timestamp_ms + self.config.offsets_retention_ms <= now
            ]
            if not expired:
                continue
            try:
                self._writer.append(
                    group.group_id, [(encode_offset_key(group.group_id, t, p), None) for t, p in expired]
                )
            except Exception as exc:
                _log.warning(
                    "group %r: cannot write offset expirations (retried next pass): %s", group.group_id, exc
                )
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            _log.info(
                "group %r: %d committed offset(s) expired (offsets.retention.minutes)",
                group.group_id,
                len(expired),
            )
            if not group.offsets:
                self._forget(group)
        return removed

    def _forget(self, group: Group) -> None:
        """Tombstone the group's metadata (a consumer group's records) and drop it (it has no member and no
        offset left)."""
        if group.consumer is not None:
            records = consumer_records.deletion(group.group_id, group.consumer.written)
        else:
            records = [(encode_group_key(group.group_id), None)]
        try:
            self._writer.append(group.group_id, records)
        except Exception as exc:
            _log.warning(
                "group %r: cannot write its removal (it may reappear after a restart): %s",
                group.group_id,
                exc,
            )
        group.state = GroupState.DEAD
        self._groups.pop(group.group_id, None)

    def delete(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: (group error, error per partition)."""
        if self._owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR, {}
        group = self._live(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.members and group.protocol_type != "consumer":  # a consumer group: its subscriptions decide
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = group.subscribed_topics()
        result: dict[TopicPartition, ErrorCode] = {}
        removing = []
        for topic, partition in partitions:
            if topic in subscribed:
                result[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[(topic, partition)] = ErrorCode.NONE
                if (topic, partition) in group.offsets and (topic, partition) not in removing:
                    removing.append((topic, partition))  # a partition named twice is deleted once
        if removing:
            try:
                self._writer.append(
                    group_id, [(encode_offset_key(group_id, t, p), None) for t, p in removing]
                )
            except Exception as exc:
                _log.warning("group %r: offset deletion not stored in __consumer_offsets: %s", group_id, exc)
                return append_error(exc), {}
            for tp in removing:
                del group.offsets[tp]
        return ErrorCode.NONE, result
