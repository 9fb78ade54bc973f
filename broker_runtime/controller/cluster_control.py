"""The controller's broker and cluster-wide operations (Kafka's ``ClusterControlManager``, with the small
managers beside it: ``ConfigurationControlManager`` for dynamic broker configs, ``AclControlManager``,
``ProducerIdControlManager``, ``ClientQuotaControlManager``): registering a broker, fencing and unfencing it,
the controller role itself, dynamic broker configs, the ACL rows, the client quota rows and producer-id blocks.

As :mod:`.replication_control`, every function changes a :class:`~.metadata.ClusterMetadata` in place inside one
``MetadataStore.update()``; refusals raise before anything changes.

No I/O, no clock; called on the thread that holds the store's update.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any

from broker_runtime.controller.election import Election, fence_broker, unfence_broker
from broker_runtime.controller.metadata import BrokerInfo, ClusterMetadata, ControllerRecord, PartitionInfo
from broker_runtime.controller.replication_control import (
    apply_elections,
    unclean_allowed,
)
from broker_runtime.errors import ConfigError

__all__ = [
    "AclRowsChange",
    "QuotaRowsChange",
    "allocate_producer_ids",
    "claim_controller",
    "fence",
    "register_broker",
    "set_broker_configs",
    "unfence",
    "update_acl_rows",
    "update_client_quota_rows",
]

_log = logging.getLogger(__name__)

#: A read-modify-write of the ACL rows: the current rows in, the new ones out.
AclRowsChange = Callable[[list[list[Any]]], list[list[Any]]]
#: A read-modify-write of the client quota rows (checked by the asking broker): the current rows in, the new out.
QuotaRowsChange = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def fence(
    meta: ClusterMetadata,
    node: int,
    live: Collection[int],
    unclean_default: bool,
    why: str,
    *,
    offline_level: int = logging.WARNING,
    on_unclean: Callable[[], None] | None = None,
) -> int:
    """Fence registered broker ``node``: ``fenced`` in its registration, and out of every ISR and leadership
    (:func:`~.election.fence_broker`; ``live``: the brokers that stay unfenced). The number of partitions
    changed; ``on_unclean`` is called for each unclean election (a metric)."""
    meta.brokers[node] = replace(meta.brokers[node], fenced=True)

    def rule(name: str, partition: PartitionInfo) -> Election | None:
        done = fence_broker(
            partition, node, live, unclean=unclean_allowed(meta.topics[name], unclean_default)
        )
        if done is not None and done.unclean and on_unclean is not None:
            on_unclean()
        return done

    return apply_elections(meta, rule, why, offline_level=offline_level)


def unfence(meta: ClusterMetadata, node: int, unclean_default: bool, why: str) -> int:
    """Unfence registered broker ``node``: it leads the leaderless partitions it may lead
    (:func:`~.election.unfence_broker`). The number of partitions changed."""
    meta.brokers[node] = replace(meta.brokers[node], fenced=False)
    return apply_elections(
        meta,
        lambda name, p: unfence_broker(p, node, unclean=unclean_allowed(meta.topics[name], unclean_default)),
        why,
    )


def register_broker(
    meta: ClusterMetadata,
    node_id: int,
    host: str,
    port: int,
    endpoints: Mapping[str, tuple[str, int]] | None = None,
    *,
    cluster_id: str | None = None,
    unclean_default: bool,
    where: object = "the cluster metadata",
) -> int:
    """Record broker ``node_id`` at ``host:port`` with a new broker epoch; returns the epoch.

    Refuses (ConfigError) a broker of another ``cluster_id``. A previous incarnation that is still unfenced is
    fenced first (it leaves the ISRs, its leaderships move), then the new one is unfenced. The broker's first
    heartbeat must be written in the same update (the caller does), so no controller sees the new registration
    without its session."""
    if cluster_id is not None:
        if meta.cluster_id is not None and meta.cluster_id != cluster_id:
            raise ConfigError(
                f"{where} belongs to cluster {meta.cluster_id!r}, this broker is configured for {cluster_id!r}"
            )
        meta.cluster_id = cluster_id
    old = meta.brokers.get(node_id)
    epoch = old.broker_epoch + 1 if old is not None else 1
    if old is not None and not old.fenced:
        live = set(meta.unfenced()) - {node_id}
        fence(meta, node_id, live, unclean_default, f"node {node_id} restarted")
    meta.brokers[node_id] = BrokerInfo(
        node_id, host, port, False, tuple(sorted((endpoints or {}).items())), epoch
    )
    unfence(meta, node_id, unclean_default, f"node {node_id} registered")
    return epoch


def claim_controller(meta: ClusterMetadata, node_id: int) -> int:
    """Record ``node_id`` as the controller in the next controller epoch; returns that epoch."""
    epoch = (meta.controller.epoch if meta.controller is not None else 0) + 1
    meta.controller = ControllerRecord(node_id, epoch)
    meta.controller_id = node_id
    return epoch


def set_broker_configs(meta: ClusterMetadata, resource: str, configs: Mapping[str, str]) -> None:
    """Replace the dynamic configs of ``resource`` (``""`` = cluster-wide defaults, else a node id; validated by
    the asking broker); empty ``configs`` removes them."""
    if configs:
        meta.broker_configs[resource] = dict(configs)
    else:
        meta.broker_configs.pop(resource, None)


def update_acl_rows(meta: ClusterMetadata, change: AclRowsChange) -> None:
    """CreateAcls / DeleteAcls: ``change`` the rows (see :data:`AclRowsChange`)."""
    meta.acls = [list(row) for row in change([list(row) for row in meta.acls])]


def update_client_quota_rows(meta: ClusterMetadata, change: QuotaRowsChange) -> None:
    """AlterClientQuotas: ``change`` the rows (see :data:`QuotaRowsChange`)."""
    meta.client_quotas = [dict(row) for row in change([dict(row) for row in meta.client_quotas])]


def allocate_producer_ids(meta: ClusterMetadata, floor: int, block_size: int) -> tuple[int, int]:
    """AllocateProducerIds: the next block of ``block_size`` ids no broker has had, starting at ``floor`` or
    later; (first, last)."""
    start = max(meta.next_producer_id, floor)
    end = start + block_size - 1
    meta.next_producer_id = end + 1
    return start, end
