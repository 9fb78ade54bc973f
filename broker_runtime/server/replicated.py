"""Waiting until appends are replicated (acks=-1) for broker-internal writers: transaction markers written for a
coordinator, and the coordinators' own ``__transaction_state`` / ``__consumer_offsets`` records.

:func:`wait_replicated` parks one :class:`~broker_runtime.replication.delayed_produce.DelayedProduce` in the
produce purgatory for the given appends and resolves to the final error code per partition: NONE once the high
watermark passed the append with the ISR at the minimum, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
NOT_LEADER_OR_FOLLOWER when leadership moved, REQUEST_TIMED_OUT at ``timeout_ms``; a partition whose append
already failed keeps its error. The Produce handler keeps its own copy of this loop because it answers with
the appended offsets. :func:`answer_after_replication` is the coordinators' handler answer built on it: the
body once the partitions a request appended to are replicated to their log end, else the body with the
coordinator's retriable error (NOT_COORDINATOR when leadership moved, COORDINATOR_NOT_AVAILABLE otherwise).
:func:`follow_leadership` moves a coordinator's partitions of its internal topic with their leadership.
Threading: event-loop thread only (the futures resolve on the loop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import AppendResult

__all__ = ["answer_after_replication", "coordinator_error", "follow_leadership", "wait_replicated"]

_log = logging.getLogger(__name__)


class PartitionOwner(Protocol):
    """A coordinator that serves the partitions of its internal topic this node leads."""

    @property
    def owned_partitions(self) -> dict[int, int]: ...

    def become_leader(self, partition: int, epoch: int, /) -> object: ...

    def resign(self, partition: int, /) -> object: ...


def follow_leadership(coordinator: PartitionOwner, topic: Any, node_id: int) -> None:
    """Load the partitions of ``topic`` (a cluster view's topic, None before it exists) that ``node_id`` leads
    now, at their leader epoch (again when the epoch moved), and drop the ones it stopped leading."""
    owned = coordinator.owned_partitions
    leading: dict[int, int] = {}
    if topic is not None:
        for index, info in enumerate(topic.partitions):
            if info.leader == node_id:
                leading[index] = info.leader_epoch
    for index in list(owned):
        if index not in leading:
            coordinator.resign(index)
    for index, epoch in leading.items():
        if owned.get(index) != epoch:
            coordinator.become_leader(index, epoch)


def wait_replicated(
    ctx: BrokerContext, timeout_ms: int, appended: dict[TopicPartition, AppendResult]
) -> asyncio.Future[dict[TopicPartition, ErrorCode]]:
    """A future of the final error per partition of ``appended`` (see the module docstring)."""
    future: asyncio.Future[dict[TopicPartition, ErrorCode]] = ctx.loop.create_future()
    statuses = {
        tp: ProducePartitionStatus(
            result.required_offset,
            result.error,
            ctx.replicas.min_insync_replicas(tp[0]) if result.error == ErrorCode.NONE else 1,
        )
        for tp, result in appended.items()
    }

    def on_done(final: dict[TopicPartition, ProducePartitionStatus]) -> None:
        if not future.done():
            future.set_result({tp: ErrorCode(s.error) for tp, s in final.items()})

    if ctx.produce_purgatory is None or not any(s.pending for s in statuses.values()):
        on_done(statuses)
        return future
    operation = DelayedProduce(
        timeout_ms, statuses, ctx.replicas.partition, on_done, is_abandoned=future.done
    )
    if not ctx.produce_purgatory.try_complete_else_watch(operation, operation.watch_keys):
        ctx.schedule_timer()
    return future


def answer_after_replication(
    ctx: BrokerContext,
    topic: str,
    partitions: Iterable[int],
    timeout_ms: int,
    body: Callable[[ErrorCode | None], Any],
    what: str,
) -> Any:
    """``body(None)`` at once when nothing was appended (or on a single node), else a future of ``body(None)``
    once the appended ``topic`` partitions are replicated to their current log end, or of ``body(code)`` with
    NOT_COORDINATOR (leadership moved) or COORDINATOR_NOT_AVAILABLE (ISR under the minimum, timeout). ``body``
    may return a future itself (a JoinGroup answer not yet complete): it is awaited."""
    indexes = set(partitions)
    if not indexes or not ctx.deployment.replicated:
        return body(None)
    targets: dict[TopicPartition, AppendResult] = {}
    for index in indexes:
        partition = ctx.replicas.partition(topic, index)
        if partition is None:
            return body(ErrorCode.NOT_COORDINATOR)
        targets[(topic, index)] = AppendResult(ErrorCode.NONE, required_offset=partition.log.log_end_offset)
    waiting = wait_replicated(ctx, timeout_ms, targets)

    async def answer() -> Any:
        result = body(coordinator_error(await waiting, what))
        if isinstance(result, asyncio.Future):
            result = await result
        return result

    return asyncio.ensure_future(answer())


def coordinator_error(final: dict[TopicPartition, ErrorCode], what: str) -> ErrorCode | None:
    """None when every internal write of ``final`` is replicated, else the retriable error a coordinator's client
    gets: NOT_COORDINATOR when leadership moved, COORDINATOR_NOT_AVAILABLE otherwise (WARNING logged)."""
    codes = set(final.values()) - {ErrorCode.NONE}
    if not codes:
        return None
    _log.warning(
        "%s not replicated (%s); answering the client with a retriable error",
        what,
        ", ".join(sorted(c.name for c in codes)),
    )
    if ErrorCode.NOT_LEADER_OR_FOLLOWER in codes:
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
