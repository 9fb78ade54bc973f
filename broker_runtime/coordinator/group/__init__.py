"""Kafka's classic group coordinator: consumer group membership, rebalances, generations and committed offsets
kept in ``__consumer_offsets`` (see :mod:`.coordinator`)."""

from broker_runtime.coordinator.group.coordinator import GroupConfig, GroupCoordinator, OffsetsLog
from broker_runtime.coordinator.group.log_format import CONSUMER_OFFSETS_TOPIC, partition_for
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState, Member

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "CommittedOffset",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "Member",
    "OffsetsLog",
    "partition_for",
]
