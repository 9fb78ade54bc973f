"""The group coordinator in a cluster: the server's side of it (the coordinator logic itself lives in
:mod:`broker_runtime.coordinator.group`). Shaped as :mod:`.transactions` is for the transaction coordinator.

* **Placement** (:func:`ensure_offsets_topic`, :func:`coordinator_node`): the coordinator of a group is the
  leader of its ``__consumer_offsets`` partition (``abs(groupId.hashCode) % offsets.topic.num.partitions``).
  The topic is created on the first group FindCoordinator (or AddOffsetsToTxn) with
  ``offsets.topic.replication.factor`` replicas, ``cleanup.policy=compact`` and the broker's
  ``min.insync.replicas``, as Kafka creates it; while fewer brokers than that are registered and unfenced the
  topic is not created (WARNING naming the setting) and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as
  Kafka's creation fails with INVALID_REPLICATION_FACTOR until the cluster is large enough.
* **Ownership** (:class:`~.local_cluster.LocalCluster`): after every metadata change, each partition of the topic
  this node now leads is loaded at its leader epoch (Kafka's ``onElection``: groups and offsets replayed from
  the local replica), each one it stopped leading is dropped (``onResignation``: its members get
  NOT_COORDINATOR, rediscover the coordinator and carry on there in their generation). Loading is synchronous
  on the event loop, so no request sees a half-loaded partition.
* **Writes** (:class:`~.internal_topics.ReplicatedInternalTopic`): an append to the leader's replica with acks=-1 rules
  (leadership confirmed, NOT_ENOUGH_REPLICAS under the minimum ISR); the handlers answer only once the records
  are replicated (:func:`answer_after_group_write`, waiting at most ``offsets.commit.timeout.ms``); the members'
  SyncGroup answers wait for the replication of the leader's assignment
  (:meth:`~.internal_topics.ReplicatedInternalTopic.await_replication`), as Kafka's storeGroup callback.
* **Transaction markers** (:func:`complete_offsets_txn`): a COMMIT/ABORT marker replicated on a
  ``__consumer_offsets`` partition ends the producer's pending transactional offsets there (Kafka's
  ``onTransactionCompleted``), whichever path wrote it (WriteTxnMarkers, or a coordinator writing to a
  partition it leads itself).

Event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.records import CONTROL_COMMIT
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replicated import answer_after_replication
from broker_runtime.server.topics import TopicError

__all__ = [
    "answer_after_group_write",
    "complete_offsets_txn",
    "coordinator_node",
    "ensure_offsets_topic",
]

_log = logging.getLogger(__name__)


def ensure_offsets_topic(ctx: BrokerContext) -> str | None:
    """Create ``__consumer_offsets`` in the cluster metadata if it does not exist; None when it exists now,
    else why not (see the module docstring)."""
    cfg = ctx.config
    if ctx.cluster.view.topics.get(CONSUMER_OFFSETS_TOPIC) is not None:
        return None
    unfenced = [b for b in ctx.cluster.view.brokers.values() if not b.fenced]
    wanted = cfg.offsets_topic_replication_factor
    if len(unfenced) < wanted:
        why = (
            f"{CONSUMER_OFFSETS_TOPIC} is not created yet: offsets.topic.replication.factor={wanted} but only "
            f"{len(unfenced)} broker(s) are registered and unfenced"
        )
        _log.warning("%s", why)
        return why
    configs = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}
    try:
        ctx.cluster.create_topic(CONSUMER_OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, wanted, configs)
    except TopicError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            _log.warning("cannot create %s: %s", CONSUMER_OFFSETS_TOPIC, exc)
            return f"cannot create {CONSUMER_OFFSETS_TOPIC}: {exc}"
    ctx.refresh_cluster()
    return None


def coordinator_node(ctx: BrokerContext, group_id: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of ``group_id`` in the cluster metadata."""
    topic = ctx.cluster.view.topics.get(CONSUMER_OFFSETS_TOPIC)
    if topic is None:
        why = ensure_offsets_topic(ctx)
        topic = ctx.cluster.view.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, why, -1, "", -1
    index = ctx.group_coordinator.partition_for(group_id)
    if index >= len(topic.partitions):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "offsets.topic.num.partitions differs", -1, "", -1
    leader = topic.partitions[index].leader
    broker = ctx.cluster.view.brokers.get(leader)
    if leader < 0 or broker is None or broker.fenced:
        why = f"{CONSUMER_OFFSETS_TOPIC}-{index} of this group has no live leader now"
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, why, -1, "", -1
    return ErrorCode.NONE, None, leader, *ctx.endpoint_of(broker)


def answer_after_group_write(ctx: BrokerContext, body: Callable[[ErrorCode | None], Any]) -> Any:
    """The handler's answer: ``body(None)`` at once, or, in a cluster after the group coordinator appended to
    ``__consumer_offsets``, once those appends are replicated, else ``body(NOT_COORDINATOR or
    COORDINATOR_NOT_AVAILABLE)``. Call :meth:`GroupCoordinator.take_appended` before the coordinator call, so
    only this request's writes are waited for."""
    appended = ctx.group_coordinator.take_appended()
    return answer_after_replication(
        ctx, CONSUMER_OFFSETS_TOPIC, appended, ctx.config.offsets_commit_timeout_ms, body, "group write"
    )


def complete_offsets_txn(
    ctx: BrokerContext, producer_id: int, control_type: int, final: Mapping[TopicPartition, ErrorCode]
) -> None:
    """Markers written (``final``: the code per partition): on each ``__consumer_offsets`` partition where the
    marker landed, the producer's pending offsets become committed (COMMIT) or are dropped (ABORT)."""
    groups = ctx.group_coordinator
    for (topic, index), code in final.items():
        if topic == CONSUMER_OFFSETS_TOPIC and code == ErrorCode.NONE:
            groups.complete_txn(producer_id, index, control_type == CONTROL_COMMIT)
