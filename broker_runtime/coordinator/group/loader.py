"""Loading groups and offsets from a ``__consumer_offsets`` partition (Kafka's ``CoordinatorLoader`` and the
group coordinator's ``replay``).

:meth:`GroupLoader.replay` reads one partition of the local replica from its start to its log end, in order, and
applies each record to the coordinator's groups (Kafka's record format, :mod:`.log_format`): the latest record
per key wins, a tombstone removes the committed offset or the group. A group metadata record brings back the
generation, protocol, leader and members with their assignments; the group is Empty until the coordinator
activates it once the partition is owned (:meth:`~.membership.GroupMembership.activate`: Stable with fresh session
timers). Offsets of a transactional batch stay pending for their producer until the producer's COMMIT/ABORT
control record is read (``complete_txn``), as they did before the restart.

Consumer groups (KIP-848, :mod:`.consumer_records`): their records rebuild the group epoch, the target assignment
and its epoch, each member's subscription (names and regular expression), epochs, state, assigned and pending
partitions (topic ids named by ``topic_names()`` at the replay), and what each regular expression resolved to; the value read under each key is kept in ``ConsumerGroupState.written``.
The coordinator then restarts every member's session timer (:meth:`~.consumer.ConsumerGroups.activate`): a member
that does not heartbeat after the restart is fenced by its session timeout, as before it.

A key of a record type this version does not know is skipped with a WARNING, as Kafka's loader does ("it could be
a left over from an aborted upgrade"); a known type that does not decode fails the load (CorruptRecordError).
pylog before consumer-group persistence failed on the types 3-8 it did not know: a log with consumer groups
cannot be read by it, as a Kafka broker below the ``group.version`` that writes them cannot read them either.

Thread-safety: event-loop thread only (the replay is synchronous, so no request sees a half-loaded partition).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from broker_runtime.coordinator.group import consumer_records as cr
from broker_runtime.coordinator.group.consumer_state import ConsumerGroupState, ConsumerMember, ResolvedRegex
from broker_runtime.coordinator.group.log_format import decode_group_value, decode_key, decode_offset_value
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState, Member
from broker_runtime.coordinator.group.writer import OffsetsLog
from broker_runtime.protocol.records import CONTROL_COMMIT
from broker_runtime.storage.log_batches import read_batches

__all__ = ["GroupLoader"]

_log = logging.getLogger(__name__)

#: The key versions of the classic records (offset commit 0-1, group metadata 2).
_CLASSIC_KEY_VERSIONS = (0, 1, 2)


class GroupLoader:
    """See the module docstring. ``groups`` is the coordinator's map; ``complete_txn(producer id, partition,
    commit)`` ends a producer's pending offsets on the partition; ``topic_names()`` names the topic ids."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        groups: dict[str, Group],
        complete_txn: Callable[[int, int, bool], None],
        topic_names: Callable[[], Mapping[uuid.UUID, str]] = dict,
    ) -> None:
        self._offsets_log = offsets_log
        self._groups = groups
        self._complete_txn = complete_txn
        self._topic_names = topic_names
        self._names: Mapping[uuid.UUID, str] = {}

    def replay(self, partition: int) -> None:
        """Apply every record of ``partition`` (nothing when the partition is not hosted here)."""
        log = self._offsets_log(partition, False)
        if log is None:
            return
        self._names = self._topic_names()
        unknown: dict[int, int] = {}
        for batch in read_batches(log):
            header = batch.header
            if header.is_control:
                control_type, _ = batch.control_record()
                self._complete_txn(header.producer_id, partition, control_type == CONTROL_COMMIT)
                continue
            txn = header.producer_id if header.is_transactional else None
            for record in batch.records():
                if record.key is None:
                    continue
                kind = cr.record_type(record.key)
                if kind in _CLASSIC_KEY_VERSIONS:
                    self._apply(record.key, record.value, txn)
                elif kind in cr.CONSUMER_RECORD_TYPES:
                    self._apply_consumer(record.key, record.value)
                else:
                    unknown[kind] = unknown.get(kind, 0) + 1
        for kind, count in sorted(unknown.items()):
            _log.warning(
                "__consumer_offsets-%d: %d record(s) of type %d, unknown to this version, ignored (a left-over of "
                "a newer version or an aborted upgrade)",
                partition,
                count,
                kind,
            )

    def _apply(
        self, key: bytes | memoryview, value: bytes | memoryview | None, txn_producer: int | None
    ) -> None:
        group_id, topic, partition = decode_key(key)
        if topic is not None:
            if value is None:
                found = self._groups.get(group_id)
                if found is not None:
                    found.offsets.pop((topic, partition), None)
                return
            v = decode_offset_value(value)
            group = self._groups.setdefault(group_id, Group(group_id))
            committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms)
            if txn_producer is None:
                group.offsets[(topic, partition)] = committed
            else:
                group.pending_txn_offsets.setdefault(txn_producer, {})[(topic, partition)] = committed
            return
        if value is None:
            self._groups.pop(group_id, None)
            return
        self._apply_metadata(group_id, value)

    def _apply_metadata(self, group_id: str, value: bytes | memoryview) -> None:
        g = decode_group_value(value)
        group = self._groups.setdefault(group_id, Group(group_id))
        group.generation = g.generation
        group.protocol_type = g.protocol_type or None
        group.protocol = g.protocol
        group.leader = g.leader
        group.state_timestamp_ms = g.state_timestamp_ms
        group.members = {}
        group.static_members = {}
        for m in g.members:
            member = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                g.protocol_type,
                [(g.protocol or "", m.subscription)],
                m.assignment,
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.EMPTY

    # -- consumer groups (KIP-848) ---------------------------------------------------------------------------

    def _consumer_group(self, group_id: str) -> ConsumerGroupState:
        group = self._groups.setdefault(group_id, Group(group_id))
        if group.consumer is None:
            group.consumer = ConsumerGroupState()
            group.state = GroupState.EMPTY
            group.protocol_type = "consumer"
            group.protocol = group.leader = None
            group.members, group.static_members = {}, {}
        return group.consumer

    def _apply_consumer(self, key: bytes | memoryview, value: bytes | memoryview | None) -> None:
        rec = cr.decode(key, value, self._names)
        found = self._groups.get(rec.group_id)
        if rec.value is None:
            if found is None or found.consumer is None:
                return
            found.consumer.written.pop(bytes(key), None)
            self._remove_consumer(found, found.consumer, rec)
            return
        if rec.kind == cr.PARTITION_METADATA:
            return  # not written since Kafka 4.1; the group epoch's MetadataHash stands for it
        cg = self._consumer_group(rec.group_id)
        v = rec.value
        if rec.kind == cr.GROUP_METADATA:
            cg.group_epoch = v["Epoch"]
            cg.loaded_metadata_hash = v["MetadataHash"]
        elif rec.kind == cr.TARGET_METADATA:
            cg.assignment_epoch = v["AssignmentEpoch"]
        elif rec.kind == cr.REGULAR_EXPRESSION:
            assert rec.member_id is not None
            # not refreshed by this coordinator yet: the next heartbeat resolves it again
            cg.resolved_regexes[rec.member_id] = ResolvedRegex(
                frozenset(v["Topics"]), v["Version"], v["Timestamp"]
            )
        else:
            assert rec.member_id is not None
            self._apply_member(cg, rec.kind, rec.member_id, v)
        # the value as it was read, so the next change writes only what differs
        assert value is not None
        cg.written[bytes(key)] = bytes(value)

    @staticmethod
    def _apply_member(cg: ConsumerGroupState, kind: int, member_id: str, v: dict[str, object]) -> None:
        if kind == cr.TARGET_MEMBER:
            cg.target[member_id] = v["TopicPartitions"]  # type: ignore[assignment]
            return
        member = cg.members.get(member_id)
        if member is None:
            member = cg.members[member_id] = ConsumerMember(member_id)
        if kind == cr.MEMBER_METADATA:
            member.instance_id = v["InstanceId"]  # type: ignore[assignment]
            member.rack_id = v["RackId"]  # type: ignore[assignment]
            member.client_id = v["ClientId"]  # type: ignore[assignment]
            member.client_host = v["ClientHost"]  # type: ignore[assignment]
            member.subscribed_topics = tuple(sorted(v["SubscribedTopicNames"]))  # type: ignore[call-overload]
            member.subscribed_regex = v["SubscribedTopicRegex"] or None  # type: ignore[assignment]
            member.rebalance_timeout_ms = v["RebalanceTimeoutMs"]  # type: ignore[assignment]
            member.server_assignor = v["ServerAssignor"]  # type: ignore[assignment]
            if member.instance_id is not None:
                cg.static_members[member.instance_id] = member_id
        elif kind == cr.CURRENT_ASSIGNMENT:
            member.member_epoch = v["MemberEpoch"]  # type: ignore[assignment]
            member.previous_member_epoch = v["PreviousMemberEpoch"]  # type: ignore[assignment]
            member.state = v["State"]  # type: ignore[assignment]
            member.assigned = v["AssignedPartitions"]  # type: ignore[assignment]
            member.pending_revocation = v["PartitionsPendingRevocation"]  # type: ignore[assignment]

    def _remove_consumer(self, group: Group, cg: ConsumerGroupState, rec: cr.ConsumerRecord) -> None:
        if rec.kind == cr.GROUP_METADATA:
            # the group's deletion (its other records were tombstoned before): offsets may stay, as in Kafka
            group.consumer = None
            group.protocol_type = None
            if not group.offsets and not group.pending_txn_offsets:
                self._groups.pop(group.group_id, None)
        elif rec.kind == cr.TARGET_METADATA:
            cg.assignment_epoch = 0
        elif rec.kind == cr.REGULAR_EXPRESSION:
            assert rec.member_id is not None
            cg.resolved_regexes.pop(rec.member_id, None)
        elif rec.kind == cr.TARGET_MEMBER:
            assert rec.member_id is not None
            cg.target.pop(rec.member_id, None)
        elif rec.kind == cr.MEMBER_METADATA:
            assert rec.member_id is not None
            member = cg.members.pop(rec.member_id, None)
            instance_id = None if member is None else member.instance_id
            if instance_id is not None and cg.static_members.get(instance_id) == rec.member_id:
                del cg.static_members[instance_id]
