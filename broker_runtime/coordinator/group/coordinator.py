"""The classic group coordinator (Kafka's ``GroupCoordinator`` + ``GroupMetadataManager``, on one node).

Groups (:class:`~.state.Group`, state machine in :mod:`.state`) live in memory; what must survive a restart is
appended to the group's partition of ``__consumer_offsets`` (:func:`~.log_format.partition_for`, Kafka's
record format, see :mod:`.log_format`) before the client is answered: committed offsets on OffsetCommit (one
batch and one fsync per request), the group's metadata (generation, protocol, leader, members and their
assignments) when a generation becomes Stable and when a group becomes Empty. :meth:`GroupCoordinator.load`
replays the partitions on start (latest record per key wins, a tombstone removes it); a loaded group with
members is Stable with fresh session timers, so members that keep heartbeating carry on in their generation and
members that are gone expire after their session timeout.

Membership (the handlers decode and encode only; answers are Kafka's response bodies, some as futures):

* :meth:`join`: session timeout outside ``[group.min.session.timeout.ms, group.max.session.timeout.ms]`` ->
  INVALID_SESSION_TIMEOUT; another protocol type or no protocol in common -> INCONSISTENT_GROUP_PROTOCOL. A new
  member without a group instance id joining with JoinGroup v4+ first gets MEMBER_ID_REQUIRED and its member id
  (KIP-394). A new member, a leader that rejoins, or a member whose protocols changed starts a rebalance
  (PreparingRebalance); the answers wait until every known member has rejoined or the rebalance timeout (the
  largest of the members') passed, when the members that did not rejoin are removed. A group that was Empty
  waits ``group.initial.rebalance.delay.ms`` first (extended by each new member, at most up to the rebalance
  timeout), as Kafka. The join phase ends with generation + 1, the protocol chosen by vote among the protocols
  every member supports, and a leader (the previous one if still a member), which alone gets the member list.
* Static membership (KIP-345): a member that joins with a known ``group.instance.id`` and no member id
  replaces the previous holder (whose pending answers get FENCED_INSTANCE_ID); in a Stable group with unchanged
  protocols it takes over the assignment without a rebalance. A request naming an instance id with another
  member id is FENCED_INSTANCE_ID. Static members are removed only by session timeout or LeaveGroup.
* :meth:`sync`: followers wait for the leader's assignments; then every member gets its own and the group is
  Stable. Wrong generation -> ILLEGAL_GENERATION; during a join phase -> REBALANCE_IN_PROGRESS.
* :meth:`heartbeat`: resets the member's session timer; REBALANCE_IN_PROGRESS during a join phase tells it to
  rejoin. A member without a heartbeat, join, sync or commit for its session timeout is removed (unless it
  waits for a join or sync answer) and the group rebalances.
* :meth:`leave`: removes members (by member id, or by instance id for static members) and rebalances.

Offsets: :meth:`commit_offsets` accepts a commit from a member of the current generation, or a "simple"
commit (generation -1, no member id) while the group has no member (consumers using ``assign()``); the
records are appended and flushed before the answer. :meth:`fetch_offsets` answers from memory (-1 for a
partition without a committed offset). :meth:`txn_commit_offsets` (TxnOffsetCommit) appends a transactional
batch of the producer and keeps the offsets pending per producer id; :meth:`complete_txn` (called when the
producer's COMMIT/ABORT marker is appended to the group's partition, and on replay when the marker is read)
makes them committed or drops them, as Kafka's ``handleTxnCompletion``; :meth:`pending_offsets` names the
partitions OffsetFetch with RequireStable answers UNSTABLE_OFFSET_COMMIT for.

Cluster ownership (``append_records`` given; Kafka's ``onElection`` / ``onResignation``): this node coordinates only
the groups of the ``__consumer_offsets`` partitions it leads. :meth:`GroupCoordinator.become_leader` loads one
partition from the local replica (its whole log: as leader every record in it will be committed) at the partition's
leader epoch; :meth:`GroupCoordinator.resign` drops its groups (timers cancelled, waiting JoinGroup and SyncGroup
answers get NOT_COORDINATOR). Every request for a group of another partition answers NOT_COORDINATOR
(:meth:`GroupCoordinator.owner_error`). Records go through ``append_records`` (the leader's append with acks=-1
rules; it raises :class:`~broker_runtime.errors.KafkaError`, mapped as Kafka's ``appendForGroup`` callbacks map
them: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR, NOT_ENOUGH_REPLICAS / timeouts -> COORDINATOR_NOT_AVAILABLE); the
handler waits for their replication (:meth:`GroupCoordinator.take_appended`) before it answers, and the members'
SyncGroup answers wait for the replication of the leader's assignment (``await_replication``; the group stays
CompletingRebalance meanwhile, and rebalances if it cannot be stored). The in-memory state follows the leader's own
log at once (a commit whose replication then fails is visible on this leader, as it is in its log; a new leader that
lacks it never had it, and this one drops the group when it resigns).

Timers run on the event loop (``loop.call_later``). Thread-safety: event-loop thread only (storage calls are
synchronous and short).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_runtime.coordinator.group.log_format import (
    GroupMetadataRecord,
    MemberRecord,
    OffsetRecord,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState, Member
from broker_runtime.errors import ErrorCode, KafkaError, ProducerStateError
from broker_runtime.protocol.records import CONTROL_COMMIT, RecordBatchBuilder
from broker_runtime.storage.log_batches import read_batches
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["GroupConfig", "GroupCoordinator", "OffsetsLog", "append_error"]

_log = logging.getLogger(__name__)

#: (partition, create) -> the local ``__consumer_offsets`` partition log (created on first write), or None.
OffsetsLog = Callable[[int, bool], PartitionLog | None]

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


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the coordinator follows (Kafka's names in the README's config table)."""

    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


def _answer(fut: asyncio.Future[dict[str, Any]] | None, body: dict[str, Any]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(body)


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
        append_records: Callable[[int, bytes], None] | None = None,
        await_replication: Callable[[int, Callable[[ErrorCode | None], None]], None] | None = None,
    ) -> None:
        self.config = config
        self._offsets_log = offsets_log
        self._loop = loop
        self._topic_partitions = topic_partitions
        self._now_ms = now_ms
        self._groups: dict[str, Group] = {}
        #: Cluster: appends one ``__consumer_offsets`` batch as leader (acks=-1 checks) or raises KafkaError.
        self._append_records = append_records
        #: Cluster: calls back once a partition's appended records are replicated (or with the error).
        self._await_replication = await_replication
        #: Cluster: ``__consumer_offsets`` partitions this node leads -> their leader epoch. None on a single
        #: node, which coordinates every partition.
        self._owned: dict[int, int] | None = None if append_records is None else {}
        #: ``__consumer_offsets`` partitions appended to since the last :meth:`take_appended`.
        self._appended: set[int] = set()

    # -- lookup ----------------------------------------------------------------------------------------------

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

    # -- ownership (cluster) -----------------------------------------------------------------------------------

    def owner_error(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id``, else NOT_COORDINATOR."""
        if self._owned is None or self.partition_for(group_id) in self._owned:
            return ErrorCode.NONE
        return ErrorCode.NOT_COORDINATOR

    @property
    def owned_partitions(self) -> dict[int, int]:
        return dict(self._owned or {})

    def become_leader(self, partition: int, leader_epoch: int) -> int:
        """This node now leads ``partition`` of ``__consumer_offsets``: load its groups and offsets from the local
        replica; a group with members is Stable with fresh session timers (members that keep heartbeating go on
        in their generation). Returns the number of groups loaded."""
        assert self._owned is not None, "become_leader is for a cluster"
        self.resign(partition)
        self._replay(partition)
        self._owned[partition] = leader_epoch
        mine = [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]
        self._activate(mine)
        _log.info(
            "now group coordinator of __consumer_offsets-%d (leader epoch %d): %d group(s) loaded",
            partition,
            leader_epoch,
            len(mine),
        )
        return len(mine)

    def resign(self, partition: int) -> None:
        """This node no longer leads ``partition``: drop its groups; waiting answers get NOT_COORDINATOR."""
        if self._owned is None:
            return
        was = self._owned.pop(partition, None)
        dropped = [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]
        for group in dropped:
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            for member in group.members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()
                    member.session_timer = None
                _answer(member.join_future, self._join_error(ErrorCode.NOT_COORDINATOR, member.member_id))
                _answer(member.sync_future, {"ErrorCode": ErrorCode.NOT_COORDINATOR, "Assignment": b""})
                member.join_future = member.sync_future = None
            group.state = GroupState.DEAD
            del self._groups[group.group_id]
        if was is not None:
            _log.info(
                "no longer group coordinator of __consumer_offsets-%d (leader epoch %d): %d group(s) unloaded",
                partition,
                was,
                len(dropped),
            )

    def take_appended(self) -> set[int]:
        """The ``__consumer_offsets`` partitions appended to since the last call (cluster: the handler waits
        until they are replicated before it answers)."""
        appended, self._appended = self._appended, set()
        return appended

    @property
    def groups(self) -> dict[str, Group]:
        return self._groups

    # -- persistence -----------------------------------------------------------------------------------------

    def _append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> None:
        """Append one batch to the group's partition and fsync it (raises on a storage failure). With
        ``producer`` (id, epoch) the batch is transactional, part of that producer's open transaction: it
        continues the producer's sequence on this partition (0 at a new epoch), as the coordinator's own
        append, so the partition's producer state and last stable offset follow the transaction."""
        partition = self.partition_for(group_id)
        log = self._offsets_log(partition, self._append_records is None)
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
        if self._append_records is not None:
            self._append_records(partition, bytes(builder.build()))  # replicated: acks=-1 before any answer
        else:
            log.append(builder.build())
            log.flush()
        self._appended.add(partition)

    def _store_group(self, group: Group) -> ErrorCode:
        """Write the group's metadata record; the error a client would get (a failure is logged: on a single
        node the group still works until a restart)."""
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
            self._append(group.group_id, [(encode_group_key(group.group_id), encode_group_value(value))])
        except Exception as exc:
            _log.warning(
                "group %r: cannot write its metadata to __consumer_offsets (a restart forgets generation %d): %s",
                group.group_id,
                group.generation,
                exc,
            )
            return append_error(exc)
        return ErrorCode.NONE

    def _after_write(self, group_id: str, then: Callable[[ErrorCode | None], None]) -> None:
        """Run ``then(None)`` once what was appended to the group's partition is replicated (at once on a
        single node), or ``then(error)`` when it cannot be (cluster: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        if self._await_replication is None:
            then(None)
        else:
            self._await_replication(self.partition_for(group_id), then)

    def load(self) -> int:
        """Replay every existing ``__consumer_offsets`` partition; returns the number of groups loaded."""
        for partition in range(self.config.num_partitions):
            self._replay(partition)
        self._activate(list(self._groups.values()))
        if self._groups:
            _log.info("group coordinator loaded %d group(s)", len(self._groups))
        return len(self._groups)

    def _replay(self, partition: int) -> None:
        log = self._offsets_log(partition, False)
        if log is None:
            return
        for batch in read_batches(log):
            header = batch.header
            if header.is_control:
                control_type, _ = batch.control_record()
                self.complete_txn(header.producer_id, partition, control_type == CONTROL_COMMIT)
                continue
            txn = header.producer_id if header.is_transactional else None
            for record in batch.records():
                if record.key is not None:
                    self._apply_record(record.key, record.value, txn)

    def _activate(self, groups: list[Group]) -> None:
        """Loaded groups with members are Stable, each member on a fresh session timer."""
        for group in groups:
            if group.members:
                group.state = GroupState.STABLE
                for member in group.members.values():
                    self._schedule_session(group, member)

    def _apply_record(
        self, key: bytes | memoryview, value: bytes | memoryview | None, txn_producer: int | None = None
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

    # -- timers ------------------------------------------------------------------------------------------------

    def _schedule_session(self, group: Group, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._loop.call_later(
            member.session_timeout_ms / 1000, self._session_expired, group, member
        )

    def _session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting:
            self._schedule_session(group, member)
            return
        _log.info(
            "group %r: member %s (instance %s) removed: no heartbeat for session.timeout.ms=%d",
            group.group_id,
            member.member_id,
            member.group_instance_id,
            member.session_timeout_ms,
        )
        self._remove_member(group, member)
        self._after_removal(group)

    def _remove_member(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == (
            member.member_id
        ):
            del group.static_members[member.group_instance_id]
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        _answer(member.join_future, self._join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        _answer(member.sync_future, {"ErrorCode": ErrorCode.UNKNOWN_MEMBER_ID, "Assignment": b""})
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        if group.state == GroupState.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(group)  # the last member left, or every remaining one already rejoined

    # -- join phase ----------------------------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        for m in group.members.values():  # a follower waiting for its assignment must rejoin
            _answer(m.sync_future, {"ErrorCode": ErrorCode.REBALANCE_IN_PROGRESS, "Assignment": b""})
            m.sync_future = None
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.state_timestamp_ms = self._now_ms()
        rebalance_s = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        if group.join_timer is not None:
            group.join_timer.cancel()
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_deadline = self._loop.time() + rebalance_s
            delay = min(self.config.initial_rebalance_delay_ms / 1000, rebalance_s)
            group.join_timer = self._loop.call_later(delay, self._join_deadline, group, True)
        else:
            group.initial_deadline = 0.0
            group.join_timer = self._loop.call_later(rebalance_s, self._join_deadline, group, False)

    def _join_deadline(self, group: Group, initial: bool) -> None:
        group.join_timer = None
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        for member in [m for m in group.members.values() if m.join_future is None or m.join_future.done()]:
            _log.info(
                "group %r: member %s removed: it did not rejoin within the rebalance timeout",
                group.group_id,
                member.member_id,
            )
            self._remove_member(group, member)
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.initial_deadline > 0:
            return  # the initial delay completes by its timer
        if group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_deadline = 0.0
        group.generation += 1
        group.state_timestamp_ms = self._now_ms()
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = None
            group.leader = None
            self._store_group(group)
            _log.info("group %r: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        _log.info(
            "group %r: generation %d with %d member(s), protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
            group.leader,
        )
        for member in group.members.values():
            _answer(member.join_future, self._join_body(group, member))
            member.join_future = None
            self._schedule_session(group, member)

    def _join_body(self, group: Group, member: Member) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ErrorCode": ErrorCode.NONE,
            "GenerationId": group.generation,
            "ProtocolType": group.protocol_type,
            "ProtocolName": group.protocol,
            "Leader": group.leader or "",
            "MemberId": member.member_id,
            "Members": [],
        }
        if member.member_id == group.leader:
            body["Members"] = [
                {
                    "MemberId": m.member_id,
                    "GroupInstanceId": m.group_instance_id,
                    "Metadata": m.metadata_for(group.protocol or ""),
                }
                for m in group.members.values()
            ]
        return body

    @staticmethod
    def _join_error(code: ErrorCode, member_id: str = "") -> dict[str, Any]:
        return {
            "ErrorCode": code,
            "GenerationId": -1,
            "ProtocolName": "",
            "Leader": "",
            "MemberId": member_id,
            "Members": [],
        }

    # -- requests ------------------------------------------------------------------------------------------------

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
        """JoinGroup: the answer now, or a future of it (see the module docstring)."""
        if not group_id:
            return self._join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        if self.owner_error(group_id) != ErrorCode.NONE:
            return self._join_error(ErrorCode.NOT_COORDINATOR, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return self._join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            group = self._groups[group_id] = Group(group_id)
        if not group.supports(protocol_type, protocols):
            return self._join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        if not member_id or member_id in group.pending_members:
            return self._join_new(
                group,
                member_id,
                group_instance_id,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
                client_id,
                client_host,
                require_known_member_id,
                fut,
            )
        member = group.members.get(member_id)
        if member is None:
            return self._join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if group_instance_id is not None and group.static_members.get(group_instance_id) != member_id:
            return self._join_error(ErrorCode.FENCED_INSTANCE_ID, member_id)
        changed = member.protocols != protocols
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        _answer(member.join_future, self._join_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id))
        member.join_future = fut
        self._schedule_session(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and (
            changed or member_id == group.leader
        ):
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            member.join_future = None  # nothing changed: the current generation again
            return self._join_body(group, member)
        else:  # Empty with this member (loaded from the log)
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)
        return fut

    def _join_new(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
        fut: asyncio.Future[dict[str, Any]],
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is None and require_known_member_id:
                group.pending_members.add(member_id)
                self._loop.call_later(session_timeout_ms / 1000, group.pending_members.discard, member_id)
                return self._join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        group.pending_members.discard(member_id)
        member = Member(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
        )
        old_id = None if group_instance_id is None else group.static_members.get(group_instance_id)
        old = None if old_id is None else group.members.get(old_id)
        if old is not None:
            # KIP-345: the new holder of the instance id replaces the old member, which is fenced.
            fenced = {"ErrorCode": ErrorCode.FENCED_INSTANCE_ID, "Assignment": b""}
            _answer(old.join_future, self._join_error(ErrorCode.FENCED_INSTANCE_ID, old.member_id))
            _answer(old.sync_future, fenced)
            if old.session_timer is not None:
                old.session_timer.cancel()
            del group.members[old.member_id]
            member.assignment = old.assignment
            group.members[member_id] = member
            group.static_members[group_instance_id] = member_id  # type: ignore[index]
            if group.leader == old.member_id:
                group.leader = member_id
            self._schedule_session(group, member)
            if group.state == GroupState.STABLE and old.protocols == protocols and group.leader != member_id:
                _log.info(
                    "group %r: static member %s rejoined as %s; assignment kept, no rebalance",
                    group.group_id,
                    group_instance_id,
                    member_id,
                )
                self._store_group(group)
                return self._join_body(group, member)
            member.join_future = fut
            if group.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(group)
            else:
                self._prepare_rebalance(group)
                self._maybe_complete_join(group)
            return fut
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if group_instance_id is not None:
            group.static_members[group_instance_id] = member_id
        member.join_future = fut
        self._schedule_session(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            if (
                group.initial_deadline > 0
            ):  # a new member extends the initial delay, up to the rebalance timeout
                if group.join_timer is not None:
                    group.join_timer.cancel()
                delay = min(
                    self.config.initial_rebalance_delay_ms / 1000,
                    max(0.0, group.initial_deadline - self._loop.time()),
                )
                group.join_timer = self._loop.call_later(delay, self._join_deadline, group, True)
            else:
                self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)
        return fut

    def _check_member(
        self, group: Group | None, member_id: str, group_instance_id: str | None, generation: int
    ) -> tuple[ErrorCode, Member | None]:
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if (
            group_instance_id is not None
            and group.static_members.get(group_instance_id, member_id) != member_id
        ):
            return ErrorCode.FENCED_INSTANCE_ID, None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION, member
        return ErrorCode.NONE, member

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
        group = self._groups.get(group_id)
        code, member = self._check_member(group, member_id, group_instance_id, generation)
        if code != ErrorCode.NONE or group is None or member is None:
            return {"ErrorCode": code, "Assignment": b""}
        self._schedule_session(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return {"ErrorCode": ErrorCode.REBALANCE_IN_PROGRESS, "Assignment": b""}
        if group.state == GroupState.STABLE:
            return self._sync_body(group, member)
        if group.state != GroupState.COMPLETING_REBALANCE:
            return {"ErrorCode": ErrorCode.UNKNOWN_MEMBER_ID, "Assignment": b""}
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        _answer(member.sync_future, {"ErrorCode": ErrorCode.REBALANCE_IN_PROGRESS, "Assignment": b""})
        member.sync_future = fut
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            stored = self._store_group(group)
            if stored != ErrorCode.NONE and self._append_records is not None:
                self._propagate_assignment(group, group.generation, stored)
            else:
                self._after_write(
                    group_id, lambda failed: self._propagate_assignment(group, generation, failed)
                )
        return fut

    def _propagate_assignment(self, group: Group, generation: int, failed: ErrorCode | None) -> None:
        """The leader's assignment is stored (Kafka's storeGroup callback): the group is Stable and every member
        gets its assignment; if it could not be stored (cluster), every member gets the error and the group
        rebalances. Nothing happens if a rebalance or a resignation answered the members meanwhile."""
        if (
            self._groups.get(group.group_id) is not group
            or group.generation != generation
            or group.state != GroupState.COMPLETING_REBALANCE
        ):
            return
        if failed is not None:
            _log.warning(
                "group %r: the assignment of generation %d was not stored (%s); the members rejoin",
                group.group_id,
                generation,
                failed.name,
            )
            for m in group.members.values():
                _answer(m.sync_future, {"ErrorCode": failed, "Assignment": b""})
                m.sync_future = None
            self._prepare_rebalance(group)
            return
        group.state = GroupState.STABLE
        group.state_timestamp_ms = self._now_ms()
        for m in group.members.values():
            _answer(m.sync_future, self._sync_body(group, m))
            m.sync_future = None

    @staticmethod
    def _sync_body(group: Group, member: Member) -> dict[str, Any]:
        return {
            "ErrorCode": ErrorCode.NONE,
            "ProtocolType": group.protocol_type,
            "ProtocolName": group.protocol,
            "Assignment": member.assignment,
        }

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR
        group = self._groups.get(group_id)
        code, member = self._check_member(group, member_id, group_instance_id, generation)
        if group is not None and member is not None:
            self._schedule_session(group, member)
        if code != ErrorCode.NONE or group is None:
            return code
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: (group error, error per (member id, instance id))."""
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR, [ErrorCode.NOT_COORDINATOR] * len(members)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.UNKNOWN_MEMBER_ID, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        errors = []
        left = False
        for member_id, instance_id in members:
            if instance_id is not None:
                held = group.static_members.get(instance_id)
                if held is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != held:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = held
            member = group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            _log.info("group %r: member %s left", group_id, member_id)
            self._remove_member(group, member)
            errors.append(ErrorCode.NONE)
            left = True
        if left:
            self._after_removal(group)
        return ErrorCode.NONE, errors

    # -- offsets -------------------------------------------------------------------------------------------------

    def _offset_records(
        self, group_id: str, offsets: dict[tuple[str, int], tuple[int, int, str | None]]
    ) -> tuple[
        list[tuple[bytes, bytes | None]],
        dict[tuple[str, int], CommittedOffset],
        dict[tuple[str, int], ErrorCode],
    ]:
        """The records of a commit, the offsets they carry, and the errors of the partitions refused."""
        result: dict[tuple[str, int], ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        now = self._now_ms()
        accepted: dict[tuple[str, int], CommittedOffset] = {}
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

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: ``(topic, partition) -> (offset, leader epoch, metadata)``; an error per partition."""

        def all_(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
            return dict.fromkeys(offsets, code)

        if not group_id:
            return all_(ErrorCode.INVALID_GROUP_ID)
        if self.owner_error(group_id) != ErrorCode.NONE:
            return all_(ErrorCode.NOT_COORDINATOR)
        group = self._groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            group = None
        if generation < 0 and not member_id:
            if group is not None and group.members:
                return all_(ErrorCode.ILLEGAL_GENERATION)  # a simple commit into an active group
        else:
            code, member = self._check_member(group, member_id, group_instance_id, generation)
            if code != ErrorCode.NONE or group is None or member is None:
                return all_(code)
            if group.state == GroupState.COMPLETING_REBALANCE:
                return all_(ErrorCode.REBALANCE_IN_PROGRESS)
            self._schedule_session(group, member)
        records, accepted, result = self._offset_records(group_id, offsets)
        if records:
            try:
                self._append(group_id, records)
            except Exception as exc:
                _log.warning("group %r: offset commit not stored in __consumer_offsets: %s", group_id, exc)
                for tp in accepted:
                    result[tp] = append_error(exc)
                return result
            if group is None:
                group = self._groups[group_id] = Group(group_id)
            group.offsets.update(accepted)
            for tp in accepted:
                result[tp] = ErrorCode.NONE
        return result

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: as :meth:`commit_offsets`, but the records are a transactional batch of the producer
        and the offsets stay pending (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with RequireStable)
        until :meth:`complete_txn`. A member id or generation (v3+, KIP-447) is checked against the group;
        without them (v0-2) the commit is taken whatever the group's members, as Kafka does."""
        if not group_id:
            return dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID)
        if self.owner_error(group_id) != ErrorCode.NONE:
            return dict.fromkeys(offsets, ErrorCode.NOT_COORDINATOR)
        group = self._groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            group = None
        if generation >= 0 or member_id:
            code, member = self._check_member(group, member_id, group_instance_id, generation)
            if code != ErrorCode.NONE or group is None or member is None:
                return dict.fromkeys(offsets, code)
        records, accepted, result = self._offset_records(group_id, offsets)
        if records:
            try:
                self._append(group_id, records, (producer_id, producer_epoch))
            except ProducerStateError as exc:  # a fenced (older) producer epoch
                _log.info("group %r: transactional offset commit refused: %s", group_id, exc)
                return dict.fromkeys(offsets, ErrorCode.PRODUCER_FENCED)
            except KafkaError as exc:
                _log.warning("group %r: transactional offset commit not stored: %s", group_id, exc)
                for tp in accepted:
                    result[tp] = append_error(exc)
                return result
            except Exception as exc:
                _log.warning(
                    "group %r: transactional offset commit of producer %d not stored in __consumer_offsets: %s",
                    group_id,
                    producer_id,
                    exc,
                )
                for tp in accepted:
                    result[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
                return result
            if group is None:
                group = self._groups[group_id] = Group(group_id)
            group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
            for tp in accepted:
                result[tp] = ErrorCode.NONE
        return result

    def complete_txn(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """A COMMIT (or ABORT) marker of ``producer_id`` landed on ``offsets_partition`` of
        ``__consumer_offsets`` (Kafka's ``handleTxnCompletion``): the producer's pending offsets of the groups
        on that partition become committed (or are dropped)."""
        for group in list(self._groups.values()):
            if producer_id not in group.pending_txn_offsets:
                continue
            if self.partition_for(group.group_id) != offsets_partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id)
            if commit:
                group.offsets.update(pending)

    def pending_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions with an offset committed in a transaction not yet complete (RequireStable)."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """OffsetFetch: the committed offset of each partition (None: none), all of them when ``None``."""
        group = self._groups.get(group_id)
        offsets = {} if group is None or group.state == GroupState.DEAD else group.offsets
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def expire_offsets(self) -> int:
        """``offsets.retention.minutes`` (periodic): in a group without members, offsets committed longer ago
        than the retention are removed (tombstones written), as Kafka does for groups that are Empty; a group
        left with no offset and no member is forgotten. Returns the number of offsets removed."""
        now = self._now_ms()
        removed = 0
        for group in list(self._groups.values()):
            if group.members or group.state not in (GroupState.EMPTY, GroupState.DEAD):
                continue
            expired = [
                tp
                for tp, committed in group.offsets.items()
                if committed.commit_timestamp_ms + self.config.offsets_retention_ms <= now
            ]
            if not expired:
                continue
            try:
                self._append(
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
        """Tombstone the group's metadata and drop it (it has no member and no offset left)."""
        try:
            self._append(group.group_id, [(encode_group_key(group.group_id), None)])
        except Exception as exc:
            _log.warning(
                "group %r: cannot write its removal (it may reappear after a restart): %s",
                group.group_id,
                exc,
            )
        group.state = GroupState.DEAD
        self._groups.pop(group.group_id, None)

    # -- admin ---------------------------------------------------------------------------------------------------

    def list_groups(self) -> list[Group]:
        """ListGroups: every group this coordinator hosts (Kafka lists offset-only groups too)."""
        return [g for g in self._groups.values() if g.state != GroupState.DEAD]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: a group without members is removed with its offsets (tombstones written);
        GROUP_ID_NOT_FOUND for an unknown one, NON_EMPTY_GROUP while it has members."""
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
                self._append(group_id, records)
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

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (KIP-496): (group error, error per partition). A partition of a topic the members
        subscribe to is GROUP_SUBSCRIBED_TO_TOPIC; the others are removed (tombstones written)."""
        if self.owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR, {}
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.members and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = group.subscribed_topics()
        result: dict[tuple[str, int], ErrorCode] = {}
        removing = []
        for topic, partition in partitions:
            if topic in subscribed:
                result[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[(topic, partition)] = ErrorCode.NONE
                if (topic, partition) in group.offsets:
                    removing.append((topic, partition))
        if removing:
            try:
                self._append(group_id, [(encode_offset_key(group_id, t, p), None) for t, p in removing])
            except Exception as exc:
                _log.warning("group %r: offset deletion not stored in __consumer_offsets: %s", group_id, exc)
                return append_error(exc), {}
            for tp in removing:
                del group.offsets[tp]
        return ErrorCode.NONE, result

    def shutdown(self) -> None:
        """Cancel every timer (broker stop); pending answers are left to the closing connections."""
        for group in self._groups.values():
            if group.join_timer is not None:
                group.join_timer.cancel()
            for m in group.members.values():
                if m.session_timer is not None:
                    m.session_timer.cancel()
