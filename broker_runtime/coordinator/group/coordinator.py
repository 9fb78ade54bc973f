"""The classic group coordinator (Kafka's ``GroupCoordinator`` with its shard's two managers): the one object the
request handlers and the broker talk to.

Groups (:class:`~.state.Group`, state machine in :mod:`.state`) live in memory, in one map per coordinator that
its parts share; what must survive a restart or a failover is appended to the group's partition of
``__consumer_offsets`` (:func:`~.log_format.partition_for`, Kafka's record format, :mod:`.log_format`) before
the client is answered. The parts, each with its own module:

* :mod:`.membership` (:class:`~.membership.GroupMembership`): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the
  join phase, session timeouts, static members.
* :mod:`.offsets` (:class:`~.offsets.OffsetManager`): OffsetCommit, TxnOffsetCommit and their completion by
  markers, OffsetFetch, OffsetDelete, ``offsets.retention.minutes``.
* :mod:`.writer` (:class:`~.writer.GroupWriter`): every append, its errors as the client sees them, waiting for
  replication.
* :mod:`.loader` (:class:`~.loader.GroupLoader`): the replay of a partition.
* :mod:`.timer` (:class:`~.timer.CoordinatorTimer`): session, rebalance and join-delay timers on the broker's
  clock (the broker advances it with its purgatories; a test with a manual clock).
* Ownership (:class:`~broker_runtime.coordinator.ownership.PartitionOwnership`, shared with the transaction
  coordinator): this node coordinates the groups of the ``__consumer_offsets`` partitions it leads, Kafka's
  ``onElection`` / ``onResignation``. :meth:`GroupCoordinator.become_leader` loads a partition at its leader
  epoch (a loaded group with members is Stable with fresh session timers: members that keep heartbeating carry
  on in their generation, members that are gone expire after their session timeout);
  :meth:`GroupCoordinator.resign` drops its groups (timers cancelled, waiting JoinGroup and SyncGroup answers get
  NOT_COORDINATOR). A single node is a cluster of one: :meth:`GroupCoordinator.load` leads every partition at
  epoch 0. Every request for a group of another partition answers NOT_COORDINATOR (checked here, before a part
  is asked).

Writes go through ``append_records`` (a cluster: the leader's append with acks=-1 rules; a single node:
:func:`~.writer.local_appender`, append and fsync); the handler waits for their replication
(:meth:`GroupCoordinator.take_appended`, ``offsets.commit.timeout.ms``) before it answers, and the members' SyncGroup
answers wait for ``await_replication`` of the leader's assignment. The in-memory state follows the leader's own
log at once (a commit whose replication then fails is visible on this leader, as it is in its log; a new leader
that lacks it never had it, and this one drops the group when it resigns).

Admin answers here: ListGroups (every group hosted, offset-only ones too), DeleteGroups (a group without
members is removed with its offsets, tombstones written; GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP).

Thread-safety: event-loop thread only (storage calls are synchronous and short; timer tasks run on the loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker_runtime.coordinator.group.loader import GroupLoader
from broker_runtime.coordinator.group.log_format import (
    CONSUMER_OFFSETS_TOPIC,
    encode_group_key,
    encode_offset_key,
)
from broker_runtime.coordinator.group.membership import GroupMembership, JoinRequest, join_error
from broker_runtime.coordinator.group.offsets import OffsetManager, Offsets
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupConfig, GroupState
from broker_runtime.coordinator.group.timer import CoordinatorTimer
from broker_runtime.coordinator.group.writer import (
    AppendRecords,
    AwaitReplication,
    GroupWriter,
    OffsetsLog,
    append_error,
)
from broker_runtime.coordinator.ownership import PartitionOwnership
from broker_runtime.coordinator.placement import partition_for
from broker_runtime.errors import ErrorCode

__all__ = ["GroupCoordinator"]

_log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GroupCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        config: GroupConfig,
        offsets_log: OffsetsLog,
        loop: asyncio.AbstractEventLoop,
        topic_partitions: Callable[[str], int | None],
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        *,
        timer: CoordinatorTimer,
        append_records: AppendRecords,
        await_replication: AwaitReplication,
    ) -> None:
        self.config = config
        self._offsets_log = offsets_log
        self.timer = timer
        self._groups: dict[str, Group] = {}
        self._ownership = PartitionOwnership(
            CONSUMER_OFFSETS_TOPIC, config.num_partitions, self.partition_for, self, "group(s)"
        )
        self._writer = GroupWriter(offsets_log, self._ownership, append_records, await_replication, now_ms)
        self.members = GroupMembership(config, self._groups, self._writer, timer, loop, now_ms)
        self.offsets = OffsetManager(
            config, self._groups, self._writer, self.members, self.partition_for, topic_partitions, now_ms
        )
        self._loader = GroupLoader(offsets_log, self._groups, self.offsets.complete_txn)

    # -- lookup ------------------------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def offsets_partition(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition, created now if the topic is not there yet (a
        transaction adds it before the first TxnOffsetCommit writes to it)."""
        partition = self.partition_for(group_id)
        self._offsets_log(partition, True)
        return partition

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    @property
    def groups(self) -> dict[str, Group]:
        return self._groups

    # -- ownership ---------------------------------------------------------------------------------------------

    def owner_error(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id``, else NOT_COORDINATOR."""
        return self._ownership.owner_error(group_id)

    @property
    def owned_partitions(self) -> dict[int, int]:
        return self._ownership.owned

    def load(self) -> int:
        """A single node: lead every ``__consumer_offsets`` partition at epoch 0, loading the existing ones;
        returns the number of groups loaded."""
        return self._ownership.load_all()

    def become_leader(self, partition: int, leader_epoch: int) -> int:
        """This node now leads ``partition`` of ``__consumer_offsets``: load its groups and offsets from the local
        replica. Returns the number of groups loaded."""
        return self._ownership.become_leader(partition, leader_epoch)

    def resign(self, partition: int) -> None:
        """This node no longer leads ``partition``: drop its groups; waiting answers get NOT_COORDINATOR."""
        self._ownership.resign(partition)

    def take_appended(self) -> set[int]:
        """The ``__consumer_offsets`` partitions appended to since the last call (the handler waits until they
        are replicated before it answers)."""
        return self._ownership.take_appended()

    def _on(self, partition: int) -> list[Group]:
        return [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]

    # CoordinatorShard hooks of the ownership
    def replay(self, partition: int) -> None:
        self._loader.replay(partition)

    def loaded(self, partition: int) -> int:
        mine = self._on(partition)
        self.members.activate(mine)
        return len(mine)

    def unloaded(self, partition: int) -> int:
        dropped = self._on(partition)
        for group in dropped:
            self.members.unload(group, ErrorCode.NOT_COORDINATOR)
            del self._groups[group.group_id]
        return len(dropped)

    # -- membership --------------------------------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        """JoinGroup: the answer now, or a future of it (see :mod:`.membership`)."""
        if not group_id:
            return join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        if self.owner_error(group_id) != ErrorCode.NONE:
            return join_error(ErrorCode.NOT_COORDINATOR, member_id)
        request = JoinRequest(
            member_id,
            group_instance_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            client_id,
            client_host,
            require_known_member_id,
        )
        return self.members.join(group_id, request)

    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        """SyncGroup: the member's assignment now, or a future of it."""
        if self.owner_error(group_id) != ErrorCode.NONE:
            return {"ErrorCode": ErrorCode.NOT_COORDINATOR, "Assignment": b""}
        return self.members.sync(group_id, generation, member_id, group_instance_id, assignments)

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR
        return self.members.heartbeat(group_id, generation, member_id, group_instance_id)

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: (group error, error per (member id, instance id))."""
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR, [ErrorCode.NOT_COORDINATOR] * len(members)
        return self.members.leave(group_id, members)

    # -- offsets -----------------------------------------------------------------------------------------------

    def _refused(self, group_id: str, offsets: Offsets) -> dict[TopicPartition, ErrorCode] | None:
        if not group_id:
            return dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID)
        if self.owner_error(group_id) != ErrorCode.NONE:
            return dict.fromkeys(offsets, ErrorCode.NOT_COORDINATOR)
        return None

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Offsets,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: ``(topic, partition) -> (offset, leader epoch, metadata)``; an error per partition."""
        refused = self._refused(group_id, offsets)
        if refused is not None:
            return refused
        return self.offsets.commit(group_id, generation, member_id, group_instance_id, offsets)

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Offsets,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: as :meth:`commit_offsets`, the offsets pending until :meth:`complete_txn`."""
        refused = self._refused(group_id, offsets)
        if refused is not None:
            return refused
        return self.offsets.txn_commit(
            group_id, (producer_id, producer_epoch), generation, member_id, group_instance_id, offsets
        )

    def complete_txn(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """A COMMIT (or ABORT) marker of ``producer_id`` landed on ``offsets_partition``."""
        self.offsets.complete_txn(producer_id, offsets_partition, commit)

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """The partitions with an offset committed in a transaction not yet complete (RequireStable)."""
        return self.offsets.pending(group_id)

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """OffsetFetch: the committed offset of each partition (None: none), all of them when ``None``."""
        return self.offsets.fetch(group_id, partitions)

    def expire_offsets(self) -> int:
        """``offsets.retention.minutes`` (periodic); returns the number of offsets removed."""
        return self.offsets.expire()

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496): (group error, error per partition)."""
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR, {}
        return self.offsets.delete(group_id, partitions)

    # -- admin -------------------------------------------------------------------------------------------------

    def list_groups(self) -> list[Group]:
        """ListGroups: every group this coordinator hosts (Kafka lists offset-only groups too)."""
        return [g for g in self._groups.values() if g.state != GroupState.DEAD]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: see the module docstring."""
        result: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if self.owner_error(group_id) != ErrorCode.NONE:
                result[group_id] = ErrorCode.NOT_COORDINATOR
                continue
            group = self._groups.get(group_id)
            if group is None or group.state == GroupState.DEAD:
                result[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
                continue
            if group.members:
                result[group_id] = ErrorCode.NON_EMPTY_GROUP
                continue
            records: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(group_id, t, p), None) for t, p in group.offsets
            ]
            records.append((encode_group_key(group_id), None))
            try:
                self._writer.append(group_id, records)
            except Exception as exc:
                _log.warning("group %r: deletion not stored in __consumer_offsets: %s", group_id, exc)
                result[group_id] = append_error(exc)
                continue
            if group.join_timer is not None:
                group.join_timer.cancel()
            group.state = GroupState.DEAD
            del self._groups[group_id]
            _log.info("group %r deleted with %d committed offset(s)", group_id, len(group.offsets))
            result[group_id] = ErrorCode.NONE
        return result

    def shutdown(self) -> None:
        """Cancel every timer (broker stop); pending answers are left to the closing connections."""
        self.members.shutdown()
        self.timer.shutdown()
