"""pylog's synchronous Kafka-protocol client (imports only ``broker_runtime.protocol``, ``.security`` and
``.errors``).

The rooms: :mod:`~broker_runtime.client.router` (connections, cached metadata, leader lookup, the one
leader-retry driver and the retry budget), :mod:`~broker_runtime.client.client` (:class:`KafkaClient`: the router
plus list offsets, fetch and pipelined produce), the facades sharing a client's router
(:mod:`~broker_runtime.client.admin` ``client.admin``, :mod:`~broker_runtime.client.transactions`
``client.transactions``, :mod:`~broker_runtime.client.groups` ``client.groups``) and
:mod:`~broker_runtime.client.connection` (one blocking connection per broker). Not thread-safe: a client and its
facades belong to the thread that calls them; make one client per thread (it is cheap; connections are lazy).
"""

from __future__ import annotations

from broker_runtime.client.admin import AdminClient, ConfigEntry, NewTopic
from broker_runtime.client.client import FetchResult, InFlight, KafkaClient, ProduceResult
from broker_runtime.client.connection import BrokerConnection
from broker_runtime.client.groups import GroupClient
from broker_runtime.client.router import (
    BrokerMetadata,
    ClientRouter,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from broker_runtime.client.transactions import TransactionClient
from broker_runtime.errors import BrokerConnectionError

__all__ = [
    "AdminClient",
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerMetadata",
    "ClientRouter",
    "ClusterMetadata",
    "ConfigEntry",
    "FetchResult",
    "GroupClient",
    "InFlight",
    "KafkaClient",
    "NewTopic",
    "PartitionMetadata",
    "ProduceResult",
    "TopicMetadata",
    "TransactionClient",
]
