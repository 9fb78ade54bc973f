"""A broker as one node of a cluster on this host: the :class:`~.context.Deployment` over the shared
metadata of :class:`~.cluster.SharedFileCluster` (``pylog.cluster.dir``).

What it adds to the metadata store:

* **Liveness** (Kafka's broker heartbeats): the node beats every ``broker.heartbeat.interval.ms``. A node whose
  last beat is older than half of ``broker.session.timeout.ms`` may have been fenced while it was not running
  (SIGSTOP, a stalled loop): before it appends as a leader or beats again it renews its session under the
  cluster lock and re-reads the metadata (:meth:`LocalCluster.confirm_leadership`), so a replaced leader never
  appends as a zombie, whichever of its overdue tasks and requests runs first.
* **The controller** (:class:`~broker_runtime.controller.Controller`): ticks every ``CONTROLLER_TICK_MS``; only
  the node holding the role acts. One round runs before the node announces itself, so the first node of a
  cluster is the controller by the time it serves.
* **Applying metadata** (Kafka's BrokerMetadataPublisher): the shared file is polled every ``POLL_INTERVAL_MS``
  and re-read on demand (:meth:`LocalCluster.refresh`); each new view goes to the topics (configs, deletions),
  the dynamic broker configs, the replica manager (leader or follower, fetchers) and both coordinators, which
  load the ``__transaction_state`` / ``__consumer_offsets`` partitions this node now leads at their leader
  epoch and drop the ones it stopped leading. A partition whose log was still loading gets the latest view
  again once it is loaded.
* **Coordinators' records**: appended as the partition's leader with acks=-1 rules and answered once replicated
  (:class:`~.internal_topics.ReplicatedInternalTopic`); markers sent to each partition's leader in the background
  (:class:`~.transactions.ClusterTransactions`); placement by the leaders of the internal partitions, the
  topics made on the first lookup (:mod:`.transactions`, :mod:`.groups`).
* **Producer-id blocks** taken from the shared metadata, so ids are unique across the nodes.
* **Controlled shutdown** before a clean stop: the node fences itself so its leaderships move at once.

Threading: event-loop thread only (the metadata file is read and written there, each change under a bounded
lock, see :mod:`.cluster`); ``close`` runs after the loop stopped serving.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from broker_runtime.controller import CONTROLLER_TICK_MS, Controller, ControllerConfig
from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.coordinator.internal_topic import InternalTopic
from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC
from broker_runtime.errors import ErrorCode, WaitTimeoutError
from broker_runtime.protocol.messages import find_coordinator
from broker_runtime.server.cluster import POLL_INTERVAL_MS, ClusterView, SharedFileCluster
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.context import BrokerContext, Periodic, Placement
from broker_runtime.server.groups import coordinator_node as group_coordinator_node
from broker_runtime.server.groups import ensure_offsets_topic
from broker_runtime.server.node.internal_topics import ReplicatedInternalTopic
from broker_runtime.server.replicated import follow_leadership
from broker_runtime.server.topics import TopicManager
from broker_runtime.server.transactions import ClusterTransactions, coordinator_node
from broker_runtime.storage.producer_state import ProducerIdManager

__all__ = ["LocalCluster"]

_log = logging.getLogger(__name__)

_NO_TXN_LEADER = "the __transaction_state partition of this transactional id has no live leader now"


class LocalCluster:
    """The deployment of one node of a cluster on this host (see the module docstring)."""

    def __init__(self, cfg: BrokerConfig, topics: TopicManager) -> None:
        assert cfg.cluster_dir is not None
        self._cfg = cfg
        self._store = SharedFileCluster(
            cfg.node_id,
            cfg.cluster_dir,
            cfg.cluster_id,
            topics,
            unclean_leader_election_enable=cfg.unclean_leader_election_enable,
        )
        self._controller = self._store.controller(
            ControllerConfig(
                session_timeout_ms=cfg.broker_session_timeout_ms,
                unclean_leader_election_enable=cfg.unclean_leader_election_enable,
                auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
                leader_imbalance_check_interval_ms=cfg.leader_imbalance_check_interval_seconds * 1000,
                leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
            ),
        )
        #: The components, once built (:meth:`attach`); metadata is applied to them from then on.
        self._ctx: BrokerContext | None = None
        #: The view last applied to the components.
        self._applied: ClusterView | None = None
        #: Topic name -> (partition count, configs, topic id) of the view ``_topics_of`` last saw (one dict per view).
        self._topics_table: tuple[ClusterView | None, dict[str, Any]] = (None, {})
        topics.use_cluster(self._topics_of)

    # -- the seam -----------------------------------------------------------------------------------------------

    @property
    def store(self) -> SharedFileCluster:
        return self._store

    @property
    def replicated(self) -> bool:
        return True

    @property
    def controller(self) -> Controller:
        return self._controller

    @property
    def controller_active(self) -> bool:
        return self._controller.active

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        return self._store.alter_isr(topic, partition, isr, leader_epoch)

    def confirm_leadership(self, why: str = "before appending") -> str | None:
        cfg = self._cfg
        age_ms = (time.monotonic() - self._store.last_heartbeat) * 1000
        if age_ms <= cfg.broker_session_timeout_ms / 2:
            return None
        _log.warning(
            "node %d: last heartbeat %.0f ms ago (broker.session.timeout.ms=%d); confirming leadership %s",
            cfg.node_id,
            age_ms,
            cfg.broker_session_timeout_ms,
            why,
        )
        try:
            self._store.renew_session()
        except (WaitTimeoutError, OSError) as exc:
            return f"node {cfg.node_id} cannot confirm its leadership (cluster metadata unavailable: {exc})"
        self.refresh()
        return None

    def heartbeat(self) -> None:
        if self.confirm_leadership("at the next heartbeat") is None:
            self._store.heartbeat()

    def producer_ids(self, state_file: Path) -> ProducerIdManager:
        return ProducerIdManager(state_file, allocate_block=self._store.allocate_producer_ids)

    def attach(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        ctx.replicas.set_loaded_listener(self._partition_loaded)

    def refresh(self) -> bool:
        ctx = self._ctx
        if ctx is None:
            return False
        self._store.refresh()
        view = self._store.view
        if view is self._applied:
            return False
        previous = self._applied
        self._applied = view
        deleted = set(view.deleted_topics)
        if previous is not None:
            deleted |= set(previous.topics) - set(view.topics)
        for name in ctx.topics.apply_cluster_view({n: t.configs for n, t in view.topics.items()}, deleted):
            ctx.replicas.forget_topic(name)
        ctx.apply_broker_configs()
        ctx.replicas.apply_view(view)
        self._follow(ctx, view)
        return True

    def internal_topic(
        self, ctx: BrokerContext, name: str, num_partitions: int, *, fsync: bool, timeout_ms: int, what: str
    ) -> InternalTopic:
        return ReplicatedInternalTopic(ctx, name, timeout_ms, what)

    def marker_sender(self, ctx: BrokerContext) -> ClusterTransactions:
        return ClusterTransactions(ctx)

    def find_coordinator(self, ctx: BrokerContext, key_type: int, key: str) -> Placement:
        if key_type == find_coordinator.KEY_TYPE_TRANSACTION:
            code, node, host, port = coordinator_node(ctx, key)
            return code, None if code == ErrorCode.NONE else _NO_TXN_LEADER, node, host, port
        return group_coordinator_node(ctx, key)

    def offsets_partition(self, ctx: BrokerContext, group_id: str) -> tuple[int | None, str | None]:
        why = ensure_offsets_topic(ctx)
        if why is not None:
            return None, why
        return ctx.group_coordinator.partition_for(group_id), None

    def start_coordinators(self, ctx: BrokerContext) -> None:
        # the internal partitions led here since the start
        self._follow(ctx, self._store.view)

    def periodic_tasks(self) -> list[Periodic]:
        # One controller round before the node announces itself (see the module docstring).
        self._control()
        cfg = self._cfg
        return [
            Periodic(POLL_INTERVAL_MS, self.refresh, "cluster-metadata"),
            Periodic(cfg.broker_heartbeat_interval_ms, self.heartbeat, "heartbeat"),
            Periodic(CONTROLLER_TICK_MS, self._control, "controller"),
        ]

    def controlled_shutdown(self) -> None:
        self._store.controlled_shutdown()

    def close(self) -> None:
        self._store.close()

    # -- internals ----------------------------------------------------------------------------------------------

    def _control(self) -> None:
        if self._controller.tick():
            self.refresh()

    def _topics_of(self) -> dict[str, Any]:
        """Topic name -> (partition count, configs, topic id) of the current view, for the topic manager."""
        view = self._store.view
        seen, table = self._topics_table
        if seen is not view:
            table = {n: (len(t.partitions), t.configs, t.topic_id) for n, t in view.topics.items()}
            self._topics_table = (view, table)
        return table

    def _follow(self, ctx: BrokerContext, view: ClusterView) -> None:
        """The coordinators take the internal partitions this node leads in ``view`` and drop the others."""
        node = self._cfg.node_id
        follow_leadership(ctx.txn_coordinator, view.topics.get(TRANSACTION_STATE_TOPIC), node)
        follow_leadership(ctx.group_coordinator, view.topics.get(CONSUMER_OFFSETS_TOPIC), node)

    def _partition_loaded(self) -> None:
        # A partition assigned here got its log: apply the latest view again, so its role and the coordinators'
        # loading reach it (the view may have changed while it loaded).
        ctx, view = self._ctx, self._applied
        if ctx is None or view is None:
            return
        ctx.replicas.apply_view(view)
        self._follow(ctx, view)
