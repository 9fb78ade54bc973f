"""The classic group coordinator (Kafka's ``GroupCoordinator`` with its shard's two managers): the one object the
request handlers and the broker talk to.

Groups (:class:`~.state.Group`, state machine in :mod:`.state`) live in memory, in one map per coordinator that
its parts share; what must survive a restart or a failover is appended to the group's partition of
``__consumer_offsets`` (:func:`~.log_format.partition_for`, Kafka's record format, :mod:`.log_format`) before
the client is answered. The parts, each with its own module:

* :mod:`.membership` (:class:`~.membership.GroupMembership`): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the
  join phase, session timeouts, static members.
* :mod:`.consumer` (:class:`~.consumer.ConsumerGroups`): groups of type ``consumer`` (KIP-848):
  ConsumerGroupHeartbeat, server-side assignment, member epochs, beside the classic groups in the same map (a
  :class:`~.state.Group` with ``consumer`` set).
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
import uuid
from collections.abc import Callable, Mapping

from broker_runtime.coordinator.group import consumer_records
from broker_runtime.coordinator.group.consumer import ConsumerGroups
from broker_runtime.coordinator.group.consumer_state import ConsumerGroupState
from broker_runtime.coordinator.group.loader import GroupLoader
from broker_runtime.coordinator.group.log_format import (
    CONSUMER_OFFSETS_TOPIC,
    encode_group_key,
    encode_offset_key,
)
from broker_runtime.coordinator.group.membership import GroupMembership
from broker_runtime.coordinator.group.offsets import OffsetManager
from broker_runtime.coordinator.group.state import Group, GroupConfig, GroupState
from broker_runtime.coordinator.group.timer import CoordinatorTimer
from broker_runtime.coordinator.group.writer import (
    AppendRecords,
    AwaitReplication,
    GroupWriter,
    OffsetsLog,
    Shared,
    append_error,
)
from broker_runtime.coordinator.ownership import PartitionOwnership
from broker_runtime.coordinator.placement import partition_for
from broker_runtime.errors import ErrorCode

__all__ = ["GroupCoordinator"]

_log = logging.getLogger(__name__)


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
        topic_ids: Callable[[], Mapping[str, uuid.UUID]] | None = None,
    ) -> None:
        self.config = config
        #: Topic ids by name (KIP-516): consumer-group records name topics by id (None: no topic has one, the
        #: records carry no partition; a test's coordinator over names only).
        self._topic_ids: Callable[[], Mapping[str, uuid.UUID]] = topic_ids or dict
        self._offsets_log = offsets_log
        self.timer = timer
        self._groups: dict[str, Group] = {}
        self._ownership = PartitionOwnership(
            CONSUMER_OFFSETS_TOPIC, config.num_partitions, self.partition_for, self, "group(s)"
        )
        self._writer = GroupWriter(offsets_log, self._ownership, append_records, await_replication, now_ms)
        shared = Shared(config, self._groups, self._ownership.owner_error, self._writer, now_ms)
        self.members = GroupMembership(shared, timer, loop)
        self.consumer = ConsumerGroups(
            shared,
            config.consumer,
            timer,
            topic_partitions,
            self._store_consumer,
            None if topic_ids is None else (lambda topic: topic in self._topic_ids()),
            lambda: self._topic_ids(),
        )
        self.offsets = OffsetManager(shared, self.members, self.partition_for, topic_partitions)
        self._loader = GroupLoader(
            offsets_log,
            self._groups,
            self.offsets.complete_txn,
            lambda: {v: k for k, v in self._topic_ids().items()},
        )
        # The requests, answered by the part they belong to (each checks that this node coordinates the group).
        self.join = self.members.join
        self.sync = self.members.sync
        self.heartbeat = self.members.heartbeat
        self.consumer_heartbeat = self.consumer.heartbeat
        self.leave = self.members.leave
        self.commit_offsets = self.offsets.commit
        self.txn_commit_offsets = self.offsets.txn_commit
        self.complete_txn = self.offsets.complete_txn
        self.pending_offsets = self.offsets.pending
        self.fetch_offsets = self.offsets.fetch
        self.validate_offset_fetch = self.offsets.validate_fetch
        self.expire_offsets = self.offsets.expire
        self.delete_offsets = self.offsets.delete

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
        self.members.activate([g for g in mine if g.consumer is None])
        self.consumer.activate(mine)
        return len(mine)

    def unloaded(self, partition: int) -> int:
        dropped = self._on(partition)
        for group in dropped:
            self.consumer.unload(group)
            self.members.unload(group, ErrorCode.NOT_COORDINATOR)
            del self._groups[group.group_id]
        return len(dropped)

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
            if group.has_members:
                result[group_id] = ErrorCode.NON_EMPTY_GROUP
                continue
            records: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(group_id, t, p), None) for t, p in group.offsets
            ]
            if group.consumer is not None:
                records.extend(consumer_records.deletion(group_id, group.consumer.written))
            else:
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

    def _store_consumer(self, group: Group, cg: ConsumerGroupState, changed: object) -> ErrorCode:
        """Where a consumer group's change is written: the ConsumerGroup* records whose value differs from the
        one last written (:mod:`.consumer_records`), tombstones for members gone; NONE, or the error the member
        is told (logged: the change stays in memory on this leader, as a committed offset whose replication
        failed does, and a restart forgets it)."""
        now = consumer_records.group_records(group.group_id, cg, self._topic_ids())
        records = consumer_records.diff(cg.written, now)
        if not records:
            return ErrorCode.NONE
        try:
            self._writer.append(group.group_id, records)
        except Exception as exc:
            _log.warning(
                "group %r: cannot write its consumer group records to __consumer_offsets (a restart forgets "
                "group epoch %d): %s",
                group.group_id,
                cg.group_epoch,
                exc,
            )
            return append_error(exc)
        cg.written = now
        return ErrorCode.NONE

    def shutdown(self) -> None:
        """Cancel every timer (broker stop); pending answers are left to the closing connections."""
        for group in self._groups.values():
            self.consumer.unload(group)
        self.members.shutdown()
        self.timer.shutdown()
