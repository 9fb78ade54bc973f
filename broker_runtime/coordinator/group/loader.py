"""Loading groups and offsets from a ``__consumer_offsets`` partition (Kafka's ``CoordinatorLoader`` and the
group coordinator's ``replay``).

:meth:`GroupLoader.replay` reads one partition of the local replica from its start to its log end, in order, and
applies each record to the coordinator's groups (Kafka's record format, :mod:`.log_format`): the latest record
per key wins, a tombstone removes the committed offset or the group. A group metadata record brings back the
generation, protocol, leader and members with their assignments; the group is Empty until the coordinator
activates it once the partition is owned (:meth:`~.membership.GroupMembership.activate`: Stable with fresh session
timers). Offsets of a transactional batch stay pending for their producer until the producer's COMMIT/ABORT
control record is read (``complete_txn``), as they did before the restart.

Thread-safety: event-loop thread only (the replay is synchronous, so no request sees a half-loaded partition).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_runtime.coordinator.group.log_format import decode_group_value, decode_key, decode_offset_value
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState, Member
from broker_runtime.coordinator.group.writer import OffsetsLog
from broker_runtime.protocol.records import CONTROL_COMMIT
from broker_runtime.storage.log_batches import read_batches

__all__ = ["GroupLoader"]


class GroupLoader:
    """See the module docstring. ``groups`` is the coordinator's map; ``complete_txn(producer id, partition,
    commit)`` ends a producer's pending offsets on the partition."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        groups: dict[str, Group],
        complete_txn: Callable[[int, int, bool], None],
    ) -> None:
        self._offsets_log = offsets_log
        self._groups = groups
        self._complete_txn = complete_txn

    def replay(self, partition: int) -> None:
        """Apply every record of ``partition`` (nothing when the partition is not hosted here)."""
        log = self._offsets_log(partition, False)
        if log is None:
            return
        for batch in read_batches(log):
            header = batch.header
            if header.is_control:
                control_type, _ = batch.control_record()
                self._complete_txn(header.producer_id, partition, control_type == CONTROL_COMMIT)
                continue
            txn = header.producer_id if header.is_transactional else None
            for record in batch.records():
                if record.key is not None:
                    self._apply(record.key, record.value, txn)

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
