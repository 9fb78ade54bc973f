"""Waiting until appends are replicated (acks=-1) for broker-internal writers: transaction markers written for a
coordinator, and the coordinator's own ``__transaction_state`` records.

:func:`wait_replicated` parks one :class:`~broker_runtime.replication.delayed_produce.DelayedProduce` in the
produce purgatory for the given appends and resolves to the final error code per partition: NONE once the high
watermark passed the append with the ISR at the minimum, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
NOT_LEADER_OR_FOLLOWER when leadership moved, REQUEST_TIMED_OUT at ``timeout_ms``; a partition whose append
already failed keeps its error. The Produce handler keeps its own copy of this loop because it answers with
the appended offsets. Event-loop thread only.
"""

from __future__ import annotations

import asyncio

from broker_runtime.errors import ErrorCode
from broker_runtime.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import AppendResult

__all__ = ["wait_replicated"]

TopicPartition = tuple[str, int]


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
