"""The cluster's control plane: the metadata store seam, broker liveness, leader election rules and the
controller role (see each module's docstring)."""

from broker_runtime.controller.controller import (
    CONTROLLER_TICK_MS,
    Controller,
    ControllerConfig,
    apply_elections,
    register_broker,
    unclean_allowed,
)
from broker_runtime.controller.election import (
    NO_LEADER,
    Election,
    fence_broker,
    preferred_election,
    unfence_broker,
)
from broker_runtime.controller.liveness import BrokerSession, Heartbeat, process_alive, read_heartbeat
from broker_runtime.controller.store import (
    CLUSTER_FILE,
    CLUSTER_LOCK_FILE,
    LOCK_TIMEOUT_S,
    FileMetadataStore,
    MetadataStore,
)

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_LOCK_FILE",
    "CONTROLLER_TICK_MS",
    "LOCK_TIMEOUT_S",
    "NO_LEADER",
    "BrokerSession",
    "Controller",
    "ControllerConfig",
    "Election",
    "FileMetadataStore",
    "Heartbeat",
    "MetadataStore",
    "apply_elections",
    "fence_broker",
    "preferred_election",
    "process_alive",
    "read_heartbeat",
    "register_broker",
    "unclean_allowed",
    "unfence_broker",
]
