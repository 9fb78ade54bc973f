"""The broker's composition root: builds storage, cluster membership, replication, purgatories, handlers and
the listener; starts and stops them.

Lifecycle::

    broker = Broker(BrokerConfig.from_file("conf/broker.properties"))
    broker.start()            # returns once the listener accepts connections; broker.port is the bound port
    ...
    broker.stop()             # stop accepting, close connections, LogManager.shutdown() (closes every log,
                              # which snapshots its producer state)

Listeners: every entry of ``listeners`` is bound (TLS contexts and SASL settings per listener, see
:mod:`broker_runtime.security`); ``port``/``bootstrap`` name the first, :attr:`Broker.bound` all of them. Each
accepted connection gets a :class:`~broker_runtime.server.session.Session` of its listener. The advertised
endpoint of every listener goes into the context (Metadata answers per listener) and, in a cluster, into the
broker's registration; the inter-broker listener's endpoint is its main address there.

Threads: ``start()`` runs one event loop in a background thread ("pylog-broker"); every request, storage call,
timer expiry and periodic task runs on that thread, so none of the broker's state needs a lock. ``start``,
``stop`` and ``wait`` may be called from any other thread. ``stop`` is idempotent; the clean-shutdown marker is
written by ``LogManager.shutdown()`` only when every step before it succeeded.

Periodic tasks (Kafka's names): connections idle for ``connections.max.idle.ms`` are closed (checked every
quarter of it, see :mod:`.connection_quotas`); ``log.retention.check.interval.ms`` runs retention;
``log.flush.offset.checkpoint.interval.ms`` writes the checkpoints (the high watermarks included) and flushes
logs whose flush.ms elapsed; every ``replica.lag.time.max.ms / 2`` the ISR of each led partition is checked
(Kafka's isr-expiration task); every ``producer.id.expiration.check.interval.ms`` each log forgets producers
idle for ``producer.id.expiration.ms`` (Kafka's PeriodicProducerExpirationCheck); the transaction coordinator
aborts timed-out transactions every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` and expires
idle transactional ids every ``transaction.remove.expired.transaction.cleanup.interval.ms``; in a cluster the shared metadata is polled every ``POLL_INTERVAL_MS``.
Retention and the checkpoints (file renames, unlinks and fsyncs that a slow disk can stretch to seconds) run on
one "pylog-storage-task" thread, not on the loop: the log manager and its logs are thread-safe (each log's lock),
and those passes touch nothing else. A pass still running when its next turn comes delays that turn.

Two purgatories, each on its own hierarchical timing wheel read through the broker's clock: "Fetch"
(consumer and follower fetches waiting for data) and "Produce" (acks=-1 waiting for the high watermark).
After an append the fetch purgatory is checked for the partition; after a high-watermark move both are. The
timers are driven by the loop: after an operation is parked, one callback is scheduled at the earliest
``next_expiration_ms()`` of the two timers (Kafka's reaper threads, without the threads).

Cluster mode (``pylog.cluster.dir`` set, see :mod:`.cluster`): the broker registers its address in the shared
metadata once its listener is bound, then makes the partitions it hosts leaders or followers as the metadata
says; followers fetch from their leaders on the same event loop (one fetcher task per leader). After every
metadata change the transaction and group coordinators load the ``__transaction_state`` / ``__consumer_offsets``
partitions this node now leads and drop the ones it stopped leading (:mod:`.transactions`, :mod:`.groups`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from broker_runtime.controller import CONTROLLER_TICK_MS, Controller, ControllerConfig
from broker_runtime.coordinator.group import (
    CONSUMER_OFFSETS_TOPIC,
    CoordinatorTimer,
    GroupConfig,
    GroupCoordinator,
    local_appender,
)
from broker_runtime.coordinator.transaction import (
    TRANSACTION_STATE_TOPIC,
    TransactionConfig,
    TransactionCoordinator,
)
from broker_runtime.errors import ConfigError, ErrorCode, IllegalStateError, WaitTimeoutError
from broker_runtime.protocol.record_codec.walks import record_walk
from broker_runtime.protocol.records import CONTROL_COMMIT
from broker_runtime.purgatory.clock import Clock, SystemClock
from broker_runtime.purgatory.delayed_operation import DelayedOperationPurgatory
from broker_runtime.purgatory.timing_wheel import Timer
from broker_runtime.replication.fetcher import FetcherConfig
from broker_runtime.security.acl import authorizer_from_properties
from broker_runtime.security.jaas import parse_jaas
from broker_runtime.security.sasl_server import SaslServerAuthenticator
from broker_runtime.security.scram_credentials import ScramCredentialStore, credentials_path
from broker_runtime.security.secrets import redacted
from broker_runtime.security.tls import peer_principal, server_context
from broker_runtime.server.cluster import POLL_INTERVAL_MS, ClusterView, SharedFileCluster, SingleNodeCluster
from broker_runtime.server.config import KNOWN_BROKER_KEYS, BrokerConfig, Listener
from broker_runtime.server.connection_quotas import ConnectionQuotas
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.dispatcher import Dispatcher
from broker_runtime.server.dynamic_config import broker_log_config
from broker_runtime.server.groups import ClusterGroups
from broker_runtime.server.metrics import BrokerMetrics, MetricsServer, PartitionSnapshot, Snapshot
from broker_runtime.server.network import Connection, TlsConnection
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.session import Session
from broker_runtime.server.topics import TopicManager
from broker_runtime.server.transactions import ClusterTransactions
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.producer_state import ProducerIdManager

__all__ = ["ACLS_FILE", "DYNAMIC_CONFIGS_FILE", "PRODUCER_ID_STATE_FILE", "Broker"]

_log = logging.getLogger(__name__)

#: File in the first log directory recording the last producer id block handed out.
PRODUCER_ID_STATE_FILE = "producer-id-block.json"
#: File in the first log directory holding the dynamic broker configs of a single node (a cluster keeps them
#: in its metadata): ``{"": {cluster-wide defaults}, "<node id>": {this broker's}}``.
DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
#: File in the first log directory holding the ACL bindings of a single node (a cluster keeps them in its
#: metadata): a JSON list of ``AclBinding.to_json`` rows.
ACLS_FILE = "acls.json"


class Broker:
    """One Kafka-protocol broker (alone, or one node of a cluster on this machine); see the module docstring."""

    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._started = threading.Event()
        self._stopped = threading.Event()
        self._startup_error: BaseException | None = None
        self._host = config.listener.host
        self._scram_store = ScramCredentialStore(credentials_path(config.log_dirs, config.cluster_dir))
        self._port = -1
        self._connections: set[Connection] = set()
        #: listener -> sendfile sends cut short because their segment file shrank (loop thread).
        self._short_sends: dict[str, int] = {}
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_due_ms: int | None = None
        self.ctx: BrokerContext | None = None
        self._applied_view: object = None
        #: The controller logic of this node (cluster mode only; active only while it holds the role).
        self.controller: Controller | None = None
        #: The partition logs (set once started; its recovery counters say what startup recovery dropped).
        self.logs: LogManager | None = None
        #: The listener's connection limits and their refusal counters (set once started).
        self.quotas: ConnectionQuotas | None = None
        #: The Prometheus endpoint (``pylog.metrics.listener``), None while metrics are off.
        self.metrics_server: MetricsServer | None = None
        #: Listener name -> the (host, port) it is bound to (valid after ``start``), in ``listeners`` order.
        self.bound: dict[str, tuple[str, int]] = {}

    # -- public ---------------------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The bound port (valid after ``start``)."""
        return self._port

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the first listener."""
        return f"{self._host}:{self._port}"

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the Prometheus endpoint (the bound port when the config said 0), or None when off."""
        return None if self.metrics_server is None else self.metrics_server.address

    def listener_bootstrap(self, name: str) -> str:
        """``host:port`` the listener ``name`` is bound to (valid after ``start``)."""
        host, port = self.bound[name.upper()]
        return f"{host}:{port}"

    def protocol_of(self, name: str) -> str:
        return next(x.security_protocol for x in self.config.listeners if x.name == name.upper())

    def _short_send(self, conn: Connection) -> None:
        listener = conn.session.listener
        self._short_sends[listener] = self._short_sends.get(listener, 0) + 1

    def _connection_closed(self, conn: Connection) -> None:
        self._connections.discard(conn)
        if self.quotas is not None:
            self.quotas.release(conn)

    async def _bind_listener(
        self, loop: asyncio.AbstractEventLoop, listener: Listener, dispatcher: Dispatcher
    ) -> asyncio.Server:
        """Bind one listener: TLS on SSL/SASL_SSL, a SASL authenticator per connection on SASL_*."""
        cfg = self.config
        protocol = listener.security_protocol
        ssl_context = server_context(cfg.props, listener.name) if protocol in ("SSL", "SASL_SSL") else None
        sasl = protocol.startswith("SASL_")
        mechanisms = cfg.sasl_mechanisms(listener.name) if sasl else ()
        plain_users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            jaas = cfg.sasl_jaas(listener.name, "PLAIN")
            if jaas is not None:
                plain_users = parse_jaas("sasl.jaas.config", jaas).plain_users
            if not plain_users:
                _log.warning(
                    'listener %s enables SASL/PLAIN but no user_<name>="<password>" is configured in '
                    "listener.name.%s.plain.sasl.jaas.config: every PLAIN login will fail",
                    listener.name,
                    listener.name.lower(),
                )
        scram_store = self._scram_store
        max_reauth_ms = {m: cfg.connections_max_reauth_ms(listener.name, m) for m in mechanisms}
        quotas = self.quotas
        assert quotas is not None

        def connection() -> Connection:
            authenticator = (
                SaslServerAuthenticator(
                    mechanisms, plain_users=plain_users, scram_store=scram_store, max_reauth_ms=max_reauth_ms
                )
                if sasl
                else None
            )
            session = Session(listener.name, protocol, authenticator=authenticator)
            conn = (TlsConnection if ssl_context is not None else Connection)(
                dispatcher,
                cfg.socket_request_max_bytes,
                on_close=self._connection_closed,
                admit=quotas.admit,
                queued_max_requests=cfg.queued_max_requests,
                session=session,
                on_made=_tls_principal if ssl_context is not None else None,
                on_short_send=self._short_send,
                prelogin_max_frame_bytes=cfg.sasl_server_max_receive_size if sasl else None,
                ssl_context=ssl_context,
            )
            self._connections.add(conn)
            return conn

        # TLS is started by the connection once admitted (network.py), so limits count a socket at accept.
        return await loop.create_server(
            connection, listener.host or None, listener.port, reuse_address=True, backlog=128
        )

    def start(self, timeout_s: float = 60.0) -> Broker:
        """Start the loop thread and return once the listener accepts connections (or raise the startup error)."""
        if self._thread is not None:
            raise IllegalStateError(f"broker already started (listening on {self.bootstrap})")
        self._thread = threading.Thread(target=self._run, name="pylog-broker", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise WaitTimeoutError(f"broker did not start listening within {timeout_s} s")
        if self._startup_error is not None:
            self._thread.join(timeout_s)
            raise self._startup_error
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop serving and shut the storage down cleanly; idempotent."""
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise WaitTimeoutError(f"broker on {self.bootstrap} did not stop within {timeout_s} s")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the broker has stopped; True if it did within ``timeout_s``."""
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- loop thread ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start() or logged; the thread must end cleanly
            if not self._started.is_set():
                self._startup_error = exc
            else:
                _log.exception("broker stopped by an unexpected error")
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._stopped.set()
            self._started.set()

    async def _serve(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        log_config = LogConfig.from_properties(cfg.storage_properties())
        for directory in cfg.log_dirs:
            Path(directory).mkdir(parents=True, exist_ok=True)
        # In a cluster partitions may be replicated: their logs keep the checkpointed high watermark on restart
        # (replication moves it from there); a single node's high watermark is its log end offset.
        logs = LogManager(
            cfg.log_dirs, log_config, hw_follows_leo=cfg.cluster_dir is None, recover_all=cfg.log_recover_all
        )
        logs.startup()
        self.logs = logs
        if cfg.log_cleaner_enable:
            logs.start_cleaner(cfg.log_cleaner_backoff_ms)
        try:
            await self._serve_with(loop, logs, log_config)
        except BaseException:
            logs.close_without_shutdown()
            raise

    async def _serve_with(
        self, loop: asyncio.AbstractEventLoop, logs: LogManager, log_config: LogConfig
    ) -> None:
        cfg = self.config
        topics = TopicManager(logs, log_config)
        topics.load()
        cluster: SingleNodeCluster | SharedFileCluster
        if cfg.cluster_dir:
            cluster = SharedFileCluster(
                cfg.node_id,
                cfg.cluster_dir,
                cfg.cluster_id,
                topics,
                unclean_leader_election_enable=cfg.unclean_leader_election_enable,
            )
            shared = cluster
            table: dict[str, Any] = {}

            def cluster_topics() -> dict[str, Any]:
                view = shared.view
                if table.get("view") is not view:
                    table["view"] = view
                    table["topics"] = {n: (len(t.partitions), t.configs) for n, t in view.topics.items()}
                result: dict[str, Any] = table["topics"]
                return result

            topics.use_cluster(cluster_topics)
        else:
            cluster = SingleNodeCluster(
                cfg.node_id,
                topics,
                Path(cfg.log_dirs[0]) / DYNAMIC_CONFIGS_FILE,
                Path(cfg.log_dirs[0]) / ACLS_FILE,
            )

        def apply_broker_configs() -> None:
            """Dynamic broker configs of the metadata -> the log defaults of every open log (when changed)."""
            try:
                base = broker_log_config(cfg.storage_properties(), cluster.view.broker_configs, cfg.node_id)
            except ConfigError as exc:  # validated before it was written; a hand-edited file may still be bad
                _log.warning("dynamic broker configs not applied: %s", exc)
                return
            if base != topics.base:
                _log.info(
                    "node %d: applying dynamic broker configs %s",
                    cfg.node_id,
                    {
                        resource: redacted(values, known=KNOWN_BROKER_KEYS)
                        for resource, values in cluster.view.broker_configs.items()
                    },
                )
                topics.set_base(base)

        def resolve(node_id: int) -> tuple[str, int] | None:
            info = cluster.view.brokers.get(node_id)
            return None if info is None else (info.host, info.port)

        def confirm_leadership(why: str = "before appending") -> str | None:
            """A broker whose last heartbeat is older than half a session may have been fenced while it was not
            running (SIGSTOP, a stalled loop): it renews its session under the cluster lock and re-reads the
            metadata before it appends as a leader or beats again, so a replaced leader never appends as a
            zombie, whichever of its overdue tasks and requests runs first. None when confirmed, else why not."""
            if not isinstance(cluster, SharedFileCluster):
                return None
            age_ms = (time.monotonic() - cluster.session.last_beat) * 1000
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
                cluster.renew_session()
            except (WaitTimeoutError, OSError) as exc:
                return (
                    f"node {cfg.node_id} cannot confirm its leadership (cluster metadata unavailable: {exc})"
                )
            refresh_cluster()
            return None

        def heartbeat() -> None:
            if isinstance(cluster, SharedFileCluster) and confirm_leadership("at the next heartbeat") is None:
                cluster.session.beat()

        metrics = BrokerMetrics(cfg.listener.name) if cfg.metrics_listener is not None else None

        def alter_isr(topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
            """The cluster's AlterPartition, counted as an ISR shrink or expand once accepted."""
            hosted = replicas.partition(topic, partition)
            before = len(hosted.isr) if hosted is not None else len(isr)
            accepted = cluster.alter_isr(topic, partition, isr, leader_epoch)
            if accepted and metrics is not None:
                metrics.isr_changed(before, len(isr))
            return accepted

        replicas = ReplicaManager(
            topics,
            wall_ms=lambda: time.time_ns() // 1_000_000,
            node_id=cfg.node_id,
            now_ms=self._clock.now_ms,
            alter_isr=alter_isr if metrics is not None else cluster.alter_isr,
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
                security=cfg.inter_broker_security() if cfg.cluster_dir else None,
            ),
            resolve_broker=resolve,
            cluster_mode=cfg.cluster_dir is not None,
            confirm_leadership=confirm_leadership if cfg.cluster_dir else None,
        )
        purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Fetch", Timer(self._clock, name="fetch-purgatory")
        )
        produce_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Produce", Timer(self._clock, name="produce-purgatory")
        )

        def wake_fetches(topic: str, partition: int) -> None:
            purgatory.check_and_complete((topic, partition))

        def high_watermark_moved(topic: str, partition: int) -> None:
            produce_purgatory.check_and_complete((topic, partition))
            purgatory.check_and_complete((topic, partition))

        replicas.set_append_listener(wake_fetches)
        replicas.set_high_watermark_listener(high_watermark_moved)

        def partition_loaded() -> None:
            # a partition assigned here got its log: apply the latest metadata again, so its role and the
            # coordinators' loading reach it (the view may have changed while it loaded)
            view = self._applied_view
            if not isinstance(view, ClusterView):
                return
            replicas.apply_view(view)
            if cluster_txns is not None:
                cluster_txns.apply_view(view)
            if cluster_groups is not None:
                cluster_groups.apply_view(view)

        #: The cluster side of the transaction coordinator (its coordinator is set once built, below).
        cluster_txns = ClusterTransactions(lambda: self.ctx, cfg.node_id) if cfg.cluster_dir else None
        #: The cluster side of the group coordinator (likewise).
        cluster_groups = ClusterGroups(lambda: self.ctx, cfg.node_id) if cfg.cluster_dir else None

        def refresh_cluster() -> bool:
            if cfg.cluster_dir is None:
                return False
            cluster.refresh()
            view = cluster.view
            if view is self._applied_view:
                return False
            previous = self._applied_view
            self._applied_view = view
            deleted = set(view.deleted_topics)
            if isinstance(previous, ClusterView):
                deleted |= set(previous.topics) - set(view.topics)
            for name in topics.apply_cluster_view({n: t.configs for n, t in view.topics.items()}, deleted):
                replicas.forget_topic(name)
            apply_broker_configs()
            replicas.apply_view(view)
            if cluster_txns is not None:
                cluster_txns.apply_view(view)
            if cluster_groups is not None:
                cluster_groups.apply_view(view)
            return True

        replicas.set_loaded_listener(partition_loaded)
        producer_ids = ProducerIdManager(
            Path(cfg.log_dirs[0]) / PRODUCER_ID_STATE_FILE,
            allocate_block=cluster.allocate_producer_ids if isinstance(cluster, SharedFileCluster) else None,
        )
        txn_coordinator = _transaction_coordinator(
            cfg,
            topics,
            replicas,
            producer_ids.next_id,
            cluster_txns,
            lambda: None if self.ctx is None else self.ctx.group_coordinator,
        )
        if cluster_txns is None:
            txn_coordinator.load()
        else:
            cluster_txns.coordinator = txn_coordinator
        group_coordinator = _group_coordinator(
            cfg, topics, loop, CoordinatorTimer(self._clock, self._schedule_timer), cluster_groups
        )
        ctx = BrokerContext(
            config=cfg,
            topics=topics,
            replicas=replicas,
            fetch_purgatory=purgatory,
            clock=self._clock,
            loop=loop,
            next_producer_id=producer_ids.next_id,
            schedule_timer=self._schedule_timer,
            produce_purgatory=produce_purgatory,
            cluster=cluster,
            refresh_cluster=refresh_cluster,
            txn_coordinator=txn_coordinator,
            group_coordinator=group_coordinator,
            metrics=metrics,
            apply_broker_configs=apply_broker_configs,
            authorizer=authorizer_from_properties(cfg.props),
        )
        self.ctx = ctx
        self._schedule_timer()  # the session timers of the groups loaded above
        apply_broker_configs()
        # partitions of __transaction_state and __consumer_offsets led here since the start
        if cluster_txns is not None:
            cluster_txns.apply_view(cluster.view)
        if cluster_groups is not None:
            cluster_groups.apply_view(cluster.view)
        dispatcher = Dispatcher(ctx)
        quotas = self.quotas = ConnectionQuotas(
            cfg.max_connections,
            cfg.max_connections_per_ip,
            cfg.max_connections_per_ip_overrides,
            cfg.connections_max_idle_ms,
        )
        servers: list[asyncio.Server] = []
        try:
            for listener in cfg.listeners:
                servers.append(await self._bind_listener(loop, listener, dispatcher))
        except BaseException:
            for srv in servers:
                srv.close()
            raise
        for listener, srv in zip(cfg.listeners, servers, strict=True):
            port = int(srv.sockets[0].getsockname()[1])
            host = socket.getfqdn() if listener.host in ("", "0.0.0.0", "::") else listener.host
            self.bound[listener.name] = (host, port)
            advertised = cfg.advertised_listeners.get(listener.name)
            ctx.advertised_endpoints[listener.name] = (
                advertised.host if advertised else host,
                advertised.port if advertised and advertised.port else port,
            )
        self._host, self._port = self.bound[cfg.listener.name]
        ctx.advertised_host, ctx.advertised_port = ctx.advertised_endpoints[cfg.inter_broker_listener_name]
        cluster.register(ctx.advertised_host, ctx.advertised_port, dict(ctx.advertised_endpoints))
        refresh_cluster()
        if metrics is not None and cfg.metrics_listener is not None:

            def snapshot() -> Snapshot:
                return self._metrics_snapshot(logs, replicas, cluster.view, [purgatory, produce_purgatory])

            metrics.bind(loop, snapshot)
            try:
                self.metrics_server = MetricsServer(metrics, *cfg.metrics_listener)
            except OSError as exc:
                for srv in servers:
                    srv.close()
                raise OSError(
                    exc.errno,
                    f"pylog.metrics.listener={cfg.metrics_listener[0]}:{cfg.metrics_listener[1]}: "
                    f"cannot listen: {exc.strerror or exc}",
                ) from exc
            _log.info(
                "broker %d serves metrics on http://%s/metrics", cfg.node_id, self.metrics_server.address
            )
        # Retention and checkpoints: storage work off the loop (see the module docstring).
        storage_tasks = ThreadPoolExecutor(1, thread_name_prefix="pylog-storage-task")
        periodic = [
            loop.create_task(
                self._every(quotas.idle_check_interval_ms(), quotas.close_idle, "idle-connections")
            ),
            loop.create_task(
                self._every(
                    cfg.log_retention_check_interval_ms, logs.run_retention, "retention", storage_tasks
                )
            ),
            loop.create_task(
                self._every(
                    cfg.log_flush_offset_checkpoint_interval_ms,
                    lambda: _checkpoint(logs),
                    "checkpoint",
                    storage_tasks,
                )
            ),
            loop.create_task(
                self._every(
                    max(1, cfg.replica_lag_time_max_ms // 2), replicas.maybe_shrink_isr, "isr-expiration"
                )
            ),
            loop.create_task(
                self._every(
                    log_config.producer_id_expiration_check_interval_ms,
                    logs.remove_expired_producers,
                    "producer-expiration",
                )
            ),
        ]
        # Every node has a transaction coordinator (in a cluster it serves the partitions it leads).
        periodic += [
            loop.create_task(
                self._every(
                    cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                    txn_coordinator.abort_timed_out,
                    "transaction-abort",
                )
            ),
            loop.create_task(
                self._every(
                    cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
                    txn_coordinator.expire_transactional_ids,
                    "transactional-id-expiration",
                )
            ),
        ]
        # Every node has a group coordinator too (in a cluster it serves the groups of the partitions it leads).
        periodic.append(
            loop.create_task(
                self._every(
                    cfg.offsets_retention_check_interval_ms,
                    group_coordinator.expire_offsets,
                    "offsets-expiration",
                )
            )
        )
        if isinstance(cluster, SharedFileCluster):
            controller = Controller(
                cluster.store,
                cluster.session,
                ControllerConfig(
                    session_timeout_ms=cfg.broker_session_timeout_ms,
                    unclean_leader_election_enable=cfg.unclean_leader_election_enable,
                    auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
                    leader_imbalance_check_interval_ms=cfg.leader_imbalance_check_interval_seconds * 1000,
                    leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
                ),
            )
            self.controller = controller

            def control() -> None:
                if controller.tick():
                    refresh_cluster()

            # One round before the broker announces itself: the first broker of a cluster is the controller
            # by the time it serves, instead of up to a tick later (Metadata says -1 until some broker is).
            control()
            periodic += [
                loop.create_task(self._every(POLL_INTERVAL_MS, refresh_cluster, "cluster-metadata")),
                loop.create_task(self._every(cfg.broker_heartbeat_interval_ms, heartbeat, "heartbeat")),
                loop.create_task(self._every(CONTROLLER_TICK_MS, control, "controller")),
            ]
        walk, why = record_walk()
        if walk != "compiled":
            _log.warning(
                "broker %d validates and decodes records with the numpy record walk, not the compiled one: %s. "
                "The produce path with full validation is then about 2x slower for 1 MiB batches and 4x for batches "
                "of 100 records, decoding about 3.5x (README, Benchmarks); metric pylog_record_walk_compiled is 0",
                cfg.node_id,
                why,
            )
        _log.info(
            "broker %d listening on %s:%d, log dirs %s",
            cfg.node_id,
            self._host,
            self._port,
            list(cfg.log_dirs),
        )
        for name, (host, port) in self.bound.items():
            _log.info(
                "broker %d listener %s (%s) bound to %s:%d",
                cfg.node_id,
                name,
                self.protocol_of(name),
                host,
                port,
            )
        self._started.set()
        assert self._stop_event is not None
        try:
            await self._stop_event.wait()
        finally:
            _log.info("broker %d stopping", cfg.node_id)
            if self.metrics_server is not None:
                self.metrics_server.close()
            if isinstance(cluster, SharedFileCluster):
                cluster.controlled_shutdown()
            for srv in servers:
                srv.close()
            for conn in list(self._connections):
                conn.close("broker stopping", level=logging.INFO)
            for task in periodic:
                task.cancel()
            if self._timer_handle is not None:
                self._timer_handle.cancel()
            if cluster_txns is not None:
                await cluster_txns.stop()
            with contextlib.suppress(Exception):
                await replicas.stop_fetchers()
            purgatory.shutdown()
            produce_purgatory.shutdown()
            group_coordinator.shutdown()
            for srv in servers:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(srv.wait_closed(), 5)
            storage_tasks.shutdown(wait=True)  # a pass under way finishes before the logs close
            topics.stop_loads()  # likewise a partition load
            logs.shutdown()
            if isinstance(cluster, SharedFileCluster):
                cluster.close()
            _log.info("broker %d stopped cleanly", cfg.node_id)

    async def _every(
        self, interval_ms: int, action: Any, name: str, executor: ThreadPoolExecutor | None = None
    ) -> None:
        """Run ``action`` every ``interval_ms``: on the loop, or on ``executor``'s thread (awaited)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                if executor is None:
                    action()
                else:
                    await loop.run_in_executor(executor, action)
            except Exception:
                _log.exception("periodic task %s failed", name)

    def _schedule_timer(self) -> None:
        """Make sure the loop advances the purgatory timer at its next expiration."""
        ctx, loop = self.ctx, self._loop
        if ctx is None or loop is None:
            return
        dues = [p.next_expiration_ms() for p in self._purgatories(ctx)]
        due = min((d for d in dues if d is not None), default=None)
        if due is None:
            return
        if self._timer_handle is not None and self._timer_due_ms is not None and self._timer_due_ms <= due:
            return
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        delay_s = max(0.0, (due - self._clock.now_ms()) / 1000)
        self._timer_due_ms = due
        self._timer_handle = loop.call_later(delay_s, self._fire_timer)

    def _fire_timer(self) -> None:
        self._timer_handle = None
        self._timer_due_ms = None
        ctx = self.ctx
        if ctx is None:
            return
        try:
            for purgatory in self._purgatories(ctx):
                purgatory.advance_clock()
        except RuntimeError:  # shut down meanwhile
            return
        self._schedule_timer()

    def _metrics_snapshot(
        self,
        logs: LogManager,
        replicas: ReplicaManager,
        view: Any,
        purgatories: list[DelayedOperationPurgatory[Any]],
    ) -> Snapshot:
        """The scrape-time gauges (event-loop thread; per partition, nothing per record)."""
        cluster_mode = self.config.cluster_dir is not None
        parts: list[PartitionSnapshot] = []
        for (topic, index), log in sorted(logs.all_logs().items()):
            hosted = replicas.partition(topic, index) if cluster_mode else None
            leader = hosted.is_leader if hosted is not None else not cluster_mode
            under = hosted is not None and leader and len(hosted.isr) < len(hosted.replicas)
            under_min = hosted is not None and leader and len(hosted.isr) < hosted.effective_min_isr()
            parts.append(
                PartitionSnapshot(
                    topic,
                    index,
                    log.log_start_offset,
                    log.log_end_offset,
                    log.size_bytes,
                    len(log.segments),
                    leader,
                    under,
                    under_min,
                )
            )
        offline = sum(1 for t in view.topics.values() for p in t.partitions if p.leader < 0)
        controller = self.controller
        return Snapshot(
            partitions=parts,
            purgatories={p.name: (p.watched, p.delayed) for p in purgatories},
            offline_partitions=offline,
            active_controller=controller is None or controller.active,
            connections=len(self._connections),
            periodic_failures=dict(logs.periodic_failures),
            roll_flush_failures=dict(logs.roll_flush_failures),
            sendfile_short_sends=dict(self._short_sends),
            recovery_truncations=logs.recovery_truncations,
            partition_load_failures=0 if self.ctx is None else self.ctx.topics.load_failures,
            recovery_bytes_dropped=logs.recovery_bytes_dropped,
            connections_refused=dict(self.quotas.refused) if self.quotas is not None else {},
            connections_idle_closed=self.quotas.idle_closed if self.quotas is not None else 0,
            **self._transaction_counters(),
        )

    def _transaction_counters(self) -> dict[str, Any]:
        coordinator = None if self.ctx is None else self.ctx.txn_coordinator
        if coordinator is None:
            return {}
        return {
            "transaction_state_write_failures": dict(coordinator.state_write_failures),
            "transaction_requests_parked": coordinator.completion_waits,
            "transaction_requests_parked_timed_out": coordinator.completion_wait_timeouts,
        }

    @staticmethod
    def _purgatories(ctx: BrokerContext) -> list[DelayedOperationPurgatory[Any] | CoordinatorTimer]:
        """The timers this broker advances on its event loop (the purgatories' and the group coordinator's)."""
        found: list[DelayedOperationPurgatory[Any] | CoordinatorTimer] = [ctx.fetch_purgatory]
        if ctx.produce_purgatory is not None:
            found.append(ctx.produce_purgatory)
        if ctx.group_coordinator is not None:
            found.append(ctx.group_coordinator.timer)
        return found


def _transaction_coordinator(
    cfg: BrokerConfig,
    topics: TopicManager,
    replicas: ReplicaManager,
    next_producer_id: Any,
    cluster_txns: ClusterTransactions | None,
    group_coordinator: Callable[[], GroupCoordinator | None],
) -> TransactionCoordinator:
    """The transaction coordinator. Single node: its state in the local ``__transaction_state`` partitions
    (created on first use with cleanup.policy=compact; the log cleaner compacts them), its markers appended to
    the local partition logs. Cluster: state written through replication and markers sent to the
    partition leaders by ``cluster_txns`` (see :mod:`.transactions`)."""

    def state_log(partition: int, create: bool) -> PartitionLog | None:
        log = topics.get_log(TRANSACTION_STATE_TOPIC, partition)
        if cluster_txns is not None:
            return log  # created by the cluster metadata (FindCoordinator), hosted through apply_view
        if log is None and create and topics.partition_count(TRANSACTION_STATE_TOPIC) is None:
            topics.create(
                TRANSACTION_STATE_TOPIC,
                cfg.transaction_state_log_num_partitions,
                {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"},
            )
            log = topics.get_log(TRANSACTION_STATE_TOPIC, partition)
        return log

    def write_markers(
        producer_id: int,
        epoch: int,
        coordinator_epoch: int,
        control_type: int,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        hold = cfg.test_transaction_markers_hold_file
        if (
            hold and Path(hold).exists()
        ):  # fault injection for tests: the writes fail, the periodic check retries
            return dict.fromkeys(partitions, ErrorCode.KAFKA_STORAGE_ERROR)
        results = {
            (topic, p): replicas.write_txn_marker(
                topic, p, producer_id, epoch, coordinator_epoch, control_type
            ).error
            for topic, p in partitions
        }
        # A marker on __consumer_offsets ends the producer's pending offsets there (Kafka's
        # onTransactionCompleted). At start (before the group coordinator exists) its replay reads the marker.
        groups = group_coordinator()
        if groups is not None:
            for (topic, p), code in results.items():
                if topic == CONSUMER_OFFSETS_TOPIC and code == ErrorCode.NONE:
                    groups.complete_txn(producer_id, p, control_type == CONTROL_COMMIT)
        return results

    return TransactionCoordinator(
        TransactionConfig(
            num_partitions=cfg.transaction_state_log_num_partitions,
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            transactional_id_expiration_ms=cfg.transactional_id_expiration_ms,
            abort_timed_out_check_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_check_interval_ms=cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
        ),
        state_log,
        write_markers,
        next_producer_id,
        lambda: time.time_ns() // 1_000_000,
        lambda topic: topics.partition_count(topic) is not None,
        append_state=None if cluster_txns is None else cluster_txns.append_state,
        send_markers=None if cluster_txns is None else cluster_txns.send_markers,
    )


def _group_coordinator(
    cfg: BrokerConfig,
    topics: TopicManager,
    loop: asyncio.AbstractEventLoop,
    timer: CoordinatorTimer,
    cluster_groups: ClusterGroups | None,
) -> GroupCoordinator:
    """The group coordinator. Single node: its state in the local ``__consumer_offsets`` partitions (created
    on first use, ``cleanup.policy=compact``: the log cleaner keeps the latest record per key once it runs),
    replayed now. Cluster: the partitions this node leads, loaded and written through replication by
    ``cluster_groups`` (see :mod:`.groups`)."""

    def offsets_log(partition: int, create: bool) -> PartitionLog | None:
        log = topics.get_log(CONSUMER_OFFSETS_TOPIC, partition)
        if cluster_groups is not None:
            return log  # created by the cluster metadata (FindCoordinator), hosted through apply_view
        if log is None and create and topics.partition_count(CONSUMER_OFFSETS_TOPIC) is None:
            topics.create(
                CONSUMER_OFFSETS_TOPIC,
                cfg.offsets_topic_num_partitions,
                {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"},
            )
            log = topics.get_log(CONSUMER_OFFSETS_TOPIC, partition)
        return log

    coordinator = GroupCoordinator(
        GroupConfig(
            num_partitions=cfg.offsets_topic_num_partitions,
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
        ),
        offsets_log,
        loop,
        topics.partition_count,
        timer=timer,
        append_records=local_appender(offsets_log)
        if cluster_groups is None
        else cluster_groups.append_records,
        await_replication=_replicated_at_once if cluster_groups is None else cluster_groups.await_replication,
    )
    if cluster_groups is None:
        coordinator.load()
    else:
        cluster_groups.coordinator = coordinator
    return coordinator


def _replicated_at_once(partition: int, then: Callable[[ErrorCode | None], None]) -> None:
    """A single node's ``await_replication``: its own append is all there is to wait for."""
    then(None)


def _checkpoint(logs: LogManager) -> None:
    logs.flush_dirty_logs()
    logs.checkpoint()


def _tls_principal(conn: Connection, transport: asyncio.Transport) -> None:
    """SSL listeners: the verified client certificate's DN becomes the principal (Kafka's default builder)."""
    principal = peer_principal(transport.get_extra_info("ssl_object"))
    if principal is not None and conn.session.authenticator is None:
        conn.session.principal = principal
