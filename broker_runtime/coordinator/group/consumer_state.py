"""A consumer group's state under the KIP-848 protocol (Kafka's ``ConsumerGroup`` / ``ConsumerGroupMember``).

Epochs: the *group epoch* grows by one each time the group's subscriptions change (a member joins, leaves, is
fenced or changes its subscription or assignor) or the partition counts of the subscribed topics change; the
*assignment epoch* is the group epoch the current target assignment was computed at (the assignment is computed
again, lazily, at the next heartbeat once the group epoch is ahead). Each member has a *member epoch*: the target
assignment epoch it is reconciled to, with its *previous member epoch* (a heartbeat that lost the answer bumping it
is accepted once more at the previous epoch).

Member states (Kafka's ``MemberState``): STABLE (its assigned partitions are its target's), UNREVOKED_PARTITIONS
(it must first give back ``pending_revocation``; it keeps its old epoch meanwhile), UNRELEASED_PARTITIONS (some
of its target partitions are still held by other members; it gets them when they are released).

Group states (Kafka's ``ConsumerGroupState``): Empty (no member), Assigning (group epoch ahead of the assignment
epoch), Reconciling (a member is not reconciled to the assignment epoch), Stable.

Assignments here are by topic *name* (``{topic: frozenset(partitions)}``); the request handlers translate to and
from Kafka's topic ids at the edge.

Event-loop thread only (the coordinator owns every instance).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from broker_runtime.purgatory.timing_wheel import TimerTask

__all__ = [
    "ConsumerGroupConfig",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ConsumerGroupState",
    "ConsumerMember",
    "MemberState",
    "ResolvedRegex",
]

#: The member epoch a leaving member sends (Kafka's ``LEAVE_GROUP_MEMBER_EPOCH``).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: The member epoch a static member sends when it leaves for a while (``LEAVE_GROUP_STATIC_MEMBER_EPOCH``).
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: topic name -> partitions.
Assignment = dict[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The ``group.consumer.*`` broker settings (Kafka's names in the README's config table)."""

    assignors: tuple[str, ...] = ("uniform", "range")
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    #: ``group.consumer.regex.refresh.interval.ms``: a group's regular expressions are resolved again at least
    #: this often (a topic the principal may now describe is picked up).
    regex_refresh_interval_ms: int = 600_000
    #: ``pylog.group.consumer.regex.refresh.min.interval.ms``: never resolved again sooner than this after the
    #: last resolution (Kafka's fixed ``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``, 10 s).
    regex_refresh_min_interval_ms: int = 10_000


class MemberState(enum.Enum):
    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] = ()
    #: ``SubscribedTopicRegex`` (None: none; an empty one is stored as None).
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_timer: TimerTask | None = None
    rebalance_timer: TimerTask | None = None

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.rebalance_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.rebalance_timer = None


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A subscribed regular expression resolved to topic names (Kafka's ``ResolvedRegularExpression``):
    ``version`` is the fingerprint of the topics scanned (:func:`.regex.topics_fingerprint`), ``timestamp_ms``
    the wall-clock time of the resolution (what the record keeps); ``refreshed_at`` the coordinator clock's
    time of it (None: loaded from the log, not resolved by this coordinator yet)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int
    refreshed_at: int | None = None


@dataclass(eq=False)
class ConsumerGroupState:
    """The consumer-protocol half of a :class:`~.state.Group` whose type is ``consumer``."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: instance id -> member id of the static member holding it.
    static_members: dict[str, str] = field(default_factory=dict)
    #: member id -> its target assignment (computed at ``assignment_epoch``).
    target: dict[str, Assignment] = field(default_factory=dict)
    #: Every regular expression a member subscribes to -> the topics it resolved to (a member's subscription is
    #: its topic names and its expression's topics).
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    #: The partition counts of the subscribed topics the group epoch was last bumped for.
    subscription_metadata: dict[str, int] = field(default_factory=dict)
    #: The value last written to ``__consumer_offsets`` under each of the group's record keys (read back by the
    #: replay): a change writes only what differs (:mod:`.consumer_records`).
    written: dict[bytes, bytes] = field(default_factory=dict)
    #: The ``MetadataHash`` the replay read: the loaded group keeps its ``subscription_metadata`` when the topics
    #: hash the same once it is active, else its next heartbeat bumps the group epoch.
    loaded_metadata_hash: int = 0

    def state(self) -> str:
        """Kafka's ``ConsumerGroupState`` as DescribeGroups, ListGroups and ConsumerGroupDescribe name it."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
            for m in self.members.values()
            if m.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
        ):
            return "Reconciling"
        return "Stable"

    def member_topics(self, member: ConsumerMember) -> frozenset[str]:
        """The member's subscription: its topic names and what its regular expression resolved to."""
        names = frozenset(member.subscribed_topics)
        if member.subscribed_regex is None:
            return names
        resolved = self.resolved_regexes.get(member.subscribed_regex)
        return names if resolved is None else names | resolved.topics

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_regex for m in self.members.values() if m.subscribed_regex is not None}

    def owner_epoch(self, topic: str, partition: int, exclude: str) -> int:
        """The epoch of the member (other than ``exclude``) that holds the partition, assigned or still pending
        revocation; -1 when no other member holds it (Kafka's ``currentPartitionEpoch``)."""
        for m in self.members.values():
            if m.member_id == exclude:
                continue
            if partition in m.assigned.get(topic, ()) or partition in m.pending_revocation.get(topic, ()):
                return m.member_epoch
        return -1
