"""Leader election rules: what a partition's leader, leader epoch and ISR become when a broker is fenced,
unfenced, or an operator asks for the preferred leader (Kafka's ``PartitionChangeBuilder`` decisions, without
its records).

A partition is a :class:`~.metadata.PartitionInfo` (replicas, leader, leader epoch, ISR, partition epoch);
``leader`` is -1 (Kafka's NO_LEADER) while no eligible replica is live. The rules, each a pure function that
returns a NEW partition, or None when nothing changes:

* **fence** broker ``b`` (dead, or its session expired): ``b`` leaves the ISR unless it is the last member (the
  ISR never becomes empty: the last member keeps the only complete copy and is the one to wait for). If ``b``
  led, the new leader is the first replica, in replica order, that is in the new ISR and live; with none, and
  unclean election allowed, the first live replica at all (the ISR becomes just that replica: acknowledged data
  it never fetched is lost, and the caller logs that at WARNING); otherwise -1.
* **unfence** broker ``b`` (alive again): a leaderless partition whose ISR holds ``b`` gets ``b`` as leader;
  with unclean election allowed, so does a leaderless partition that merely lists ``b`` as a replica.
* **preferred** election: the first replica of the list becomes leader if it is live, in the ISR and not
  already leading.

Every leadership change (including to and from -1) increments ``leader_epoch``; every change of leader or ISR
increments ``partition_epoch`` (what AlterPartition is checked against). Epochs never go back.

No I/O, no clock; safe anywhere.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from broker_runtime.controller.metadata import NO_LEADER, PartitionInfo

__all__ = [
    "NO_LEADER",
    "Election",
    "change_leader",
    "fence_broker",
    "preferred_election",
    "unfence_broker",
]


@dataclass(frozen=True)
class Election:
    """The outcome for one partition: its new state, and whether the new leader came from outside the ISR."""

    partition: PartitionInfo
    unclean: bool = False


def change_leader(
    partition: PartitionInfo, leader: int, isr: Collection[int], unclean: bool = False
) -> Election | None:
    """``partition`` with ``leader`` and ``isr`` (sorted) and its epochs advanced; None when both are unchanged."""
    new_isr = tuple(sorted(isr))
    if leader == partition.leader and new_isr == tuple(sorted(partition.isr)):
        return None
    return Election(
        replace(
            partition,
            leader=leader,
            isr=new_isr,
            partition_epoch=partition.partition_epoch + 1,
            leader_epoch=partition.leader_epoch + (leader != partition.leader),
        ),
        unclean,
    )


def fence_broker(
    partition: PartitionInfo, broker: int, live: Collection[int], *, unclean: bool
) -> Election | None:
    """The partition once ``broker`` is fenced; ``live`` are the brokers still unfenced (``broker`` excluded)."""
    replicas = partition.replicas
    if broker not in replicas:
        return None
    isr = list(partition.isr)
    new_isr = [r for r in isr if r != broker] or isr
    if partition.leader == broker:
        candidates = [r for r in replicas if r in new_isr and r in live and r != broker]
        if candidates:
            return change_leader(partition, candidates[0], new_isr)
        if unclean:
            outside = [r for r in replicas if r in live and r != broker]
            if outside:
                return change_leader(partition, outside[0], [outside[0]], unclean=True)
        return change_leader(partition, NO_LEADER, new_isr)
    return change_leader(partition, partition.leader, new_isr)


def unfence_broker(partition: PartitionInfo, broker: int, *, unclean: bool) -> Election | None:
    """The partition once ``broker`` is live again (only leaderless partitions change)."""
    if partition.leader != NO_LEADER:
        return None
    if broker in partition.isr:
        return change_leader(partition, broker, partition.isr)
    if unclean and broker in partition.replicas:
        return change_leader(partition, broker, [broker], unclean=True)
    return None


def preferred_election(partition: PartitionInfo, live: Collection[int]) -> tuple[Election | None, str]:
    """Move leadership to the preferred (first) replica; (None, why) when that is not needed or not possible."""
    preferred = partition.replicas[0]
    if partition.leader == preferred:
        return None, "ELECTION_NOT_NEEDED"
    if preferred not in live or preferred not in partition.isr:
        return None, "PREFERRED_LEADER_NOT_AVAILABLE"
    return change_leader(partition, preferred, partition.isr), "NONE"
