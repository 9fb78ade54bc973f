"""The coordinators' internal topics on each deployment (:class:`~broker_runtime.coordinator.internal_topic.
InternalTopic`): where ``__transaction_state`` and ``__consumer_offsets`` records go and when they count.

* :class:`LocalInternalTopic` -- a single node: the topic is made in the local log directories on first use
  (``cleanup.policy=compact``, no retention: the log cleaner keeps the latest record per key), appends go
  straight to the partition's log (a record batch the coordinator built itself needs no produce validation),
  fsynced after each append when the coordinator asks for it (``fsync``); with one replica there is nothing to
  wait for, so ``await_replication`` calls back at once.
* :class:`ReplicatedInternalTopic` -- a cluster: the topic is made in the cluster metadata by the coordinator's
  placement (FindCoordinator), appends go through the :class:`~broker_runtime.server.replica_manager.
  ReplicaManager` as the partition's leader with acks=-1 rules (leadership confirmed, NOT_ENOUGH_REPLICAS under
  the minimum ISR: nothing appended, a KafkaError raised), and ``await_replication`` waits in the produce
  purgatory until the high watermark passes the log end (:func:`~.replicated.wait_replicated`).

Threading: event-loop thread only (the appends are synchronous and short, as every request's).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import AppendResult
from broker_runtime.server.replicated import coordinator_error, wait_replicated
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["INTERNAL_TOPIC_CONFIGS", "LocalInternalTopic", "ReplicatedInternalTopic"]

#: The topic configs of a coordinator's internal topic (Kafka's: compacted, kept forever).
INTERNAL_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}


class LocalInternalTopic:
    """An internal topic of a single node (see the module docstring)."""

    def __init__(self, topics: TopicManager, name: str, num_partitions: int, *, fsync: bool = False) -> None:
        self._topics = topics
        self._name = name
        self._num_partitions = num_partitions
        self._fsync = fsync

    @property
    def name(self) -> str:
        return self._name

    def log(self, partition: int, create: bool = False) -> PartitionLog | None:
        log = self._topics.get_log(self._name, partition)
        if log is None and create and self._topics.partition_count(self._name) is None:
            self._topics.create(self._name, self._num_partitions, dict(INTERNAL_TOPIC_CONFIGS))
            log = self._topics.get_log(self._name, partition)
        return log

    def append(self, partition: int, batch: bytes) -> None:
        log = self.log(partition, True)
        if log is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self._name}-{partition} is not hosted here")
        # No fsync unless asked, as Kafka: the page cache survives a crash of the process; a power loss can lose
        # the unflushed tail (log.flush.interval.* bound it).
        log.append(bytearray(batch))
        if self._fsync:
            log.flush()

    def await_replication(self, partition: int, then: Callable[[ErrorCode | None], None]) -> None:
        then(None)


class ReplicatedInternalTopic:
    """An internal topic of a cluster (see the module docstring); ``timeout_ms`` bounds the replication wait,
    ``what`` names the writes in the WARNING logged when one is not replicated."""

    def __init__(self, ctx: BrokerContext, name: str, timeout_ms: int, what: str) -> None:
        self._ctx = ctx
        self._name = name
        self._timeout_ms = timeout_ms
        self._what = what

    @property
    def name(self) -> str:
        return self._name

    def log(self, partition: int, create: bool = False) -> PartitionLog | None:
        return self._ctx.topics.get_log(self._name, partition)  # hosted as the cluster metadata says

    def append(self, partition: int, batch: bytes) -> None:
        result = self._ctx.replicas.append(self._name, partition, bytearray(batch), 9, acks=-1)
        if result.error != ErrorCode.NONE:
            raise KafkaError(
                result.error, f"{self._name}-{partition}: {result.message or ErrorCode(result.error).name}"
            )

    def await_replication(self, partition: int, then: Callable[[ErrorCode | None], None]) -> None:
        replica = self._ctx.replicas.partition(self._name, partition)
        if replica is None:
            then(ErrorCode.NOT_COORDINATOR)
            return
        target = {
            (self._name, partition): AppendResult(ErrorCode.NONE, required_offset=replica.log.log_end_offset)
        }
        waiting = wait_replicated(self._ctx, self._timeout_ms, target)
        waiting.add_done_callback(lambda done: then(coordinator_error(done.result(), self._what)))
