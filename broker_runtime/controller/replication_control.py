"""The controller's topic and partition operations (Kafka's ``ReplicationControlManager``): create and delete
topics, add partitions, change a topic's configs, the leader's ISR changes (AlterPartition), leader elections
(fencing, unfencing, preferred, unclean) and the auto leader rebalance.

Every function changes a :class:`~.metadata.ClusterMetadata` in place and is called inside one
``MetadataStore.update()`` (by :class:`~.channel.ControllerChannel` for a broker's request, by
:class:`~.controller.Controller` for the active controller's own decisions); refusals raise
:class:`~broker_runtime.errors.TopicError` (Kafka's error code and message) before anything is changed, so a
refused request writes nothing. What the broker knows better is passed in as :class:`TopicRules` (the topic
name rule, the topic-config validation of the storage layer, the replica placement), as Kafka's controller is
given its ``ReplicaPlacer`` and config validators.

No I/O, no clock; called on the thread that holds the store's update.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from broker_runtime.controller.election import Election, preferred_election, unfence_broker
from broker_runtime.controller.metadata import NO_LEADER, ClusterMetadata, PartitionInfo, TopicInfo
from broker_runtime.errors import ErrorCode, TopicError
from broker_runtime.protocol.topic_id import format_topic_id, new_topic_id

__all__ = [
    "AlterPartitionRejected",
    "TopicRules",
    "alter_partition",
    "assign_missing_topic_ids",
    "apply_elections",
    "check_new_count",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "elect_leaders",
    "move_leader",
    "new_partition",
    "rebalance_leaders",
    "set_topic_configs",
    "unclean_allowed",
]

_log = logging.getLogger(__name__)

#: ``rule(topic name, partition)``: the partition's new state, or None when it does not change.
Rule = Callable[[str, PartitionInfo], Election | None]


@dataclass(frozen=True)
class TopicRules:
    """What the broker decides about a new topic: ``name_error(name)`` (why a name is illegal, or None),
    ``check_config(name, partitions, configs)`` (raises :class:`TopicError`), ``place(unfenced broker ids,
    partitions, replication factor)`` (the replica lists, a pure function of its arguments)."""

    name_error: Callable[[str], str | None]
    check_config: Callable[[str, int, Mapping[str, str]], object]
    place: Callable[[Sequence[int], int, int], list[list[int]]]


class AlterPartitionRejected(Exception):
    """An ISR change the controller refuses (FENCED_LEADER_EPOCH, INELIGIBLE_REPLICA); the message says why."""


def unclean_allowed(topic: TopicInfo, default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the broker default."""
    value = topic.configs.get("unclean.leader.election.enable")
    return default if value is None else str(value).strip().lower() == "true"


def _log_election(
    topic: str, index: int, old: PartitionInfo, done: Election, why: str, offline_level: int
) -> None:
    new = done.partition
    if done.unclean:
        _log.warning(
            "%s-%d: UNCLEAN leader election (%s): node %d leads epoch %d from outside the ISR %s; records "
            "acknowledged by the old ISR but never fetched by node %d are lost",
            topic,
            index,
            why,
            new.leader,
            new.leader_epoch,
            list(old.isr),
            new.leader,
        )
    elif new.leader != old.leader:
        level = offline_level if new.leader == NO_LEADER else logging.INFO
        _log.log(
            level,
            "%s-%d: leader %d -> %d, epoch %d, ISR %s (%s)",
            topic,
            index,
            old.leader,
            new.leader,
            new.leader_epoch,
            list(new.isr),
            why,
        )
    else:
        _log.info("%s-%d: ISR %s -> %s (%s)", topic, index, list(old.isr), list(new.isr), why)


def apply_elections(
    meta: ClusterMetadata, rule: Rule, why: str, *, offline_level: int = logging.WARNING
) -> int:
    """Apply ``rule`` to every partition; the number of partitions changed.

    A partition left without a leader is logged at ``offline_level`` (WARNING, except for a clean shutdown of the
    last in-sync replica, which is expected); an unclean election always at WARNING."""
    changed = 0
    for name in list(meta.topics):
        for index, partition in enumerate(meta.topics[name].partitions):
            done = rule(name, partition)
            if done is not None:
                _log_election(name, index, partition, done, why, offline_level)
                meta.set_partition(name, index, done.partition)
                changed += 1
    return changed


def new_partition(replicas: Sequence[int], unfenced: Collection[int]) -> PartitionInfo:
    """A new partition: led by its first unfenced replica, the unfenced replicas in sync (a fenced replica of an
    explicit assignment joins the ISR once it runs and catches up); no leader when none is unfenced."""
    live = [r for r in replicas if r in unfenced]
    return PartitionInfo(
        tuple(replicas),
        live[0] if live else NO_LEADER,
        0,
        tuple(sorted(live)) if live else tuple(replicas),
        0,
    )


def create_topic(
    meta: ClusterMetadata,
    rules: TopicRules,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    assignments: Mapping[int, list[int]] | None,
    *,
    validate_only: bool = False,
) -> tuple[int, int]:
    """CreateTopics (and auto-creation): check, place and record the topic; (partitions, replication factor)."""
    problem = rules.name_error(name)
    if problem is not None:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if name in meta.topics:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    folded = name.replace(".", "_")
    for existing in meta.topics:
        if existing.replace(".", "_") == folded:
            raise TopicError(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {existing}"
            )
    brokers = sorted(meta.brokers)
    # As Kafka's placement: new replicas go to unfenced brokers only.
    unfenced = meta.unfenced()
    if assignments:
        indexes = sorted(assignments)
        if indexes != list(range(len(indexes))):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partitions of topic {name} must be numbered 0..{len(indexes) - 1}, got {indexes}",
            )
        replica_lists = [list(assignments[i]) for i in indexes]
        for i, ids in enumerate(replica_lists):
            if not ids or len(set(ids)) != len(ids) or any(b not in brokers for b in ids):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {i} of topic {name}: replicas {ids} must be distinct registered brokers {brokers}",
                )
        partitions, replication_factor = len(replica_lists), len(replica_lists[0])
    else:
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor > len(unfenced):
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                f"factor of {replication_factor} cannot be reached because only {len(unfenced)} broker(s) "
                "are registered and unfenced.",
            )
        if partitions <= 0:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partitions}."
            )
        replica_lists = rules.place(unfenced, partitions, replication_factor)
    # Name, partition count and configs are also checked by the local rules (compression, LogConfig).
    rules.check_config(name, partitions, configs)
    if not validate_only:
        meta.topics[name] = TopicInfo(
            name,
            tuple(new_partition(ids, unfenced) for ids in replica_lists),
            dict(configs),
            new_topic_id(),
        )
        if name in meta.deleted_topics:
            meta.deleted_topics = [t for t in meta.deleted_topics if t != name]
    return partitions, replication_factor


def assign_missing_topic_ids(meta: ClusterMetadata, where: object = "the cluster metadata") -> list[str]:
    """Give every topic without an id (a version-1 document, see :mod:`.metadata`) a new one, each logged at
    WARNING; the names of those topics."""
    missing = sorted(name for name, topic in meta.topics.items() if topic.topic_id is None)
    for name in missing:
        topic = meta.topics[name]
        meta.topics[name] = TopicInfo(name, topic.partitions, topic.configs, new_topic_id())
        _log.warning(
            "%s: topic %s had no topic id (written before pylog had topic ids): assigned %s",
            where,
            name,
            format_topic_id(meta.topics[name].topic_id),  # type: ignore[arg-type]
        )
    return missing


def delete_topic(meta: ClusterMetadata, name: str) -> None:
    """DeleteTopics: remove the topic and remember its name (a replica that was down deletes its logs later)."""
    if name not in meta.topics:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
    del meta.topics[name]
    meta.deleted_topics = sorted(set(meta.deleted_topics) | {name})


def check_new_count(
    name: str,
    current: int,
    count: int,
    assignments: list[list[int]] | None,
    brokers: list[int],
    replication: int,
) -> None:
    """CreatePartitions' checks (Kafka's ``ReplicationControlManager.createPartitions``)."""
    if count < current:
        raise TopicError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than the requested {count}.",
        )
    if count == current:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    if assignments is not None:
        if len(assignments) != count - current:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {count - current} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        for ids in assignments:
            if len(ids) != replication or len(set(ids)) != len(ids) or any(b not in brokers for b in ids):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"replicas {list(ids)} of a new partition of {name} must be {replication} distinct "
                    f"registered broker(s) of {brokers}",
                )


def create_partitions(
    meta: ClusterMetadata,
    rules: TopicRules,
    name: str,
    count: int,
    assignments: list[list[int]] | None,
    *,
    validate_only: bool = False,
) -> None:
    """CreatePartitions: append partitions ``current..count-1``, placed as CreateTopics places a topic of
    ``count`` partitions (or as ``assignments`` say)."""
    topic = meta.topics.get(name)
    if topic is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
    parts = topic.partitions
    unfenced = meta.unfenced()
    replication = len(parts[0].replicas)
    check_new_count(name, len(parts), count, assignments, sorted(meta.brokers), replication)
    if assignments is not None:
        new = [list(ids) for ids in assignments]
    else:
        if replication > len(unfenced):
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the new partitions of {name} {replication} time(s): only "
                f"{len(unfenced)} broker(s) are unfenced.",
            )
        new = rules.place(unfenced, count, replication)[len(parts) :]
    if not validate_only:
        added = tuple(new_partition(ids, unfenced) for ids in new)
        meta.topics[name] = TopicInfo(name, parts + added, topic.configs, topic.topic_id)


def set_topic_configs(meta: ClusterMetadata, name: str, configs: Mapping[str, str]) -> None:
    """AlterConfigs of a topic: replace its overrides (validated by the asking broker)."""
    topic = meta.topics.get(name)
    if topic is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
    meta.topics[name] = TopicInfo(name, topic.partitions, dict(configs), topic.topic_id)


def alter_partition(
    meta: ClusterMetadata, node_id: int, topic: str, index: int, isr: Collection[int], leader_epoch: int
) -> None:
    """The leader's ISR change (Kafka's AlterPartition). Refused (:class:`AlterPartitionRejected`): a caller that
    is not the recorded leader of ``leader_epoch`` (a leader that was replaced while it was not running), and a new
    member that is fenced or unknown. KeyError / IndexError for a partition that does not exist."""
    partition = meta.topics[topic].partitions[index]
    if partition.leader != node_id or partition.leader_epoch != leader_epoch:
        raise AlterPartitionRejected(
            f"node {node_id} in leader epoch {leader_epoch} is not the leader of {topic}-{index} "
            f"(leader {partition.leader}, epoch {partition.leader_epoch}): FENCED_LEADER_EPOCH"
        )
    for member in set(isr) - set(partition.isr):
        info = meta.brokers.get(member)
        if info is None or info.fenced:
            raise AlterPartitionRejected(f"replica {member} is fenced or not registered: INELIGIBLE_REPLICA")
    meta.set_partition(
        topic,
        index,
        PartitionInfo(
            partition.replicas,
            partition.leader,
            partition.leader_epoch,
            tuple(sorted(isr)),
            partition.partition_epoch + 1,
        ),
    )


def elect_leaders(
    meta: ClusterMetadata, unclean: bool, partitions: list[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    """ElectLeaders: the preferred replica (or, ``unclean``, the first live replica of a leaderless partition)
    becomes leader with a new epoch; per partition the outcome. ``partitions`` None means every partition, and
    then only the partitions an election changed or could not change are reported."""
    out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    live = set(meta.unfenced())
    wanted = partitions
    if wanted is None:
        wanted = [(t, i) for t, info in meta.topics.items() for i in range(len(info.partitions))]
    for topic, index in wanted:
        info = meta.topics.get(topic)
        parts = info.partitions if info is not None else ()
        if not 0 <= index < len(parts):
            out[(topic, index)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{index} does not exist")
            continue
        partition = parts[index]
        if unclean:
            if partition.leader != NO_LEADER:
                out[(topic, index)] = (ErrorCode.ELECTION_NOT_NEEDED, "the partition has a leader")
                continue
            candidates = [r for r in partition.replicas if r in live]
            done = unfence_broker(partition, candidates[0], unclean=True) if candidates else None
            if done is None:
                out[(topic, index)] = (
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"no replica of {topic}-{index} is live",
                )
                continue
        else:
            done, why = preferred_election(partition, live)
            if done is None:
                out[(topic, index)] = (ErrorCode[why], f"{why} for {topic}-{index}")
                continue
        meta.set_partition(topic, index, done.partition)
        _log.log(
            logging.WARNING if done.unclean else logging.INFO,
            "%s-%d: %s leader election: leader %s -> %d, epoch %d, ISR %s",
            topic,
            index,
            "UNCLEAN" if done.unclean else "preferred",
            partition.leader,
            done.partition.leader,
            done.partition.leader_epoch,
            list(done.partition.isr),
        )
        out[(topic, index)] = (ErrorCode.NONE, None)
    if partitions is None:
        out = {k: v for k, v in out.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return out


def move_leader(
    meta: ClusterMetadata, topic: str, index: int, leader: int, *, unclean: bool = False
) -> PartitionInfo:
    """An operator's leadership move to any replica (Kafka reaches it by reordering the replicas and electing the
    preferred one): leader := ``leader``, leader epoch + 1 (also when it already leads: a new epoch for the same
    leader), the previous leader out of the ISR and ``leader`` in it. A replica outside the ISR may lack
    acknowledged records: refused unless ``unclean``. The new partition state."""
    partition = meta.topics[topic].partitions[index]
    if leader not in partition.replicas:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"node {leader} is not a replica of {topic}-{index}: {partition}",
        )
    if leader not in partition.isr and not unclean:
        raise TopicError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"node {leader} is not in the ISR of {topic}-{index}: {partition}",
        )
    new = PartitionInfo(
        partition.replicas,
        leader,
        partition.leader_epoch + 1,
        tuple(sorted({r for r in partition.isr if r != partition.leader} | {leader})),
        partition.partition_epoch + 1,
    )
    meta.set_partition(topic, index, new)
    _log.info(
        "%s-%d: leadership moved: leader %d -> %d, epoch %d",
        topic,
        index,
        partition.leader,
        leader,
        new.leader_epoch,
    )
    return new


def rebalance_leaders(meta: ClusterMetadata, imbalance_percentage: int) -> int:
    """The auto leader rebalance: a live broker whose share of preferred-but-not-led partitions exceeds
    ``leader.imbalance.per.broker.percentage`` gets them back (preferred elections); partitions changed."""
    live = set(meta.unfenced())
    preferred: dict[int, int] = {}
    displaced: dict[int, int] = {}
    for topic in meta.topics.values():
        for partition in topic.partitions:
            first = partition.replicas[0]
            preferred[first] = preferred.get(first, 0) + 1
            if partition.leader != first:
                displaced[first] = displaced.get(first, 0) + 1
    imbalanced = {
        b for b, n in displaced.items() if b in live and n * 100 > imbalance_percentage * preferred.get(b, 1)
    }
    if not imbalanced:
        return 0

    def rule(name: str, partition: PartitionInfo) -> Election | None:
        if partition.replicas[0] not in imbalanced:
            return None
        return preferred_election(partition, live)[0]

    return apply_elections(meta, rule, "auto leader rebalance")
