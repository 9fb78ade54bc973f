"""What a request handler may use: the broker's state, gathered in one :class:`BrokerContext`.

The broker (``broker.py``) builds one context at start and passes it to every handler call. Handlers are plain
functions ``handle(ctx, header, body) -> HandlerResult`` (one module per API key under ``handlers/``); they
never touch sockets. A handler returns the response body as a dict (Kafka's CamelCase field names), ``None``
for "send no response" (Produce with acks=0), :data:`CLOSE_CONNECTION` to drop the connection, or an
``asyncio.Future`` that resolves to one of those later (delayed fetch, acks=-1 produce).

Thread-safety: the context and everything it holds is used from the event-loop thread only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.coordinator.group import GroupCoordinator
from broker_runtime.coordinator.transaction import TransactionCoordinator
from broker_runtime.purgatory.clock import Clock
from broker_runtime.purgatory.delayed_operation import DelayedOperationPurgatory
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.metrics import BrokerMetrics
from broker_runtime.server.network import CLOSE
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.topics import TopicManager

__all__ = ["CLOSE_CONNECTION", "BrokerContext", "HandlerResult"]

#: Returned by a handler that refuses to answer: the connection is closed (one log line says why).
CLOSE_CONNECTION = CLOSE

HandlerResult = Any  # dict[str, Any] | None | CLOSE | asyncio.Future[dict[str, Any] | None | CLOSE]


@dataclass
class BrokerContext:
    """Shared broker state for handlers; see the module docstring."""

    config: BrokerConfig
    topics: TopicManager
    replicas: ReplicaManager
    fetch_purgatory: DelayedOperationPurgatory[Any]
    clock: Clock
    loop: asyncio.AbstractEventLoop
    next_producer_id: Callable[[], int]
    #: host and port written into Metadata/FindCoordinator answers (the bound port when listeners said 0).
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 0
    #: Wall-clock milliseconds (record timestamps, LogAppendTime); monotonic time comes from ``clock``.
    wall_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    #: Makes sure the loop advances the purgatory timers at their next expiration (call after parking).
    schedule_timer: Callable[[], None] = field(default=lambda: None)
    #: acks=-1 produces waiting for the high watermark, keyed by (topic, partition).
    produce_purgatory: DelayedOperationPurgatory[Any] | None = None
    #: Cluster membership and assignments (a single-node store unless the broker runs in a cluster).
    cluster: Any = None
    #: Re-read the cluster metadata now and apply it (a request named a topic this broker does not know).
    refresh_cluster: Callable[[], bool] = field(default=lambda: False)
    #: The transaction coordinator of this broker (in a cluster: of the __transaction_state partitions it leads).
    txn_coordinator: TransactionCoordinator | None = None
    #: The group coordinator of this broker (in a cluster: of the __consumer_offsets partitions it leads).
    group_coordinator: GroupCoordinator | None = None
    #: The broker's metrics (None while ``pylog.metrics.listener`` is unset: nothing is counted).
    metrics: BrokerMetrics | None = None
