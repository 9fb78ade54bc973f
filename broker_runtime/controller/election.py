"""Leader election rules: what a partition's leader, leader epoch and ISR become when a broker is fenced,
unfenced, or an operator asks for the preferred leader (Kafka's ``PartitionChangeBuilder`` decisions, without
its records).

A partition is the ``cluster.json`` entry (see :mod:`broker_runtime.server.cluster`)::

    {"replicas": [0, 1, 2], "leader": 0, "leader_epoch": 3, "isr": [0, 1, 2], "partition_epoch": 7}

``leader`` is -1 (Kafka's NO_LEADER) while no eligible replica is live. The rules, each a pure function that
returns a NEW entry, or None when nothing changes:

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

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NO_LEADER",
    "Election",
    "fence_broker",
    "preferred_election",
    "unfence_broker",
]

#: The leader of a partition no eligible replica can lead (Kafka's ``LeaderConstants.NO_LEADER``).
NO_LEADER = -1

Entry = Mapping[str, Any]


@dataclass(frozen=True)
class Election:
    """The outcome for one partition: its new entry, and whether the new leader came from outside the ISR."""

    entry: dict[str, Any]
    unclean: bool = False


def _changed(entry: Entry, leader: int, isr: list[int], unclean: bool = False) -> Election | None:
    old_leader, old_isr = int(entry["leader"]), sorted(entry["isr"])
    isr = sorted(isr)
    if leader == old_leader and isr == old_isr:
        return None
    new = dict(entry)
    new["leader"] = leader
    new["isr"] = isr
    new["partition_epoch"] = int(entry.get("partition_epoch", 0)) + 1
    if leader != old_leader:
        new["leader_epoch"] = int(entry["leader_epoch"]) + 1
    return Election(new, unclean)


def fence_broker(entry: Entry, broker: int, live: Collection[int], *, unclean: bool) -> Election | None:
    """The partition once ``broker`` is fenced; ``live`` are the brokers still unfenced (``broker`` excluded)."""
    replicas = [int(r) for r in entry["replicas"]]
    if broker not in replicas:
        return None
    isr = [int(r) for r in entry["isr"]]
    new_isr = [r for r in isr if r != broker] or isr
    leader = int(entry["leader"])
    if leader == broker:
        candidates = [r for r in replicas if r in new_isr and r in live and r != broker]
        if candidates:
            return _changed(entry, candidates[0], new_isr)
        if unclean:
            outside = [r for r in replicas if r in live and r != broker]
            if outside:
                return _changed(entry, outside[0], [outside[0]], unclean=True)
        return _changed(entry, NO_LEADER, new_isr)
    return _changed(entry, leader, new_isr)


def unfence_broker(entry: Entry, broker: int, *, unclean: bool) -> Election | None:
    """The partition once ``broker`` is live again (only leaderless partitions change)."""
    if int(entry["leader"]) != NO_LEADER:
        return None
    replicas = [int(r) for r in entry["replicas"]]
    isr = [int(r) for r in entry["isr"]]
    if broker in isr:
        return _changed(entry, broker, isr)
    if unclean and broker in replicas:
        return _changed(entry, broker, [broker], unclean=True)
    return None


def preferred_election(entry: Entry, live: Collection[int]) -> tuple[Election | None, str]:
    """Move leadership to the preferred (first) replica; (None, why) when that is not needed or not possible."""
    replicas = [int(r) for r in entry["replicas"]]
    preferred = replicas[0]
    if int(entry["leader"]) == preferred:
        return None, "ELECTION_NOT_NEEDED"
    if preferred not in live or preferred not in [int(r) for r in entry["isr"]]:
        return None, "PREFERRED_LEADER_NOT_AVAILABLE"
    return _changed(entry, preferred, [int(r) for r in entry["isr"]]), "NONE"
