"""The cluster's control plane (Kafka's ``metadata`` module, in small): the typed metadata, the store seam with
its single-host implementation, the controller's operations (the only code that changes the metadata), the
broker's channel to them, the election rules and the active controller role (see each module's docstring).

How it fits (KRaft's rule: brokers ask, the controller writes)::

    broker (server.cluster)  --requests-->  ControllerChannel  --+
    Controller.tick (active role: fence, unfence, rebalance)  ---+--> cluster_control / replication_control
                                                                        |  (on ClusterMetadata, in one update)
                                                                        v
                                                     MetadataStore  (SingleHostMetadataStore: cluster.json,
                                                                      flock, heartbeat files; one machine)
"""

from broker_runtime.controller.channel import ControllerChannel
from broker_runtime.controller.cluster_control import register_broker
from broker_runtime.controller.controller import CONTROLLER_TICK_MS, Controller, ControllerConfig
from broker_runtime.controller.election import (
    Election,
    change_leader,
    fence_broker,
    preferred_election,
    unfence_broker,
)
from broker_runtime.controller.liveness import Heartbeat, SingleHostSession, process_alive, read_heartbeat
from broker_runtime.controller.metadata import (
    FORMAT_VERSION,
    NO_CONTROLLER,
    NO_LEADER,
    BrokerInfo,
    ClusterMetadata,
    ControllerRecord,
    PartitionInfo,
    TopicInfo,
)
from broker_runtime.controller.replication_control import (
    AlterPartitionRejected,
    TopicRules,
    check_new_count,
    move_leader,
    unclean_allowed,
)
from broker_runtime.controller.store import (
    CLUSTER_FILE,
    CLUSTER_LOCK_FILE,
    LOCK_TIMEOUT_S,
    MetadataStore,
    Session,
    SingleHostMetadataStore,
)

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_LOCK_FILE",
    "CONTROLLER_TICK_MS",
    "FORMAT_VERSION",
    "LOCK_TIMEOUT_S",
    "NO_CONTROLLER",
    "NO_LEADER",
    "AlterPartitionRejected",
    "BrokerInfo",
    "ClusterMetadata",
    "Controller",
    "ControllerChannel",
    "ControllerConfig",
    "ControllerRecord",
    "Election",
    "Heartbeat",
    "MetadataStore",
    "PartitionInfo",
    "Session",
    "SingleHostMetadataStore",
    "SingleHostSession",
    "TopicInfo",
    "TopicRules",
    "change_leader",
    "check_new_count",
    "fence_broker",
    "move_leader",
    "preferred_election",
    "process_alive",
    "read_heartbeat",
    "register_broker",
    "unclean_allowed",
    "unfence_broker",
]
