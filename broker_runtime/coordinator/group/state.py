"""A classic consumer group's state (Kafka's ``GroupMetadata`` / ``MemberMetadata``).

State machine (Kafka's ``GroupState``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join of a new member, leader rejoin, leave, session timeout--> PreparingRebalance
    PreparingRebalance --no member left--> Empty;  any --DeleteGroups--> Dead

The generation id grows by one each time a join phase completes (also when it completes with no member).
Committed offsets belong to the group whatever its state; a group with no member and no offset is forgotten.

:class:`GroupConfig` holds the broker settings the coordinator follows.

Event-loop thread only (the coordinator owns every instance). Timer fields hold tasks of the coordinator's
:class:`~.timer.CoordinatorTimer` (monotonic milliseconds of the broker's clock).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from broker_runtime.coordinator.group.consumer_state import ConsumerGroupConfig, ConsumerGroupState
from broker_runtime.purgatory.timing_wheel import TimerTask

__all__ = ["CommittedOffset", "Group", "GroupConfig", "GroupState", "Member"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the coordinator follows (Kafka's names in the README's config table)."""

    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: The ``group.consumer.*`` settings of KIP-848 groups.
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: Pending JoinGroup answer (set while the member waits in PreparingRebalance).
    join_future: asyncio.Future[dict[str, Any]] | None = None
    #: Pending SyncGroup answer (set while the member waits in CompletingRebalance).
    sync_future: asyncio.Future[dict[str, Any]] | None = None
    #: The session timer (rescheduled by every heartbeat, join, sync and commit).
    session_timer: TimerTask | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    @property
    def awaiting(self) -> bool:
        """Waiting for a JoinGroup or SyncGroup answer: kept alive without heartbeats (Kafka's shouldKeepAlive)."""
        return (self.join_future is not None and not self.join_future.done()) or (
            self.sync_future is not None and not self.sync_future.done()
        )


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: group.instance.id -> member id of the static member holding it.
    static_members: dict[str, str] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED and not yet used to join.
    pending_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    #: Offsets committed inside open transactions (TxnOffsetCommit): producer id -> partition -> offset; they
    #: move to ``offsets`` when the COMMIT marker lands on the group's offsets partition, an ABORT drops them.
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    #: The join-phase timer (initial delay or rebalance timeout) while PreparingRebalance.
    join_timer: TimerTask | None = None
    #: While the initial delay runs: the deadline (clock ms) it may not extend past (None otherwise).
    initial_deadline_ms: int | None = None
    state_timestamp_ms: int = -1
    #: Set while the group is of type ``consumer`` (KIP-848, :mod:`.consumer_state`): its members are there and
    #: ``members`` (the classic ones) is empty.
    consumer: ConsumerGroupState | None = None

    @property
    def group_type(self) -> str:
        """Kafka's ``GroupType`` name: ``consumer`` (KIP-848) or ``classic``."""
        return "consumer" if self.consumer is not None else "classic"

    @property
    def has_members(self) -> bool:
        """Members of either protocol."""
        return bool(self.members) or (self.consumer is not None and bool(self.consumer.members))

    def all_joined(self) -> bool:
        return all(m.join_future is not None and not m.join_future.done() for m in self.members.values())

    def select_protocol(self) -> str | None:
        """Kafka's vote: among the protocols every member supports, each member votes for its first choice."""
        if not self.members:
            return None
        members = list(self.members.values())
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        if not common:
            return None
        votes: dict[str, int] = {}
        for m in members:
            choice = next(name for name, _ in m.protocols if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        # ties: the first choice of the first member among the most voted
        best = max(votes.values())
        return next(name for name, _ in members[0].protocols if votes.get(name) == best)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member is compatible: same protocol type and at least one protocol in common."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        common = {name for name, _ in protocols}
        for m in self.members.values():
            common &= {name for name, _ in m.protocols}
        return bool(common)

    def subscribed_topics(self) -> set[str]:
        """The topics the members subscribe to, read from their ``consumer`` protocol metadata (Kafka's
        ConsumerProtocolSubscription: int16 version, then an int32 count of int16-length topic names); a
        metadata that does not parse counts as no topic."""
        topics: set[str] = set()
        if self.consumer is not None:
            return self.consumer.subscribed_topics()
        if self.protocol_type != "consumer":
            return topics
        for m in self.members.values():
            for _, meta in m.protocols[:1]:
                topics |= _subscription_topics(meta)
        return topics


def _subscription_topics(meta: bytes) -> set[str]:
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", meta, pos)
        pos += 4
        found = set()
        for _ in range(max(0, count)):
            (size,) = struct.unpack_from(">h", meta, pos)
            pos += 2
            found.add(meta[pos : pos + size].decode())
            pos += size
        return found
    except (struct.error, UnicodeDecodeError):
        return set()
