"""Consumer groups under the KIP-848 protocol: ConsumerGroupHeartbeat and the reconciliation of each member towards
its target assignment (the consumer half of Kafka's ``GroupMetadataManager`` with ``CurrentAssignmentBuilder``).
The state is in :mod:`.consumer_state`, the assignors in :mod:`.assignors`.

:meth:`ConsumerGroups.heartbeat`, as Kafka answers it:

* Validation: an empty group id, instance id or rack id, a member epoch that is not 0 / -1 / -2 / positive, a join
  (epoch 0) without a rebalance timeout or without both subscribed topic names and regex or with owned
  partitions, a version-1 request without a member id -> INVALID_REQUEST; an assignor not in
  ``group.consumer.assignors`` -> UNSUPPORTED_ASSIGNOR; a new ``SubscribedTopicRegex`` that does not compile or
  uses what RE2J refuses (:mod:`.regex`) -> INVALID_REGULAR_EXPRESSION. A group id held by a classic group with
  members -> GROUP_ID_NOT_FOUND ("not a consumer group"); an empty classic group (offsets only) becomes a consumer
  group keeping its offsets, as Kafka converts it.
* Epoch 0 joins (a new member id: the client's from version 1, one made here for version 0). A known dynamic
  member joining again at epoch 0 starts over with nothing assigned. A static member (``InstanceId``) whose
  instance id is held by a member that did not leave with epoch -2 -> UNRELEASED_INSTANCE_ID; after such a leave
  the new member id takes over the old member's assignment. Another member id for a held instance id at a
  positive epoch -> FENCED_INSTANCE_ID; an unknown member -> UNKNOWN_MEMBER_ID.
* A member epoch above the member's, or below it other than its previous epoch with owned partitions within its
  assignment -> FENCED_MEMBER_EPOCH (the client gives up its partitions and joins again).
* A changed subscription or assignor, a new or departed member, or changed partition counts of the subscribed
  topics bump the group epoch; the target assignment is then computed again by the group's assignor (the one the
  members ask for most, ties by name; else the first of ``group.consumer.assignors``).
* Reconciliation (``CurrentAssignmentBuilder``): partitions the member holds but its target does not are revoked
  first: the member stays at its epoch in UNREVOKED_PARTITIONS and gets its assignment without them; once a
  heartbeat's owned partitions no longer include them it moves to the target epoch. A target partition still held
  (assigned or pending revocation) by another member is not given out until released (UNRELEASED_PARTITIONS).
  So a partition has one owner at a time: the new owner gets it only after the old one acked its revocation.
* Regular expressions (``SubscribedTopicRegex``; None in a request: unchanged, empty: none): a member's
  subscription is its topic names and the topics its expression resolved to. The coordinator resolves every
  expression of the group over the topics with an id, keeping those the heartbeating member's principal may
  DESCRIBE (``may_describe``, Kafka's rule), during the heartbeat (Kafka does it on a background thread; pylog's
  scan is of the topic names, bounded by :mod:`.regex`'s refusals): at once for an expression not resolved yet,
  else when ``regex_refresh_min_interval_ms`` passed since the last resolution and topics were created or deleted
  since (:func:`.regex.topics_fingerprint`) or ``regex_refresh_interval_ms`` passed. A resolution that changes
  an expression's topics bumps the group epoch. Each resolution is written (``ConsumerGroupRegularExpression``),
  its tombstone when no member subscribes to the expression any more.
* Timers: every heartbeat restarts the member's session timer (``group.consumer.session.timeout.ms``); a member
  that must revoke has ``RebalanceTimeoutMs`` to do it. Either expiring fences the member: it is removed, its
  partitions are free, the group epoch is bumped (a static member that left with -2 is removed by its session
  timeout only).
* Epoch -1 leaves (the member is removed, the group epoch bumped); -2 leaves a static member for a while (it
  keeps its assignment, epoch -2, until its instance id rejoins or its session expires).
* The answer carries the assignment when the request was a full one (epoch 0, or with rebalance timeout,
  subscription and owned partitions all given) or when the member's assigned partitions changed.

Persistence: every change calls the coordinator's ``store`` (the one place that writes), which appends Kafka's
``ConsumerGroup*`` records of ``__consumer_offsets`` that differ from those last written (:mod:`.consumer_records`)
before the member is answered; the loader replays them, so a restart or a coordinator failover keeps the group
epoch, the target assignment and every member's epochs and partitions. :meth:`ConsumerGroups.activate` restarts
the timers of a loaded group's members: those that do not heartbeat again are fenced after their session
timeout.

Thread-safety: event-loop thread only (timer tasks run on it too).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from broker_runtime.coordinator.group.assignors import ASSIGNORS, AssignmentSpec, MemberSpec
from broker_runtime.coordinator.group.consumer_records import metadata_hash
from broker_runtime.coordinator.group.consumer_state import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroupConfig,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    ResolvedRegex,
)
from broker_runtime.coordinator.group.regex import RegexError, check, resolve, topics_fingerprint
from broker_runtime.coordinator.group.state import Group, GroupState
from broker_runtime.coordinator.group.timer import CoordinatorTimer
from broker_runtime.coordinator.group.writer import Shared
from broker_runtime.errors import ErrorCode

__all__ = ["ConsumerGroups", "HeartbeatRequest", "HeartbeatResult"]

_log = logging.getLogger(__name__)

#: The ConsumerGroupHeartbeat version from which the client makes its member id (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, as the handler decoded it (topics by name; None: not changed since the last)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    #: None: not sent (unchanged); else the member's assigned partitions by topic name.
    assignment: Assignment | None = None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    """Does the member still hold one of ``revoking`` (None: it did not say, so it does)?"""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in revoking.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: Callable[[str, int], int],
) -> None:
    """Move ``member`` towards ``target`` (Kafka's ``CurrentAssignmentBuilder``); see the module docstring."""
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return
        _next_assignment(member, member.member_epoch + 1, target_epoch, target, owned, owner_epoch)
        return
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return
    _next_assignment(member, member.member_epoch, target_epoch, target, owned, owner_epoch)


def _next_assignment(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: Callable[[str, int], int],
) -> None:
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    unreleased = False
    for topic in set(target) | set(member.assigned):
        want = target.get(topic, frozenset())
        have = member.assigned.get(topic, frozenset())
        keep = have & want
        gone = have - keep
        new = {p for p in want - keep if owner_epoch(topic, p) == -1}
        unreleased = unreleased or len(new) < len(want - keep)
        if keep:
            assigned[topic] = keep
        if gone:
            revoking[topic] = gone
        if new:
            adding[topic] = frozenset(new)
    if revoking and _owns_any(owned, revoking):
        _set_epoch(member, epoch)
        member.state = MemberState.UNREVOKED_PARTITIONS
        member.assigned = assigned
        member.pending_revocation = revoking
        return
    for topic, ps in adding.items():
        assigned[topic] = assigned.get(topic, frozenset()) | ps
    _set_epoch(member, target_epoch)
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    member.assigned = assigned
    member.pending_revocation = {}


def _set_epoch(member: ConsumerMember, epoch: int) -> None:
    if epoch != member.member_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch


class ConsumerGroups:
    """See the module docstring. ``groups`` is the coordinator's map (classic and consumer groups side by side);
    ``topic_partitions(name)`` is a topic's partition count (None: no such topic); ``store(group, records)``
    appends the group's records and returns NONE or the error the member is told."""

    def __init__(
        self,
        shared: Shared,
        config: ConsumerGroupConfig,
        timer: CoordinatorTimer,
        topic_partitions: Callable[[str], int | None],
        store: Callable[[Group, ConsumerGroupState, Iterable[str]], ErrorCode],
        assignable: Callable[[str], bool] | None = None,
        topic_ids: Callable[[], Mapping[str, uuid.UUID]] = dict,
    ) -> None:
        self.config = config
        self._now_wall = shared.now_ms
        #: Every topic with an id, by name: what regular expressions are resolved over.
        self._topic_ids = topic_ids
        self._groups = shared.groups
        self._owner_error = shared.owner_error
        self._timer = timer
        self._topic_partitions = topic_partitions
        self._store = store
        #: Which existing topics can be assigned (those with a topic id); the handler's, kept for the timers and
        #: the load.
        self._assignable: Callable[[str], bool] = assignable or (lambda _: True)

    # -- requests --------------------------------------------------------------------------------------------

    def heartbeat(
        self,
        req: HeartbeatRequest,
        assignable: Callable[[str], bool] | None = None,
        may_describe: Callable[[str], bool] = lambda _: True,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: see the module docstring. ``assignable(topic)``: can the topic's partitions
        be named to the member (the handler's: it has a topic id); a topic that cannot counts as missing.
        ``may_describe(topic)``: may the member's principal DESCRIBE the topic (regular expressions resolve to
        those only)."""
        if assignable is not None:
            self._assignable = assignable
        try:
            self._validate(req)
            if self._owner_error(req.group_id) != ErrorCode.NONE:
                return HeartbeatResult(ErrorCode.NOT_COORDINATOR, None, req.member_id, req.member_epoch)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req)
            return self._heartbeat(req, may_describe)
        except _Refused as refused:
            return HeartbeatResult(refused.code, refused.message, req.member_id or None, req.member_epoch)

    def _validate(self, req: HeartbeatRequest) -> None:
        def invalid(message: str) -> _Refused:
            return _Refused(ErrorCode.INVALID_REQUEST, message)

        if not req.group_id:
            raise _Refused(ErrorCode.INVALID_GROUP_ID, "GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise invalid("RackId can't be empty.")
        if req.version >= CLIENT_MEMBER_ID_VERSION and not req.member_id:
            raise invalid("MemberId can't be empty.")
        epoch = req.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id:
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            # Kafka accepts an empty list of names or an empty regex: a member subscribed to no topic
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not req.member_id:
                raise invalid("MemberId can't be empty.")
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        # Only a new expression is checked (Kafka compiles it when the member's regex changes): one the member
        # already holds was checked when it got it, and a heartbeat repeating it costs no compilation.
        if req.subscribed_topic_regex and req.subscribed_topic_regex != self._held_regex(req):
            try:
                check(req.subscribed_topic_regex)
            except RegexError as exc:
                raise _Refused(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from None
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise _Refused(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.",
            )

    def _held_regex(self, req: HeartbeatRequest) -> str | None:
        """The expression the request's member subscribes to now (None: no such member, or none)."""
        group = self._groups.get(req.group_id)
        if group is None or group.state == GroupState.DEAD or group.consumer is None or not req.member_id:
            return None
        member = group.consumer.members.get(req.member_id)
        return None if member is None else member.subscribed_regex

    def _group(self, group_id: str, create: bool) -> tuple[Group, ConsumerGroupState]:
        group = self._groups.get(group_id)
        if group is not None and group.state != GroupState.DEAD and group.consumer is not None:
            return group, group.consumer
        if group is None or group.state == GroupState.DEAD:
            if not create:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Consumer group {group_id} not found.")
            group = Group(group_id)
            self._groups[group_id] = group
        elif group.members or not create:
            raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        else:
            _log.info("group %r: empty classic group becomes a consumer group", group_id)
        group.state = GroupState.EMPTY
        group.protocol_type = "consumer"
        group.protocol = None
        group.leader = None
        group.consumer = ConsumerGroupState()
        return group, group.consumer

    def _heartbeat(self, req: HeartbeatRequest, may_describe: Callable[[str], bool]) -> HeartbeatResult:
        joining = req.member_epoch == 0
        group, cg = self._group(req.group_id, joining)
        member_id = req.member_id or str(uuid.uuid4())
        changed_ids: set[str] = set()
        if req.instance_id is None:
            member = self._dynamic_member(cg, member_id, req, joining)
        else:
            member = self._static_member(group, cg, member_id, req, joining, changed_ids)
        if joining and member.member_id not in cg.members and len(cg.members) >= self.config.max_size:
            raise _Refused(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
            )
        new = member.member_id not in cg.members
        before_assigned = dict(member.assigned)
        bump = new
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            bump = bump or names != member.subscribed_topics
            member.subscribed_topics = names
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None  # an empty regex subscribes to nothing (librdkafka's)
            if regex != member.subscribed_regex:
                member.subscribed_regex = regex
                bump = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            bump = True
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if new:
            cg.members[member.member_id] = member
            if member.instance_id is not None:
                cg.static_members[member.instance_id] = member.member_id
            _log.info(
                "group %r: member %s (instance %s) joins the consumer group",
                req.group_id,
                member.member_id,
                member.instance_id,
            )
        if self._refresh_regexes(group, cg, may_describe):
            bump = True
        metadata = self._subscription_metadata(cg)
        if metadata != cg.subscription_metadata:
            cg.subscription_metadata = metadata
            bump = True
        if bump:
            self._bump(group, cg)
        if cg.group_epoch > cg.assignment_epoch:
            self._assign(group, cg)
        target = cg.target.get(member.member_id, {})
        before = (member.member_epoch, member.state, dict(member.assigned), dict(member.pending_revocation))
        reconcile(
            member,
            cg.assignment_epoch,
            target,
            req.owned,
            lambda t, p: cg.owner_epoch(t, p, member.member_id),
        )
        after = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        if before != after or new:
            changed_ids.add(member.member_id)
            self._rebalance_timer(group, member)
        self._session_timer(group, member)
        code = self._store(group, cg, changed_ids)
        if code != ErrorCode.NONE:
            return HeartbeatResult(code, "the group's change could not be written", member.member_id, -1)
        full = joining or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.owned is not None
        )
        send = full or member.assigned != before_assigned
        return HeartbeatResult(
            ErrorCode.NONE,
            None,
            member.member_id,
            member.member_epoch,
            self.config.heartbeat_interval_ms,
            dict(member.assigned) if send else None,
        )

    def _dynamic_member(
        self, cg: ConsumerGroupState, member_id: str, req: HeartbeatRequest, joining: bool
    ) -> ConsumerMember:
        member = cg.members.get(member_id)
        if member is None:
            if not joining:
                raise _Refused(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {req.group_id}.",
                )
            return ConsumerMember(member_id)
        if joining:
            # the client starts over (it owns nothing): its old assignment is released
            member.assigned, member.pending_revocation = {}, {}
            _set_epoch(member, 0)
            member.state = MemberState.STABLE
            return member
        self._check_epoch(member, req)
        return member

    def _static_member(
        self,
        group: Group,
        cg: ConsumerGroupState,
        member_id: str,
        req: HeartbeatRequest,
        joining: bool,
        changed_ids: set[str],
    ) -> ConsumerMember:
        instance_id = req.instance_id
        assert instance_id is not None
        held_by = cg.static_members.get(instance_id)
        existing = None if held_by is None else cg.members.get(held_by)
        if joining:
            if existing is None:
                return cg.members.get(member_id) or ConsumerMember(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _Refused(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.",
                )
            # the new member id takes over the old member's assignment
            existing.cancel_timers()
            del cg.members[existing.member_id]
            target = cg.target.pop(existing.member_id, None)
            member = ConsumerMember(
                member_id,
                instance_id,
                existing.rack_id,
                subscribed_topics=existing.subscribed_topics,
                subscribed_regex=existing.subscribed_regex,
                server_assignor=existing.server_assignor,
                rebalance_timeout_ms=existing.rebalance_timeout_ms,
                assigned=dict(existing.assigned),
            )
            if target is not None:
                cg.target[member_id] = target
            cg.members[member_id] = member
            cg.static_members[instance_id] = member_id
            changed_ids.update((existing.member_id, member_id))
            _log.info(
                "group %r: static member %s rejoins as %s, replacing %s",
                group.group_id,
                instance_id,
                member_id,
                existing.member_id,
            )
            return member
        if existing is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Refused(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{existing.member_id}.",
            )
        self._check_epoch(existing, req)
        return existing

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
        received = req.member_epoch
        if received > member.member_epoch:
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.",
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch or not _is_subset(req.owned, member.assigned)
        ):
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.",
            )

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group, cg = self._group(req.group_id, False)
        if req.instance_id is None:
            member = cg.members.get(req.member_id)
            if member is None:
                raise _Refused(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {req.group_id}.",
                )
        else:
            held = cg.static_members.get(req.instance_id)
            member = None if held is None else cg.members.get(held)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise _Refused(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                    f"{member.member_id}.",
                )
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                _log.info(
                    "group %r: static member %s (instance %s) left for a while",
                    group.group_id,
                    member.member_id,
                    req.instance_id,
                )
                if member.rebalance_timer is not None:
                    member.rebalance_timer.cancel()
                    member.rebalance_timer = None
                _set_epoch(member, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                member.pending_revocation = {}
                code = self._store(group, cg, {member.member_id})
                return HeartbeatResult(code, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        _log.info("group %r: member %s left the consumer group", group.group_id, member.member_id)
        code = self._fence(group, cg, member)
        return HeartbeatResult(code, None, req.member_id, req.member_epoch)

    # -- the group epoch and the target assignment -------------------------------------------------------------

    def _subscription_metadata(self, cg: ConsumerGroupState) -> dict[str, int]:
        found = {}
        for topic in cg.subscribed_topics():
            count = self._topic_partitions(topic)
            if count is not None and self._assignable(topic):
                found[topic] = count
        return found

    def _refresh_regexes(
        self, group: Group, cg: ConsumerGroupState, may_describe: Callable[[str], bool]
    ) -> bool:
        """Drop the resolutions no member subscribes to; resolve the group's expressions when due (see the
        module docstring). True when an expression's topics changed (the group epoch is bumped)."""
        subscribed = cg.subscribed_regexes()
        for gone in set(cg.resolved_regexes) - subscribed:
            del cg.resolved_regexes[gone]
        if not subscribed:
            return False
        now = self._timer.now_ms()
        ids: Mapping[str, uuid.UUID] | None = None
        if subscribed <= set(cg.resolved_regexes):
            last = [r.refreshed_at for r in cg.resolved_regexes.values()]
            if all(t is not None for t in last):
                # (cheapest first: most heartbeats stop here, without hashing the topics)
                since = now - max(t for t in last if t is not None)
                if since < self.config.regex_refresh_min_interval_ms:
                    return False
                ids = self._topic_ids()  # only now: most heartbeats stopped above without scanning the topics
                fingerprint = topics_fingerprint(ids)
                if since < self.config.regex_refresh_interval_ms and all(
                    r.version == fingerprint for r in cg.resolved_regexes.values()
                ):
                    return False
        if ids is None:
            ids = self._topic_ids()
        fingerprint = topics_fingerprint(ids)
        found = resolve(subscribed, ids, may_describe)
        wall = self._now_wall()
        changed = False
        for regex, topics in found.items():
            old = cg.resolved_regexes.get(regex)
            changed = changed or old is None or old.topics != topics
            cg.resolved_regexes[regex] = ResolvedRegex(topics, fingerprint, wall, now)
        _log.info(
            "group %r: %d regular expression(s) resolved over %d topic(s)%s",
            group.group_id,
            len(found),
            len(ids),
            " (subscriptions changed)" if changed else "",
        )
        return changed

    def _bump(self, group: Group, cg: ConsumerGroupState) -> None:
        cg.group_epoch += 1
        _log.info("group %r: group epoch %d", group.group_id, cg.group_epoch)

    def assignor_of(self, cg: ConsumerGroupState) -> str:
        """The assignor the members ask for most (ties by name), else the first configured."""
        asked = Counter(m.server_assignor for m in cg.members.values() if m.server_assignor is not None)
        if asked:
            best = max(asked.values())
            return min(name for name, n in asked.items() if n == best)
        return self.config.assignors[0]

    def _assign(self, group: Group, cg: ConsumerGroupState) -> None:
        assignor = self.assignor_of(cg)
        spec = AssignmentSpec(
            tuple(MemberSpec(m.member_id, m.instance_id, cg.member_topics(m)) for m in cg.members.values()),
            dict(cg.subscription_metadata),
            dict(cg.target),
        )
        cg.target = {m: dict(a) for m, a in ASSIGNORS[assignor](spec).items()}
        cg.assignment_epoch = cg.group_epoch
        _log.info(
            "group %r: target assignment of epoch %d computed by the %s assignor for %d member(s)",
            group.group_id,
            cg.assignment_epoch,
            assignor,
            len(cg.members),
        )

    # -- fencing and timers ----------------------------------------------------------------------------------

    def _fence(self, group: Group, cg: ConsumerGroupState, member: ConsumerMember) -> ErrorCode:
        """Remove ``member``: its partitions are free, the group epoch is bumped."""
        member.cancel_timers()
        cg.members.pop(member.member_id, None)
        cg.target.pop(member.member_id, None)
        if member.instance_id is not None and cg.static_members.get(member.instance_id) == member.member_id:
            del cg.static_members[member.instance_id]
        for gone in set(cg.resolved_regexes) - cg.subscribed_regexes():
            del cg.resolved_regexes[gone]
        cg.subscription_metadata = self._subscription_metadata(cg)
        self._bump(group, cg)
        return self._store(group, cg, {member.member_id})

    def _session_timer(self, group: Group, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._timer.schedule(
            self.config.session_timeout_ms, lambda: self._expired(group, member, "its session expired")
        )

    def _rebalance_timer(self, group: Group, member: ConsumerMember) -> None:
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            epoch = member.member_epoch

            def expired() -> None:
                if member.member_epoch == epoch and member.state == MemberState.UNREVOKED_PARTITIONS:
                    self._expired(
                        group, member, "it did not revoke its partitions within the rebalance timeout"
                    )

            member.rebalance_timer = self._timer.schedule(max(1, member.rebalance_timeout_ms), expired)

    def _expired(self, group: Group, member: ConsumerMember, why: str) -> None:
        cg = group.consumer
        if (
            cg is None
            or cg.members.get(member.member_id) is not member
            or self._groups.get(group.group_id) is not group
        ):
            return
        _log.info("group %r: member %s fenced: %s", group.group_id, member.member_id, why)
        self._fence(group, cg, member)

    # -- loading, unloading ------------------------------------------------------------------------------------

    def activate(self, groups: Iterable[Group]) -> None:
        """Loaded consumer groups: every member gets a fresh session timer (and a rebalance timer while it must
        revoke); the group keeps the partition counts of its topics when they hash as the replayed
        ``MetadataHash`` (else its next heartbeat bumps the group epoch: the topics changed meanwhile)."""
        for group in groups:
            if group.consumer is None:
                continue
            cg = group.consumer
            if not cg.subscription_metadata:
                metadata = self._subscription_metadata(cg)
                if metadata_hash(metadata) == cg.loaded_metadata_hash:
                    cg.subscription_metadata = metadata
            for member in group.consumer.members.values():
                self._session_timer(group, member)
                self._rebalance_timer(group, member)

    @staticmethod
    def unload(group: Group) -> None:
        if group.consumer is not None:
            for member in group.consumer.members.values():
                member.cancel_timers()
