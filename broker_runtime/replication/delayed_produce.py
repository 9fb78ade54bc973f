"""The acks=-1 produce waiting in the purgatory for the high watermark (Kafka's ``DelayedProduce``).

One :class:`DelayedProduce` per produce request; it is watched under every ``(topic, partition)`` it waits
for. Per partition it holds the offset the high watermark must reach (last appended offset + 1) and a status:

* partitions whose append failed are done from the start (their error stands);
* :meth:`DelayedProduce.try_complete` asks each pending partition ``check_enough_replicas_reach_offset``:
  done with NONE once HW >= required and the ISR still has min.insync.replicas members, done with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when it has not, done with NOT_LEADER_OR_FOLLOWER when this broker stopped
  leading; the operation completes when no partition is pending;
* on expiry (the request's ``timeoutMs``) every still-pending partition gets REQUEST_TIMED_OUT.

The owner (the produce handler) gets the final per-partition errors through ``on_done``, exactly once.
``check_and_complete((topic, partition))`` must be called whenever that partition's high watermark moves or
its ISR changes (the replica manager does).

Thread-safety: created and completed on the broker's event-loop thread; the purgatory's own locking makes
the exactly-once completion safe anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.purgatory.delayed_operation import DelayedOperation
from broker_runtime.replication.partition import Partition

__all__ = ["DelayedProduce", "ProducePartitionStatus"]


class ProducePartitionStatus:
    """One partition of a delayed produce: the offset to wait for and the outcome so far."""

    __slots__ = ("error", "min_isr", "pending", "required_offset")

    def __init__(self, required_offset: int, error: ErrorCode, min_isr: int) -> None:
        self.required_offset = required_offset
        self.error = error
        self.min_isr = min_isr
        #: Waiting for acks: only partitions appended without error wait.
        self.pending = error == ErrorCode.NONE and required_offset >= 0

    def __repr__(self) -> str:
        return f"ProducePartitionStatus(required={self.required_offset}, error={self.error!r}, pending={self.pending})"


class DelayedProduce(DelayedOperation):
    """A produce request waiting until every partition's high watermark reached its required offset."""

    __slots__ = ("_is_abandoned", "_lookup", "_on_done", "statuses")

    def __init__(
        self,
        timeout_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        lookup: Callable[[str, int], Partition | None],
        on_done: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
        is_abandoned: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self._lookup = lookup
        self._on_done = on_done
        self._is_abandoned = is_abandoned

    @property
    def watch_keys(self) -> list[TopicPartition]:
        return [tp for tp, status in self.statuses.items() if status.pending]

    def try_complete(self) -> bool:
        if self._is_abandoned():  # nobody waits for the answer any more
            return self.force_complete()
        for (topic, index), status in self.statuses.items():
            if not status.pending:
                continue
            partition = self._lookup(topic, index)
            if partition is None:
                status.pending, status.error = False, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            done, error = partition.check_enough_replicas_reach_offset(status.required_offset, status.min_isr)
            if done or error != ErrorCode.NONE:
                status.pending, status.error = False, error
        if any(status.pending for status in self.statuses.values()):
            return False
        return self.force_complete()

    def on_expiration(self) -> None:
        """Nothing else to do: ``on_complete`` already answered REQUEST_TIMED_OUT for the pending ones."""

    def on_complete(self) -> None:
        for status in self.statuses.values():
            if status.pending:
                status.pending, status.error = False, ErrorCode.REQUEST_TIMED_OUT
        self._on_done(self.statuses)

    def __repr__(self) -> str:
        pending: list[Any] = self.watch_keys
        return f"DelayedProduce(timeout_ms={self.delay_ms}, pending={pending}, completed={self.is_completed})"
