"""The broker: its lifecycle around one composition of components (see :mod:`.compose`).

Threads: ``start()`` runs one event loop in a background thread ("pylog-broker"); every request, storage call,
timer expiry and periodic task runs on that thread, so none of the broker's state needs a lock. ``start``,
``stop`` and ``wait`` may be called from any other thread. ``stop`` is idempotent; the clean-shutdown marker is
written by ``LogManager.shutdown()`` only when every step before it succeeded. Retention and the checkpoints (file
renames, unlinks and fsyncs that a slow disk can stretch to seconds) run on one "pylog-storage-task" thread, not
on the loop: the log manager and its logs are thread-safe (each log's lock), and those passes touch nothing else.
A pass still running when its next turn comes delays that turn. The first read of an OAUTHBEARER listener's JWKS
(an HTTP request, :mod:`broker_runtime.security.jwks`) runs on a worker thread while the start waits for it: the
listeners bound before it answer meanwhile.

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

What this module does: the lifecycle (recover the logs, build the components, bind the listeners, register,
run the periodic tasks, stop in order). The components are built by :func:`~.compose.compose` into one
:class:`~.context.BrokerContext`; where the broker runs (a single node, a node of a cluster on this host:
``pylog.cluster.dir``) is its :class:`~.context.Deployment` (:mod:`.single_node`, :mod:`.local_cluster`).

Periodic tasks (Kafka's names, :func:`~.compose.periodic_tasks`): connections idle for
``connections.max.idle.ms`` are closed (checked every quarter of it, see :mod:`.connection_quotas`);
``log.retention.check.interval.ms`` runs retention; ``log.flush.offset.checkpoint.interval.ms`` writes the
checkpoints (the high watermarks included) and flushes logs whose flush.ms elapsed; every
``replica.lag.time.max.ms / 2`` the ISR of each led partition is checked (Kafka's isr-expiration task); every
``producer.id.expiration.check.interval.ms`` each log forgets producers idle for ``producer.id.expiration.ms``
(Kafka's PeriodicProducerExpirationCheck); the transaction coordinator aborts timed-out transactions every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` and expires idle transactional ids every
``transaction.remove.expired.transaction.cleanup.interval.ms``; the group coordinator expires offsets every
``offsets.retention.check.interval.ms``. A cluster node adds metadata polling, its heartbeat and the controller.

A failed log directory (Kafka's ``LogManager.handleLogDirFailure`` with its only log dir gone): a write in a log
directory that the disk refused (an OSError: ENOSPC on a full disk, EIO, EROFS, a directory gone), on whichever
thread it ran (the loop's appends, the storage thread's checkpoints and retention, the cleaner, the roll flushes;
the list is in :mod:`broker_runtime.storage.log_dir_failure`), stops the broker at once, as Kafka's
``Exit.halt(1)`` after "Shutdown broker because all log dirs in ... have failed" (CRITICAL line): no controlled
shutdown (its leaderships move when its liveness lapses, as for a crash), no flush, no checkpoint, no
clean-shutdown marker, so the next start recovers every log from its files (a batch written in part is cut
there). :attr:`Broker.failure` says why it stopped; ``pylog-broker`` then exits with status 1. The failing write
marks the log manager offline before it returns (its ``LogDirFailureChannel``): from then on every other append,
fetch, follower append, cleaning pass, roll flush and checkpoint write is refused before any I/O and answered
KAFKA_STORAGE_ERROR; the channel then calls :meth:`Broker._log_dir_failed` on the failing thread, which logs, leaves
the record for launchers and wakes the loop (thread-safely) to stop.

Stop order: the metrics endpoint, controlled shutdown (a cluster node hands its leaderships over), listeners and
connections, periodic tasks, the purgatory timers, the markers channel, the follower fetchers, the purgatories,
the group coordinator's timers, the storage thread (a pass under way finishes), partition loads, the logs
(``LogManager.shutdown``, which snapshots producer state and writes the clean-shutdown marker), the deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from broker_runtime.errors import IllegalStateError, WaitTimeoutError
from broker_runtime.fsutil import record_log_dir_failure
from broker_runtime.protocol.framing import FramePool
from broker_runtime.protocol.record_codec.walks import record_walk
from broker_runtime.purgatory.clock import Clock, SystemClock
from broker_runtime.security.jaas import parse_jaas
from broker_runtime.security.jwks import JwksKeys
from broker_runtime.security.sasl_server import SaslServerAuthenticator
from broker_runtime.security.scram_credentials import ScramCredentialStore, credentials_path
from broker_runtime.security.tls import peer_principal
from broker_runtime.server.config import BrokerConfig, Listener
from broker_runtime.server.connection_quotas import ConnectionQuotas
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.group_lag import GroupLagReader
from broker_runtime.server.metrics import MetricsServer, PartitionSnapshot, Snapshot
from broker_runtime.server.network import Connection, TlsConnection
from broker_runtime.server.node.compose import PurgatoryTimer, compose, periodic_tasks
from broker_runtime.server.node.dispatcher import Dispatcher
from broker_runtime.server.node.single_node import ACLS_FILE, DYNAMIC_CONFIGS_FILE, PRODUCER_ID_STATE_FILE
from broker_runtime.server.oauthbearer_listener import oauthbearer_validator
from broker_runtime.server.session import Session
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager

__all__ = ["ACLS_FILE", "DYNAMIC_CONFIGS_FILE", "PRODUCER_ID_STATE_FILE", "Broker"]

_log = logging.getLogger(__name__)


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
        #: listener -> its OAUTHBEARER JWKS (each with its refresher thread, closed at stop).
        self._jwks: dict[str, JwksKeys] = {}
        self._port = -1
        self._connections: set[Connection] = set()
        #: The read buffers of every connection of this broker (its event loop), see broker_runtime.server.network.
        self._frame_pool = FramePool()
        #: listener -> sendfile sends cut short because their segment file shrank (loop thread).
        self._short_sends: dict[str, int] = {}
        #: The broker's components (set once started).
        self.ctx: BrokerContext | None = None
        #: The partition logs (set once started; its recovery counters say what startup recovery dropped).
        self.logs: LogManager | None = None
        #: The listener's connection limits and their refusal counters (set once started).
        self.quotas: ConnectionQuotas | None = None
        #: The Prometheus endpoint (``pylog.metrics.listener``), None while metrics are off.
        self.metrics_server: MetricsServer | None = None
        #: Listener name -> the (host, port) it is bound to, in ``listeners`` order: each entry from the moment its
        #: listener is bound (while ``start`` may still bind later ones), all of them after ``start``.
        self.bound: dict[str, tuple[str, int]] = {}
        #: Why the broker stopped by itself (its log directory failed), None otherwise.
        self.failure: str | None = None

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
        assert self.ctx is not None
        reconfiguration = self.ctx.reconfiguration
        tls = protocol in ("SSL", "SASL_SSL")
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
        oauth_validator = None
        if "OAUTHBEARER" in mechanisms:
            # Reads the JWKS before this listener serves (as Kafka's broker reads it before it starts) and starts
            # its refresher; the read (an HTTP request, up to its timeout) runs on a worker thread, so the
            # listeners already bound keep answering meanwhile.
            oauth_validator, jwks = await asyncio.to_thread(
                oauthbearer_validator, cfg.props, listener.name, listener.host, start=True
            )
            if jwks is not None:
                self._jwks[listener.name] = jwks
        quotas = self.quotas
        assert quotas is not None

        def connection() -> Connection:
            authenticator = (
                SaslServerAuthenticator(
                    mechanisms,
                    plain_users=plain_users,
                    scram_store=scram_store,
                    max_reauth_ms=max_reauth_ms,
                    oauth_validator=oauth_validator,
                )
                if sasl
                else None
            )
            session = Session(listener.name, protocol, authenticator=authenticator)
            # Read at accept: a key store reloaded at runtime serves the connections accepted from then on.
            ssl_context = reconfiguration.tls_context(listener.name) if tls else None
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
                frame_pool=self._frame_pool,
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
        logs.dir_failure.on_offline = self._log_dir_failed  # any failed write from here on halts the broker
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
        timer = PurgatoryTimer(self._clock, loop)
        ctx = self.ctx = compose(cfg, self._clock, loop, logs, log_config, timer)
        ctx.replicas.on_log_dir_failure = logs.dir_failure.maybe_add_offline_log_dir
        deployment = ctx.deployment
        quotas = self.quotas = ConnectionQuotas(
            cfg.max_connections,
            cfg.max_connections_per_ip,
            cfg.max_connections_per_ip_overrides,
            cfg.connections_max_idle_ms,
        )
        ctx.reconfiguration.attach_quotas(quotas)  # the dynamic limits, if any
        quotas.creation_throttle = ctx.client_quotas.connection_throttle_ms
        servers = await self._bind_listeners(loop, ctx)
        deployment.store.register(ctx.advertised_host, ctx.advertised_port, dict(ctx.advertised_endpoints))
        ctx.refresh_cluster()
        lag_probe = None
        if ctx.metrics is not None and cfg.metrics_listener is not None:
            metrics = ctx.metrics
            group_lag = GroupLagReader(cfg.metrics_consumer_lag_max_partitions)
            metrics.bind(loop, lambda: self._metrics_snapshot(logs, ctx, timer, group_lag))
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
            if cfg.metrics_event_loop_lag_interval_ms:
                from broker_runtime.server.loop_lag import LoopLagProbe  # only with the probe on

                lag_probe = LoopLagProbe(loop, cfg.metrics_event_loop_lag_interval_ms, metrics.loop_lagged)
                lag_probe.start()
        # Retention and checkpoints: storage work off the loop (see the module docstring).
        storage_tasks = ThreadPoolExecutor(1, thread_name_prefix="pylog-storage-task")
        periodic = [
            loop.create_task(
                self._every(task.interval_ms, task.action, task.name, storage_tasks if task.storage else None)
            )
            for task in periodic_tasks(ctx, logs, log_config, quotas) + deployment.periodic_tasks()
        ]
        self._announce()
        self._started.set()
        assert self._stop_event is not None
        try:
            await self._stop_event.wait()
        finally:
            halted = self.failure is not None
            _log.info("broker %d stopping", cfg.node_id)
            if self.metrics_server is not None:
                self.metrics_server.close()
            if lag_probe is not None:
                lag_probe.stop()
            if not halted:
                deployment.controlled_shutdown()
            for srv in servers:
                srv.close()
            for conn in list(self._connections):
                conn.close("broker stopping", level=logging.INFO)
            for task in periodic:
                task.cancel()
            timer.shutdown()
            await ctx.txn_markers.stop()
            with contextlib.suppress(Exception):
                await ctx.replicas.stop_fetchers()
            ctx.group_coordinator.shutdown()
            for srv in servers:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(srv.wait_closed(), 5)
            storage_tasks.shutdown(wait=True)  # a pass under way finishes before the logs close
            ctx.topics.stop_loads()  # likewise a partition load
            if halted:
                logs.close_without_shutdown()  # Kafka halts: the next start recovers from the files
            else:
                logs.shutdown()
            deployment.close()
            for jwks in self._jwks.values():
                jwks.close()
            if self.failure is not None:  # also a checkpoint refused by the shutdown itself
                _log.critical("broker %d halted: %s", cfg.node_id, self.failure)
            else:
                _log.info("broker %d stopped cleanly", cfg.node_id)

    async def _bind_listeners(
        self, loop: asyncio.AbstractEventLoop, ctx: BrokerContext
    ) -> list[asyncio.Server]:
        """Bind every listener; record the bound and advertised endpoints (the context's, for Metadata)."""
        cfg, dispatcher = self.config, Dispatcher(ctx)
        servers: list[asyncio.Server] = []
        try:
            for listener in cfg.listeners:
                srv = await self._bind_listener(loop, listener, dispatcher)
                servers.append(srv)
                # Recorded at once: this listener serves while a later one may still be binding (an OAUTHBEARER
                # listener's first JWKS read).
                port = int(srv.sockets[0].getsockname()[1])
                host = socket.getfqdn() if listener.host in ("", "0.0.0.0", "::") else listener.host
                self.bound[listener.name] = (host, port)
        except BaseException:
            for srv in servers:
                srv.close()
            self.bound.clear()
            raise
        for listener in cfg.listeners:
            host, port = self.bound[listener.name]
            advertised = cfg.advertised_listeners.get(listener.name)
            ctx.advertised_endpoints[listener.name] = (
                advertised.host if advertised else host,
                advertised.port if advertised and advertised.port else port,
            )
        self._host, self._port = self.bound[cfg.listener.name]
        ctx.advertised_host, ctx.advertised_port = ctx.advertised_endpoints[cfg.inter_broker_listener_name]
        return servers

    def _announce(self) -> None:
        cfg = self.config
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

    def _log_dir_failed(self, reason: str, exc: OSError) -> None:
        """The log manager's directories went offline (``reason``: what was written and the error, from its
        :class:`~broker_runtime.storage.log_dir_failure.LogDirFailureChannel`, which calls this once, on the
        failing thread: the loop, the storage thread, the cleaner or a roll flush). The broker's only log
        directories have failed: log it, leave the record for launchers, and stop serving without a clean shutdown
        (see the module docstring)."""
        dirs = ", ".join(str(d) for d in self.config.log_dirs)
        self.failure = f"all log dirs in {dirs} have failed: {reason}"
        critical = f"Shutdown broker {self.config.node_id} because {self.failure}"
        _log.critical("%s", critical)
        for log_dir in self.config.log_dirs:  # what a launcher reads before starting a broker here again
            try:
                record_log_dir_failure(log_dir, critical, exc.errno)
            except OSError as marker_exc:
                _log.warning("could not record the failure in %s: %s", log_dir, marker_exc)
        loop, event = self._loop, self._stop_event
        if loop is None or event is None:
            return  # no loop to stop (the event is made before the log manager starts)
        if threading.current_thread() is self._thread:
            event.set()
        else:  # an asyncio.Event is the loop's alone
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: it stopped anyway
                loop.call_soon_threadsafe(event.set)

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
                if self.failure is None:
                    _log.exception("periodic task %s failed", name)
                else:  # its failed write was the log dir's failure, logged once (CRITICAL); the broker stops
                    _log.debug("periodic task %s failed after the log dirs failed", name, exc_info=True)

    def _metrics_snapshot(
        self, logs: LogManager, ctx: BrokerContext, timer: PurgatoryTimer, group_lag: GroupLagReader
    ) -> Snapshot:
        """The scrape-time gauges (event-loop thread; per partition, nothing per record)."""
        replicated = ctx.deployment.replicated
        parts: list[PartitionSnapshot] = []
        for (topic, index), log in sorted(logs.all_logs().items()):
            hosted = ctx.replicas.partition(topic, index) if replicated else None
            leader = hosted.is_leader if hosted is not None else not replicated
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
        view = ctx.cluster.view
        offline = sum(1 for t in view.topics.values() for p in t.partitions if p.leader < 0)
        return Snapshot(
            partitions=parts,
            purgatories={p.name: (p.watched, p.delayed) for p in timer.purgatories},
            offline_partitions=offline,
            active_controller=ctx.deployment.controller_active,
            connections=len(self._connections),
            periodic_failures=dict(logs.periodic_failures),
            roll_flush_failures=dict(logs.roll_flush_failures),
            sendfile_short_sends=dict(self._short_sends),
            jwks_refresh_failures={name: k.refresh_failures for name, k in self._jwks.items()},
            jwks_refreshes={name: k.refreshes for name, k in self._jwks.items()},
            recovery_truncations=logs.recovery_truncations,
            partition_load_failures=ctx.topics.load_failures,
            recovery_bytes_dropped=logs.recovery_bytes_dropped,
            connections_refused=dict(self.quotas.refused) if self.quotas is not None else {},
            client_quotas={s.key: s.snapshot(ctx.client_quotas.now_ms()) for s in ctx.client_quotas.sensors},
            quota_sensors_evicted={s.key: s.evicted for s in ctx.client_quotas.sensors},
            connections_idle_closed=self.quotas.idle_closed if self.quotas is not None else 0,
            transaction_state_write_failures=dict(ctx.txn_coordinator.state_write_failures),
            transaction_requests_parked=ctx.txn_coordinator.completion_waits,
            transaction_requests_parked_timed_out=ctx.txn_coordinator.completion_wait_timeouts,
            group_lag=group_lag.read(ctx.group_coordinator.list_groups(), logs.get_log),
            fetch_sessions=len(ctx.fetch_sessions),
            fetch_session_partitions=ctx.fetch_sessions.partitions_cached,
            fetch_session_evictions=ctx.fetch_sessions.evictions,
            fetch_session_incremental_fetches=ctx.fetch_sessions.incremental_fetches,
            fetch_session_oversize_closed=ctx.fetch_sessions.oversize_closed,
        )


def _tls_principal(conn: Connection, transport: asyncio.Transport) -> None:
    """SSL listeners: the verified client certificate's DN becomes the principal (Kafka's default builder)."""
    principal = peer_principal(transport.get_extra_info("ssl_object"))
    if principal is not None and conn.session.authenticator is None:
        conn.session.principal = principal
