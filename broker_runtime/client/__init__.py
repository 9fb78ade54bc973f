"""A small synchronous Kafka-protocol client (imports only ``broker_runtime.protocol`` and ``.errors``).

See :mod:`broker_runtime.client.client` for routing, errors and produce pipelining, and
:mod:`broker_runtime.client.connection` for the per-broker connection. Not thread-safe: one client per thread.
"""

from __future__ import annotations

from broker_runtime.client.client import (
    BrokerMetadata,
    ClusterMetadata,
    ConfigEntry,
    FetchResult,
    InFlight,
    KafkaClient,
    NewTopic,
    PartitionMetadata,
    ProduceResult,
    TopicMetadata,
)
from broker_runtime.client.connection import BrokerConnection
from broker_runtime.errors import BrokerConnectionError

__all__ = [
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerMetadata",
    "ClusterMetadata",
    "ConfigEntry",
    "FetchResult",
    "InFlight",
    "KafkaClient",
    "NewTopic",
    "PartitionMetadata",
    "ProduceResult",
    "TopicMetadata",
]
