"""Kafka's group coordinator (classic groups, and consumer groups of KIP-848): consumer group membership, rebalances, generations and committed offsets
kept in ``__consumer_offsets`` (see :mod:`.coordinator` for its parts)."""

from broker_runtime.coordinator.group.consumer import HeartbeatRequest, HeartbeatResult
from broker_runtime.coordinator.group.consumer_state import ConsumerGroupConfig
from broker_runtime.coordinator.group.coordinator import GroupCoordinator
from broker_runtime.coordinator.group.log_format import CONSUMER_OFFSETS_TOPIC, partition_for
from broker_runtime.coordinator.group.offsets import Committer
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupConfig, GroupState, Member
from broker_runtime.coordinator.group.timer import CoordinatorTimer
from broker_runtime.coordinator.group.writer import OffsetsLog, local_appender

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "Committer",
    "CommittedOffset",
    "ConsumerGroupConfig",
    "CoordinatorTimer",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResult",
    "Member",
    "OffsetsLog",
    "local_appender",
    "partition_for",
]
