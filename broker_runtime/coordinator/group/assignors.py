"""The server-side assignors of consumer groups (KIP-848; Kafka's ``UniformAssignor`` and ``RangeAssignor`` of the
group coordinator), chosen by ``group.consumer.assignors`` (the first is the default) or a member's
``ServerAssignor``.

An assignor maps the group's members to partitions: input the members (id, instance id, subscribed topic names),
the partition count of every subscribed topic that exists, and the current target assignment (for stickiness);
output ``member id -> {topic: partitions}``. Every partition of a subscribed topic goes to exactly one member
subscribed to it; a topic nobody subscribes to is not assigned.

* ``uniform``: balanced and sticky. Each member keeps the partitions it had in the previous target assignment
  while it stays subscribed and under its share; the others go, one at a time, to the subscribed member with the
  fewest partitions (ties: member id order). With the same subscriptions everywhere (Kafka's homogeneous case)
  every member ends with floor or ceil of partitions/members; otherwise every partition goes to the least loaded
  of the members that can take it (Kafka's heterogeneous builder, without its rack awareness).
* ``range``: per topic, the subscribed members in order of instance id (else member id), each given a contiguous
  range; the first ``partitions % members`` get one more. With the same subscriptions and partition counts, a
  member gets the same partition numbers of every topic (co-partitioning).

Pure functions of their inputs; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "AssignmentSpec", "MemberSpec", "TargetAssignment", "range_assign", "uniform_assign"]

#: member id -> topic -> partitions.
TargetAssignment = dict[str, dict[str, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    subscribed: frozenset[str]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    members: tuple[MemberSpec, ...]
    #: topic -> partition count, for the subscribed topics that exist.
    topics: Mapping[str, int]
    #: The previous target assignment (by member id).
    previous: Mapping[str, Mapping[str, frozenset[int]]]


def _freeze(work: dict[str, dict[str, set[int]]]) -> TargetAssignment:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in work.items()}


def uniform_assign(spec: AssignmentSpec) -> TargetAssignment:
    """See the module docstring."""
    members = sorted(spec.members, key=lambda m: m.member_id)
    work: dict[str, dict[str, set[int]]] = {m.member_id: {} for m in members}
    if not members:
        return {}
    load = dict.fromkeys(work, 0)
    subscribers = {t: [m for m in members if t in m.subscribed] for t in sorted(spec.topics)}
    all_partitions = [(t, p) for t, subs in subscribers.items() if subs for p in range(spec.topics[t])]
    homogeneous = len({m.subscribed for m in members}) == 1
    # the share each member may keep from the previous assignment
    if homogeneous:
        quota, extra = divmod(len(all_partitions), len(members))
    else:
        quota, extra = -(-len(all_partitions) // len(members)), 0
    unassigned: list[tuple[str, int]] = []
    kept_over_quota = 0
    owner: dict[tuple[str, int], str] = {}
    for m in members:
        for t, ps in spec.previous.get(m.member_id, {}).items():
            if t not in m.subscribed or t not in spec.topics:
                continue
            for p in ps:
                if p < spec.topics[t]:
                    owner.setdefault((t, p), m.member_id)
    for t, p in all_partitions:
        m_id = owner.get((t, p))
        if m_id is not None:
            limit = quota
            if load[m_id] >= quota and kept_over_quota < extra:
                limit = quota + 1
            if load[m_id] < limit:
                if load[m_id] >= quota:
                    kept_over_quota += 1
                work[m_id].setdefault(t, set()).add(p)
                load[m_id] += 1
                continue
        unassigned.append((t, p))
    for t, p in unassigned:
        best = min(subscribers[t], key=lambda m: (load[m.member_id], m.member_id))
        work[best.member_id].setdefault(t, set()).add(p)
        load[best.member_id] += 1
    return _freeze(work)


def range_assign(spec: AssignmentSpec) -> TargetAssignment:
    """See the module docstring."""
    work: dict[str, dict[str, set[int]]] = {m.member_id: {} for m in spec.members}
    for topic in sorted(spec.topics):
        subs = sorted(
            (m for m in spec.members if topic in m.subscribed),
            key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id),
        )
        if not subs:
            continue
        size, extra = divmod(spec.topics[topic], len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = size + (1 if i < extra else 0)
            if count:
                work[m.member_id][topic] = set(range(start, start + count))
            start += count
    return _freeze(work)


#: The assignors by the names Kafka gives them (``group.consumer.assignors``, ``ServerAssignor``).
ASSIGNORS: dict[str, Callable[[AssignmentSpec], TargetAssignment]] = {
    "uniform": uniform_assign,
    "range": range_assign,
}
