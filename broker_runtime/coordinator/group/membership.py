"""Membership of classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the join phase, session timeouts
(the membership half of Kafka's ``GroupMetadataManager``; the group's state machine is in :mod:`.state`).

Answers are Kafka's response bodies, some as futures resolved later on the event loop:

* :meth:`GroupMembership.join`: session timeout outside ``[group.min.session.timeout.ms,
  group.max.session.timeout.ms]`` -> INVALID_SESSION_TIMEOUT; another protocol type or no protocol in common ->
  INCONSISTENT_GROUP_PROTOCOL. A new member without a group instance id joining with JoinGroup v4+ first gets
  MEMBER_ID_REQUIRED and its member id (KIP-394), valid for its session timeout. A new member, a leader that
  rejoins, or a member whose protocols changed starts a rebalance (PreparingRebalance); the answers wait until
  every known member has rejoined or the rebalance timeout (the largest of the members') passed, when the members
  that did not rejoin are removed. A group that was Empty waits ``group.initial.rebalance.delay.ms`` first
  (extended by each new member, at most up to the rebalance timeout), as Kafka. The join phase ends with
  generation + 1, the protocol chosen by vote among the protocols every member supports, and a leader (the
  previous one if still a member), which alone gets the member list.
* Static membership (KIP-345): a member that joins with a known ``group.instance.id`` and no member id replaces
  the previous holder (whose pending answers get FENCED_INSTANCE_ID); in a Stable group with unchanged protocols
  it takes over the assignment without a rebalance. A request naming an instance id with another member id is
  FENCED_INSTANCE_ID. Static members are removed only by session timeout or LeaveGroup.
* A consumer group (KIP-848, :mod:`.consumer`) with members answers a JoinGroup INCONSISTENT_GROUP_PROTOCOL
  (pylog does not let classic members into it); an empty one becomes a classic group, keeping its offsets.
* :meth:`GroupMembership.sync`: followers wait for the leader's assignments; the members' answers wait for the
  replication of the leader's assignment (the group stays CompletingRebalance meanwhile); then every member gets
  its own and the group is Stable. If the assignment cannot be stored every member gets the error and the group
  rebalances (Kafka's storeGroup callback). Wrong generation -> ILLEGAL_GENERATION; during a join phase ->
  REBALANCE_IN_PROGRESS.
* :meth:`GroupMembership.heartbeat`: resets the member's session timer; REBALANCE_IN_PROGRESS during a join phase
  tells it to rejoin. A member without a heartbeat, join, sync or commit for its session timeout is removed
  (unless it waits for a join or sync answer) and the group rebalances.
* :meth:`GroupMembership.leave`: removes members (by member id, or by instance id for static members) and
  rebalances.

Timers (session, join phase, initial delay, pending member ids) are tasks of the :class:`~.timer.CoordinatorTimer`
on the broker's clock. The group's metadata is written (:class:`~.writer.GroupWriter`) when a generation becomes
Stable (the leader's SyncGroup, a static member's takeover) and when a generation completes Empty.

Thread-safety: event-loop thread only (futures are created on ``loop``; timer tasks run on it too).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from broker_runtime.coordinator.group.state import Group, GroupState, Member
from broker_runtime.coordinator.group.timer import CoordinatorTimer
from broker_runtime.coordinator.group.writer import Shared
from broker_runtime.errors import ErrorCode

__all__ = ["GroupMembership", "JoinRequest", "answer", "join_error"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup request, as the handler decoded it (``rebalance_timeout_ms`` < 0: v0, the session timeout)."""

    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    require_known_member_id: bool


def answer(fut: asyncio.Future[dict[str, Any]] | None, body: dict[str, Any]) -> None:
    """Resolve a waiting JoinGroup / SyncGroup answer unless it is resolved already."""
    if fut is not None and not fut.done():
        fut.set_result(body)


def join_error(code: ErrorCode, member_id: str = "") -> dict[str, Any]:
    """A JoinGroup answer that carries only an error."""
    return {
        "ErrorCode": code,
        "GenerationId": -1,
        "ProtocolName": "",
        "Leader": "",
        "MemberId": member_id,
        "Members": [],
    }


def _sync_error(code: ErrorCode) -> dict[str, Any]:
    return {"ErrorCode": code, "Assignment": b""}


class GroupMembership:
    """See the module docstring. ``groups`` is the coordinator's map, shared with the offsets manager."""

    def __init__(self, shared: Shared, timer: CoordinatorTimer, loop: asyncio.AbstractEventLoop) -> None:
        self.config = shared.config
        self._owner_error = shared.owner_error
        self._groups = shared.groups
        self._writer = shared.writer
        self._timer = timer
        self._loop = loop
        self._now_ms = shared.now_ms

    # -- loading, unloading, shutdown --------------------------------------------------------------------------

    def activate(self, groups: Iterable[Group]) -> None:
        """Loaded groups with members are Stable, each member on a fresh session timer (members that keep
        heartbeating go on in their generation)."""
        for group in groups:
            if group.members:
                group.state = GroupState.STABLE
                for member in group.members.values():
                    self.touch(group, member)

    def unload(self, group: Group, code: ErrorCode) -> None:
        """Stop the group's timers and answer its waiting members ``code``; the group is Dead."""
        self._cancel_timers(group)
        for member in group.members.values():
            answer(member.join_future, join_error(code, member.member_id))
            answer(member.sync_future, _sync_error(code))
            member.join_future = member.sync_future = None
        group.state = GroupState.DEAD

    @staticmethod
    def _cancel_timers(group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in group.members.values():
            if member.session_timer is not None:
                member.session_timer.cancel()
                member.session_timer = None

    def shutdown(self) -> None:
        """Cancel every timer (broker stop); pending answers are left to the closing connections."""
        for group in self._groups.values():
            self._cancel_timers(group)

    # -- sessions --------------------------------------------------------------------------------------------

    def touch(self, group: Group, member: Member) -> None:
        """The member showed it is alive: its session timer starts again."""
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._timer.schedule(
            member.session_timeout_ms, lambda: self._session_expired(group, member)
        )

    def _session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting:
            self.touch(group, member)
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
        answer(member.join_future, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        answer(member.sync_future, _sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        if group.state == GroupState.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(group)  # the last member left, or every remaining one already rejoined

    def check_member(
        self, group: Group | None, member_id: str, group_instance_id: str | None, generation: int
    ) -> tuple[ErrorCode, Member | None]:
        """Is ``member_id`` (holding ``group_instance_id``) a member of ``group`` in ``generation``? The error
        (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION) and the member when it is one."""
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

    # -- join phase ------------------------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        for m in group.members.values():  # a follower waiting for its assignment must rejoin
            answer(m.sync_future, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
            m.sync_future = None
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.state_timestamp_ms = self._now_ms()
        rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.join_timer is not None:
            group.join_timer.cancel()
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_deadline_ms = self._timer.now_ms() + rebalance_ms
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_ms)
            group.join_timer = self._timer.schedule(delay, lambda: self._join_deadline(group))
        else:
            group.initial_deadline_ms = None
            group.join_timer = self._timer.schedule(rebalance_ms, lambda: self._join_deadline(group))

    def _join_deadline(self, group: Group) -> None:
        """The initial delay or the rebalance timeout passed: members that did not rejoin are removed."""
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
        if group.state != GroupState.PREPARING_REBALANCE or group.initial_deadline_ms is not None:
            return  # the initial delay completes by its timer
        if group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_deadline_ms = None
        group.generation += 1
        group.state_timestamp_ms = self._now_ms()
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = None
            group.leader = None
            self._writer.store_group(group)
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
            answer(member.join_future, self._join_body(group, member))
            member.join_future = None
            self.touch(group, member)

    @staticmethod
    def _join_body(group: Group, member: Member) -> dict[str, Any]:
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

    # -- requests --------------------------------------------------------------------------------------------

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
        """JoinGroup: the answer now, or a future of it."""
        if not group_id:
            return join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        if self._owner_error(group_id) != ErrorCode.NONE:
            return join_error(ErrorCode.NOT_COORDINATOR, member_id)
        req = JoinRequest(
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
        if (
            not self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        rebalance_timeout_ms = req.rebalance_timeout_ms
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = req.session_timeout_ms
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            group = self._groups[group_id] = Group(group_id)
        if group.consumer is not None:
            if group.consumer.members:
                # a consumer group (KIP-848) with members: pylog does not mix classic members into it
                return join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
            _log.info("group %r: empty consumer group becomes a classic group", group_id)
            group.consumer = None
            group.protocol_type = None
        if not group.supports(req.protocol_type, req.protocols):
            return join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        if not member_id or member_id in group.pending_members:
            return self._join_new(group, req, rebalance_timeout_ms, fut)
        member = group.members.get(member_id)
        if member is None:
            return join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if req.group_instance_id is not None and group.static_members.get(req.group_instance_id) != member_id:
            return join_error(ErrorCode.FENCED_INSTANCE_ID, member_id)
        changed = member.protocols != req.protocols
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        answer(member.join_future, join_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id))
        member.join_future = fut
        self.touch(group, member)
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
        req: JoinRequest,
        rebalance_timeout_ms: int,
        fut: asyncio.Future[dict[str, Any]],
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        member_id, group_instance_id = req.member_id, req.group_instance_id
        if not member_id:
            member_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is None and req.require_known_member_id:
                group.pending_members.add(member_id)
                self._timer.schedule(req.session_timeout_ms, lambda: group.pending_members.discard(member_id))
                return join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        group.pending_members.discard(member_id)
        member = Member(
            member_id,
            group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            rebalance_timeout_ms,
            req.protocol_type,
            req.protocols,
        )
        old_id = None if group_instance_id is None else group.static_members.get(group_instance_id)
        old = None if old_id is None else group.members.get(old_id)
        if old is not None:
            return self._replace_static(group, old, member, fut)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if group_instance_id is not None:
            group.static_members[group_instance_id] = member_id
        member.join_future = fut
        self.touch(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.initial_deadline_ms is not None:
                # a new member extends the initial delay, up to the rebalance timeout
                if group.join_timer is not None:
                    group.join_timer.cancel()
                delay = min(
                    self.config.initial_rebalance_delay_ms,
                    max(0, group.initial_deadline_ms - self._timer.now_ms()),
                )
                group.join_timer = self._timer.schedule(delay, lambda: self._join_deadline(group))
            else:
                self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)
        return fut

    def _replace_static(
        self, group: Group, old: Member, member: Member, fut: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        """KIP-345: the new holder of the instance id replaces the old member, which is fenced."""
        member_id, instance_id = member.member_id, member.group_instance_id
        assert instance_id is not None
        answer(old.join_future, join_error(ErrorCode.FENCED_INSTANCE_ID, old.member_id))
        answer(old.sync_future, _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        if old.session_timer is not None:
            old.session_timer.cancel()
        del group.members[old.member_id]
        member.assignment = old.assignment
        group.members[member_id] = member
        group.static_members[instance_id] = member_id
        if group.leader == old.member_id:
            group.leader = member_id
        self.touch(group, member)
        if (
            group.state == GroupState.STABLE
            and old.protocols == member.protocols
            and group.leader != member_id
        ):
            _log.info(
                "group %r: static member %s rejoined as %s; assignment kept, no rebalance",
                group.group_id,
                instance_id,
                member_id,
            )
            self._writer.store_group(group)
            return self._join_body(group, member)
        member.join_future = fut
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return fut

    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        """SyncGroup: the member's assignment now, or a future of it."""
        if self._owner_error(group_id) != ErrorCode.NONE:
            return _sync_error(ErrorCode.NOT_COORDINATOR)
        group = self._groups.get(group_id)
        code, member = self.check_member(group, member_id, group_instance_id, generation)
        if code != ErrorCode.NONE or group is None or member is None:
            return _sync_error(code)
        self.touch(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return _sync_error(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state == GroupState.STABLE:
            return self._sync_body(group, member)
        if group.state != GroupState.COMPLETING_REBALANCE:
            return _sync_error(ErrorCode.UNKNOWN_MEMBER_ID)
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        answer(member.sync_future, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = fut
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            stored = self._writer.store_group(group)
            if stored != ErrorCode.NONE:
                self._propagate_assignment(group, group.generation, stored)
            else:
                self._writer.after_write(
                    group_id, lambda failed: self._propagate_assignment(group, generation, failed)
                )
        return fut

    def _propagate_assignment(self, group: Group, generation: int, failed: ErrorCode | None) -> None:
        """The leader's assignment is stored (Kafka's storeGroup callback): the group is Stable and every member
        gets its assignment; if it could not be stored, every member gets the error and the group rebalances.
        Nothing happens if a rebalance or a resignation answered the members meanwhile."""
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
                answer(m.sync_future, _sync_error(failed))
                m.sync_future = None
            self._prepare_rebalance(group)
            return
        group.state = GroupState.STABLE
        group.state_timestamp_ms = self._now_ms()
        for m in group.members.values():
            answer(m.sync_future, self._sync_body(group, m))
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
        """Heartbeat: resets the member's session timer."""
        if self._owner_error(group_id) != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR
        group = self._groups.get(group_id)
        code, member = self.check_member(group, member_id, group_instance_id, generation)
        if group is not None and member is not None:
            self.touch(group, member)
        if code != ErrorCode.NONE or group is None:
            return code
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: (group error, error per (member id, instance id))."""
        if self._owner_error(group_id) != ErrorCode.NONE:
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
