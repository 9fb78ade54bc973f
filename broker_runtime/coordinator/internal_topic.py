"""What a coordinator needs from the internal topic it keeps its state in (``__transaction_state``,
``__consumer_offsets``): its partition logs to replay, appends, and the wait for an append's replication.

One protocol, two implementations in the server (:mod:`broker_runtime.server.node.internal_topics`), chosen by the
deployment: a single node appends to its local log (the topic is made on first use) and has nothing to wait
for; a cluster appends as the partition's leader with acks=-1 rules and waits for the high watermark (Kafka's
``CoordinatorPartitionWriter`` over the ``ReplicaManager``). A coordinator is written once against this protocol.

Threading: every call happens on the broker's event-loop thread; ``await_replication`` calls back on it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from broker_runtime.errors import ErrorCode
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["InternalTopic"]


class InternalTopic(Protocol):
    """One internal topic of this broker's deployment; see the module docstring."""

    @property
    def name(self) -> str: ...

    def log(self, partition: int, create: bool = False) -> PartitionLog | None:
        """The local log of ``partition`` (None when absent). ``create``: a single node makes the topic now
        (a cluster's topic is made by its placement, FindCoordinator, and ``create`` changes nothing)."""
        ...

    def append(self, partition: int, batch: bytes) -> None:
        """Append one record batch to ``partition`` as its leader; raises (KafkaError, StorageError, OSError)
        when it is not written, so the coordinator answers with an error and changes nothing."""
        ...

    def await_replication(self, partition: int, then: Callable[[ErrorCode | None], None]) -> None:
        """Call ``then(None)`` once ``partition`` is replicated to its current log end, else ``then`` with the
        coordinator's retriable error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        ...
