"""Replication: partition leader/follower state, the ISR and high watermark, the acks=-1 delayed produce, the
follower fetcher, the leader-epoch cache and replica assignment.

Layering: imports storage (partition logs, checkpoint writes), protocol (the Fetch codec for the follower's
own socket), purgatory (``DelayedOperation``) and errors -- never the server or the client. The server owns
cluster membership and wires these pieces to its event loop. See each module's docstring for design and
thread-safety (all of it runs on the broker's event-loop thread).
"""

from broker_runtime.replication.assignment import assign_replicas
from broker_runtime.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker_runtime.replication.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from broker_runtime.replication.fetcher import FetcherConfig, ReplicaFetcher
from broker_runtime.replication.partition import Partition, ReplicaState

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "DelayedProduce",
    "FetcherConfig",
    "LeaderEpochCache",
    "Partition",
    "ProducePartitionStatus",
    "ReplicaFetcher",
    "ReplicaState",
    "assign_replicas",
]
