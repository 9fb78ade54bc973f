"""The broker's composition: small factories that build its components, in dependency order, into one
:class:`~.context.BrokerContext` (the shape of Kafka's ``BrokerServer.startup``, on one event loop).

Threading: everything here runs on the broker's event-loop thread, during start, before any request is served;
the components are used from that thread afterwards (retention and checkpoints excepted: :func:`periodic_tasks`
marks them to run on the storage thread).

Order (each step uses only what the steps before built; nothing is bound late)::

    logs (LogManager, made and recovered by the broker)
      -> topics (TopicManager: topic overrides loaded)
      -> deployment (deployment_for: SingleNode or LocalCluster; the seam, see :mod:`.deployment`)
      -> replicas (ReplicaManager: ISR changes and leadership confirmation through the deployment)
      -> purgatories (PurgatoryTimer: Fetch and Produce, woken by the replica manager's appends and HW moves)
      -> producer ids (blocks from the deployment) -> the context
      -> group coordinator, transaction markers channel, transaction coordinator (set on the context; their
         internal topics from the deployment)
      -> deployment.attach (metadata changes reach the components) -> coordinators take their partitions
      -> dynamic broker configs applied

Purgatory timers: after an operation is parked, one loop callback is scheduled at the earliest
``next_expiration_ms()`` of the two timing wheels (Kafka's reaper threads, without the threads).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker_runtime.coordinator.group import (
    CONSUMER_OFFSETS_TOPIC,
    ConsumerGroupConfig,
    CoordinatorTimer,
    GroupConfig,
    GroupCoordinator,
)
from broker_runtime.coordinator.transaction import (
    TRANSACTION_STATE_TOPIC,
    TransactionConfig,
    TransactionCoordinator,
)
from broker_runtime.purgatory.clock import Clock
from broker_runtime.purgatory.delayed_operation import DelayedOperationPurgatory
from broker_runtime.purgatory.timing_wheel import Timer
from broker_runtime.replication.fetcher import FetcherConfig
from broker_runtime.security.acl import authorizer_from_properties
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.connection_quotas import ConnectionQuotas
from broker_runtime.server.consumer_group_topics import topic_ids
from broker_runtime.server.context import BrokerContext, Deployment, Periodic
from broker_runtime.server.fetch_sessions import FetchSessionCache
from broker_runtime.server.handlers import supported_versions
from broker_runtime.server.metrics import BrokerMetrics
from broker_runtime.server.node.local_cluster import LocalCluster
from broker_runtime.server.node.single_node import PRODUCER_ID_STATE_FILE, SingleNode
from broker_runtime.server.quota_manager import ClientQuotas
from broker_runtime.server.reconfigure import Reconfiguration
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.topics import TopicManager
from broker_runtime.server.transactions import REPLICATION_TIMEOUT_MS
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager

__all__ = ["PurgatoryTimer", "compose", "deployment_for", "periodic_tasks"]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def compose(
    cfg: BrokerConfig,
    clock: Clock,
    loop: asyncio.AbstractEventLoop,
    logs: LogManager,
    log_config: LogConfig,
    timer: PurgatoryTimer,
) -> BrokerContext:
    """Build every component of a broker over its recovered ``logs`` (see the module docstring for the order)."""
    topics = TopicManager(logs, log_config)
    topics.load()
    deployment = deployment_for(cfg, topics)
    metrics = BrokerMetrics(cfg.listener.name) if cfg.metrics_listener is not None else None
    replicas = replica_manager(cfg, clock, topics, deployment, metrics)
    timer.watch(replicas)
    producer_ids = deployment.producer_ids(Path(cfg.log_dirs[0]) / PRODUCER_ID_STATE_FILE)
    ctx = BrokerContext(
        config=cfg,
        topics=topics,
        replicas=replicas,
        fetch_purgatory=timer.fetch,
        produce_purgatory=timer.produce,
        clock=clock,
        loop=loop,
        deployment=deployment,
        next_producer_id=producer_ids.next_id,
        schedule_timer=timer.schedule,
        metrics=metrics,
        authorizer=authorizer_from_properties(cfg.props),
        api_versions=supported_versions(),
    )
    ctx.reconfiguration = Reconfiguration(cfg, topics, logs)
    ctx.client_quotas = ClientQuotas(cfg.quota_window_num, cfg.quota_window_size_seconds)
    ctx.fetch_sessions = FetchSessionCache(cfg.max_incremental_fetch_session_cache_slots, clock.now_ms)
    ctx.group_coordinator = group_coordinator(ctx)
    timer.add(ctx.group_coordinator.timer)
    ctx.txn_markers = deployment.marker_sender(ctx)
    ctx.txn_coordinator = transaction_coordinator(ctx)
    deployment.attach(ctx)
    deployment.start_coordinators(ctx)
    timer.schedule()  # the session timers of the groups loaded now
    ctx.apply_broker_configs()
    return ctx


def deployment_for(cfg: BrokerConfig, topics: TopicManager) -> Deployment:
    """A node of the cluster of ``pylog.cluster.dir`` when it is set, else a single node."""
    if cfg.cluster_dir:
        return LocalCluster(cfg, topics)
    return SingleNode(cfg, topics)


def replica_manager(
    cfg: BrokerConfig,
    clock: Clock,
    topics: TopicManager,
    deployment: Deployment,
    metrics: BrokerMetrics | None,
) -> ReplicaManager:
    """The replica manager: ISR changes through the deployment (counted as shrinks or expands once accepted),
    leaders confirm their leadership with it before they append, followers fetch from the addresses it knows."""

    def alter_isr(topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        if metrics is None:
            return deployment.alter_isr(topic, partition, isr, leader_epoch)
        hosted = replicas.partition(topic, partition)
        before = len(hosted.isr) if hosted is not None else len(isr)
        accepted = deployment.alter_isr(topic, partition, isr, leader_epoch)
        if accepted:
            metrics.isr_changed(before, len(isr))
        return accepted

    def resolve(node_id: int) -> tuple[str, int] | None:
        info = deployment.store.view.brokers.get(node_id)
        return None if info is None else (info.host, info.port)

    replicas = ReplicaManager(
        topics,
        wall_ms=_wall_ms,
        node_id=cfg.node_id,
        now_ms=clock.now_ms,
        alter_isr=alter_isr,
        replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
        header_only_validation=cfg.test_validation_header_only,
        fetcher_config=FetcherConfig(
            cfg.node_id,
            max_wait_ms=cfg.replica_fetch_wait_max_ms,
            min_bytes=cfg.replica_fetch_min_bytes,
            max_bytes=cfg.replica_fetch_response_max_bytes,
            partition_max_bytes=cfg.replica_fetch_max_bytes,
            backoff_ms=cfg.replica_fetch_backoff_ms,
            socket_timeout_ms=cfg.replica_socket_timeout_ms,
            lag_time_max_ms=cfg.replica_lag_time_max_ms,
            security=cfg.inter_broker_security() if deployment.replicated else None,
        ),
        resolve_broker=resolve,
        cluster_mode=deployment.replicated,
        confirm_leadership=deployment.confirm_leadership,
    )
    return replicas


def group_coordinator(ctx: BrokerContext) -> GroupCoordinator:
    """The group coordinator over ``__consumer_offsets`` of the deployment (each local append fsynced; in a
    cluster the answers wait for replication, at most ``offsets.commit.timeout.ms``), its timers on the broker's
    clock, advanced by the loop with the purgatories'."""
    cfg = ctx.config
    offsets = ctx.deployment.internal_topic(
        ctx,
        CONSUMER_OFFSETS_TOPIC,
        cfg.offsets_topic_num_partitions,
        fsync=True,
        timeout_ms=cfg.offsets_commit_timeout_ms,
        what="group assignment write",
    )
    return GroupCoordinator(
        GroupConfig(
            num_partitions=cfg.offsets_topic_num_partitions,
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
            consumer=ConsumerGroupConfig(
                assignors=cfg.group_consumer_assignors,
                heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
                session_timeout_ms=cfg.group_consumer_session_timeout_ms,
                max_size=cfg.group_consumer_max_size,
                regex_refresh_interval_ms=cfg.group_consumer_regex_refresh_interval_ms,
                regex_refresh_min_interval_ms=cfg.group_consumer_regex_refresh_min_interval_ms,
            ),
        ),
        offsets.log,
        ctx.loop,
        ctx.topics.partition_count,
        timer=CoordinatorTimer(ctx.clock, ctx.schedule_timer),
        append_records=offsets.append,
        await_replication=offsets.await_replication,
        topic_ids=lambda: topic_ids(ctx),
    )


def transaction_coordinator(ctx: BrokerContext) -> TransactionCoordinator:
    """The transaction coordinator over ``__transaction_state`` of the deployment, its markers through
    ``ctx.txn_markers``, its producer ids from the node's blocks."""
    cfg = ctx.config
    state = ctx.deployment.internal_topic(
        ctx,
        TRANSACTION_STATE_TOPIC,
        cfg.transaction_state_log_num_partitions,
        fsync=False,
        timeout_ms=REPLICATION_TIMEOUT_MS,
        what="transaction state write",
    )
    topics = ctx.topics
    return TransactionCoordinator(
        TransactionConfig(
            num_partitions=cfg.transaction_state_log_num_partitions,
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            transactional_id_expiration_ms=cfg.transactional_id_expiration_ms,
            abort_timed_out_check_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_check_interval_ms=cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
        ),
        state,
        ctx.txn_markers.send,
        ctx.next_producer_id,
        _wall_ms,
        lambda topic: topics.partition_count(topic) is not None,
    )


def periodic_tasks(
    ctx: BrokerContext, logs: LogManager, log_config: LogConfig, quotas: ConnectionQuotas
) -> list[Periodic]:
    """Every node's periodic tasks (Kafka's names; the deployment adds its own): idle connections, retention and
    checkpoints (on the storage thread), ISR expiration, producer-id expiration, the coordinators' expirations."""
    cfg = ctx.config

    def checkpoint() -> None:
        logs.flush_dirty_logs()
        logs.checkpoint()

    txns, groups = ctx.txn_coordinator, ctx.group_coordinator
    return [
        Periodic(quotas.idle_check_interval_ms(), quotas.close_idle, "idle-connections"),
        Periodic(cfg.log_retention_check_interval_ms, logs.run_retention, "retention", storage=True),
        Periodic(cfg.log_flush_offset_checkpoint_interval_ms, checkpoint, "checkpoint", storage=True),
        Periodic(max(1, cfg.replica_lag_time_max_ms // 2), ctx.replicas.maybe_shrink_isr, "isr-expiration"),
        Periodic(
            log_config.producer_id_expiration_check_interval_ms,
            logs.remove_expired_producers,
            "producer-expiration",
        ),
        Periodic(
            cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            txns.abort_timed_out,
            "transaction-abort",
        ),
        Periodic(
            cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
            txns.expire_transactional_ids,
            "transactional-id-expiration",
        ),
        Periodic(cfg.offsets_retention_check_interval_ms, groups.expire_offsets, "offsets-expiration"),
    ]


class PurgatoryTimer:
    """The Fetch and Produce purgatories, each on its own hierarchical timing wheel read through the broker's
    clock, and the other timers added (the group coordinator's), advanced by one loop callback at their earliest
    expiration (see the module docstring)."""

    def __init__(self, clock: Clock, loop: asyncio.AbstractEventLoop) -> None:
        self._clock = clock
        self._loop = loop
        #: Consumer and follower fetches waiting for data.
        self.fetch: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Fetch", Timer(clock, name="fetch-purgatory")
        )
        #: acks=-1 produces (and internal writes) waiting for the high watermark.
        self.produce: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Produce", Timer(clock, name="produce-purgatory")
        )
        self._timers: list[DelayedOperationPurgatory[Any] | CoordinatorTimer] = [self.fetch, self.produce]
        self._handle: asyncio.TimerHandle | None = None
        self._due_ms: int | None = None

    def add(self, timer: CoordinatorTimer) -> None:
        """Advance ``timer`` with the purgatories (it is shut down by its owner)."""
        self._timers.append(timer)

    @property
    def purgatories(self) -> list[DelayedOperationPurgatory[Any]]:
        return [self.fetch, self.produce]

    def watch(self, replicas: ReplicaManager) -> None:
        """After an append the fetch purgatory is checked for the partition; after a high-watermark move both."""

        def appended(topic: str, partition: int) -> None:
            self.fetch.check_and_complete((topic, partition))

        def high_watermark_moved(topic: str, partition: int) -> None:
            self.produce.check_and_complete((topic, partition))
            self.fetch.check_and_complete((topic, partition))

        replicas.set_append_listener(appended)
        replicas.set_high_watermark_listener(high_watermark_moved)

    def schedule(self) -> None:
        """Make sure the loop advances the timers at their next expiration (call after parking an operation)."""
        dues = [t.next_expiration_ms() for t in self._timers]
        due = min((d for d in dues if d is not None), default=None)
        if due is None:
            return
        if self._handle is not None and self._due_ms is not None and self._due_ms <= due:
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = max(0.0, (due - self._clock.now_ms()) / 1000)
        self._due_ms = due
        self._handle = self._loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._due_ms = None
        try:
            for timer in self._timers:
                timer.advance_clock()
        except RuntimeError:  # shut down meanwhile
            return
        self.schedule()

    def shutdown(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self.fetch.shutdown()
        self.produce.shutdown()
