"""What a broker asks the controller (Kafka's broker-to-controller channel: ``BrokerRegistration``,
``BrokerHeartbeat``, ``AlterPartition``, forwarded CreateTopics / DeleteTopics / CreatePartitions / AlterConfigs /
CreateAcls / DeleteAcls / ElectLeaders, ``AllocateProducerIds``).

KRaft's rule holds: brokers ask, the controller writes. Each method of :class:`ControllerChannel` is one request,
answered by one controller operation (:mod:`.cluster_control`, :mod:`.replication_control`) inside one
``MetadataStore.update()``; nothing else in the project changes the metadata. With the single-host store the
asking process runs that operation itself while it holds the store's lock (the lock plays the part of the
controller's single event queue: requests are applied one at a time, in lock order, each against the latest
metadata); a multi-host store would send the same requests to the active controller instead, and this class is
where that transport would go. Errors are the operations' own (:class:`~broker_runtime.errors.TopicError`,
:class:`~.replication_control.AlterPartitionRejected`, ConfigError) plus the store's
:class:`~broker_runtime.errors.WaitTimeoutError` / ``OSError`` when the metadata cannot be had.

Thread-safety: a channel belongs to its broker's event-loop thread (as its store).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping

from broker_runtime.controller import cluster_control, replication_control
from broker_runtime.controller.cluster_control import AclRowsChange, QuotaRowsChange
from broker_runtime.controller.metadata import ClusterMetadata
from broker_runtime.controller.replication_control import TopicRules
from broker_runtime.controller.store import LOCK_TIMEOUT_S, MetadataStore, Session
from broker_runtime.errors import ErrorCode

__all__ = ["ControllerChannel"]

_log = logging.getLogger(__name__)


class ControllerChannel:
    """This broker's requests to the controller; see the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        session: Session,
        cluster_id: str,
        rules: TopicRules,
        *,
        unclean_leader_election_enable: bool = False,
        where: object = "the cluster metadata",
    ) -> None:
        self.store = store
        self.session = session
        self.node_id = session.node_id
        self._cluster_id = cluster_id
        self._rules = rules
        self._unclean_default = unclean_leader_election_enable
        self._where = where

    @contextlib.contextmanager
    def _request(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[ClusterMetadata]:
        with self.store.update(timeout_s) as meta:
            yield meta
            if meta.cluster_id is None:
                meta.cluster_id = self._cluster_id

    # -- this broker's registration and session (BrokerRegistration, BrokerHeartbeat) ---------------------------

    def register(self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None) -> int:
        """Take this broker's session and register it with a new broker epoch (its first heartbeat in the same
        update); the epoch."""
        self.session.acquire()
        with self._request(timeout_s=30.0) as meta:
            epoch = cluster_control.register_broker(
                meta,
                self.node_id,
                host,
                port,
                endpoints,
                cluster_id=self._cluster_id,
                unclean_default=self._unclean_default,
                where=self._where,
            )
            self.session.broker_epoch = epoch
            self.session.beat()
        return epoch

    def heartbeat(self) -> None:
        self.session.beat()

    def renew_session(self) -> None:
        """Beat inside an update: once it returns, every controller decision about this broker's session made
        before the beat is in the metadata (the caller re-reads it)."""
        with self.store.update():
            self.session.beat()

    def controlled_shutdown(self) -> bool:
        """Fence this broker now (Kafka's controlled shutdown); False when it was not registered or already
        fenced."""
        with self._request() as meta:
            me = meta.brokers.get(self.node_id)
            if me is None or me.fenced:
                return False
            live = set(meta.unfenced()) - {self.node_id}
            cluster_control.fence(
                meta,
                self.node_id,
                live,
                self._unclean_default,
                f"node {self.node_id} shutting down",
                offline_level=logging.INFO,
            )
        return True

    def close(self) -> None:
        self.session.release()

    # -- topics and partitions ------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> tuple[int, int]:
        with self._request() as meta:
            return replication_control.create_topic(
                meta,
                self._rules,
                name,
                partitions,
                replication_factor,
                configs,
                assignments,
                validate_only=validate_only,
            )

    def delete_topic(self, name: str) -> None:
        with self._request() as meta:
            replication_control.delete_topic(meta, name)

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, *, validate_only: bool = False
    ) -> None:
        with self._request() as meta:
            replication_control.create_partitions(
                meta, self._rules, name, count, assignments, validate_only=validate_only
            )

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        with self._request() as meta:
            replication_control.set_topic_configs(meta, name, configs)

    def alter_partition(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> None:
        with self._request() as meta:
            replication_control.alter_partition(meta, self.node_id, topic, partition, isr, leader_epoch)

    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        with self._request() as meta:
            return replication_control.elect_leaders(meta, unclean, partitions)

    # -- cluster-wide ---------------------------------------------------------------------------------------

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        with self._request() as meta:
            cluster_control.set_broker_configs(meta, resource, configs)

    def update_acl_rows(self, change: AclRowsChange) -> None:
        with self._request() as meta:
            cluster_control.update_acl_rows(meta, change)

    def update_client_quota_rows(self, change: QuotaRowsChange) -> None:
        with self._request() as meta:
            cluster_control.update_client_quota_rows(meta, change)

    def allocate_producer_ids(self, floor: int, block_size: int) -> tuple[int, int]:
        with self._request() as meta:
            return cluster_control.allocate_producer_ids(meta, floor, block_size)
