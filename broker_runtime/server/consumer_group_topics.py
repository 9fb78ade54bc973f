"""Topic ids for the consumer group protocol (KIP-848): its requests name topics by id, the group coordinator
keeps them by name (:mod:`broker_runtime.coordinator.group.consumer_state`); the handlers translate here, the one
place that does.

A topic's id is its cluster metadata's ``TopicInfo.topic_id`` (KIP-516). A topic without one (a cluster whose
metadata predates topic ids) cannot be named to a consumer group member: the coordinator treats it as missing
(no partition of it is assigned) and :func:`topic_ids` logs that at WARNING once per topic. An id that names no
topic in an owned-partitions list is dropped (Kafka's reconciliation matches owned partitions by id too).

Event-loop thread only (the WARNING set is module state, touched on the loop).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from broker_runtime.server.context import BrokerContext

__all__ = ["by_id", "named_assignment", "owned_by_name", "topic_ids"]

_log = logging.getLogger(__name__)
_warned: set[str] = set()


def topic_ids(ctx: BrokerContext) -> dict[str, uuid.UUID]:
    """Every topic's id by name (topics without an id left out, logged once)."""
    found: dict[str, uuid.UUID] = {}
    for name, info in ctx.cluster.view.topics.items():
        if info.topic_id is not None:
            found[name] = info.topic_id
        elif name not in _warned:
            _warned.add(name)
            _log.warning(
                "topic %r has no topic id: consumer groups (group.protocol=consumer) cannot be assigned its "
                "partitions until it has one",
                name,
            )
    return found


def by_id(ids: Mapping[str, uuid.UUID]) -> dict[uuid.UUID, str]:
    return {v: k for k, v in ids.items()}


def owned_by_name(
    owned: Iterable[Mapping[str, Any]] | None, names: Mapping[uuid.UUID, str]
) -> dict[str, frozenset[int]] | None:
    """A heartbeat's ``TopicPartitions`` by topic name (None stays None: not changed since the last)."""
    if owned is None:
        return None
    found: dict[str, frozenset[int]] = {}
    for tp in owned:
        name = names.get(tp["TopicId"])
        if name is not None:
            found[name] = found.get(name, frozenset()) | frozenset(tp["Partitions"])
    return found


def named_assignment(
    assignment: Mapping[str, frozenset[int]], ids: Mapping[str, uuid.UUID], *, with_names: bool = False
) -> list[dict[str, Any]]:
    """An assignment by name as Kafka's ``TopicPartitions`` (ConsumerGroupDescribe also names the topic)."""
    out = []
    for name in sorted(assignment):
        topic_id = ids.get(name)
        if topic_id is None:
            continue
        entry: dict[str, Any] = {"TopicId": topic_id, "Partitions": sorted(assignment[name])}
        if with_names:
            entry["TopicName"] = name
        out.append(entry)
    return out
