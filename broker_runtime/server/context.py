"""The broker's components, gathered in one :class:`BrokerContext`: what a request handler may use.

Threading: the context and everything it holds is used from the event-loop thread only.

The composition (:mod:`.compose`) builds one context at start, in dependency order (topics, the deployment,
replica manager, purgatories, then the two coordinators, which are set on the context right after it is made and
before anything is served), and the dispatcher passes it to every handler call. Handlers are plain functions
``handle(ctx, header, body) -> HandlerResult`` (one module per API key under ``handlers/``); they never touch
sockets. A handler returns the response body as a dict (Kafka's CamelCase field names), ``None`` for "send no
response" (Produce with acks=0), :data:`CLOSE_CONNECTION` to drop the connection, or an ``asyncio.Future`` that
resolves to one of those later (delayed fetch, acks=-1 produce).

Where the broker runs is the context's :class:`Deployment`, the one seam between the composition and the
deployment; handlers reach its metadata as ``ctx.cluster`` and never ask which deployment it is.

A broker is built the same way wherever it runs (:mod:`.compose`); what differs is behind :class:`Deployment`:

============================  ==========================================  ===========================================
supplies                      :class:`~.single_node.SingleNode`           :class:`~.local_cluster.LocalCluster`
============================  ==========================================  ===========================================
metadata and admin writes     :class:`~.cluster.SingleNodeCluster`: the   :class:`~.cluster.SharedFileCluster`: the
(``store``, ``ctx.cluster``)  local topics, this node leads everything    shared ``cluster.json`` of one host
ISR changes (``alter_isr``)   only ``[this node]`` is accepted            AlterPartition on the shared metadata
liveness (``heartbeat``,      nothing to prove: always confirmed          a session renewed every
``confirm_leadership``)                                                   ``broker.heartbeat.interval.ms``; a leader
                                                                          whose session may have lapsed renews it
                                                                          before it appends
applying metadata             nothing changes behind the broker's back    each new view to topics, replicas, broker
(``refresh``)                                                             configs and both coordinators (Kafka's
                                                                          BrokerMetadataPublisher)
internal-topic records        the local log, topic made on first use      the leader's replicated append (acks=-1)
(``internal_topic``)
transaction markers           written to the local logs before EndTxn     sent to each partition's leader in the
(``marker_sender``)           answers                                     background (WriteTxnMarkers)
coordinator placement         this node, for every key                    the leader of the key's internal partition
(``find_coordinator``)                                                    (the topic made on the first lookup)
coordinator ownership         every partition at epoch 0, at start        the partitions led here, after each view
producer-id blocks            a local state file                          blocks taken from the shared metadata
periodic tasks                none                                        metadata polling, heartbeat, controller
============================  ==========================================  ===========================================

A single node is a cluster of one: the coordinators, handlers and replica manager have one code path each and
never ask which deployment they run in. A multi-host metadata store would be a third implementation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_runtime.coordinator.group import GroupCoordinator
from broker_runtime.coordinator.internal_topic import InternalTopic
from broker_runtime.coordinator.transaction import MarkerDone, MarkerRequest, TransactionCoordinator
from broker_runtime.errors import ErrorCode
from broker_runtime.purgatory.clock import Clock
from broker_runtime.purgatory.delayed_operation import DelayedOperationPurgatory
from broker_runtime.security.acl import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from broker_runtime.server.cluster import ClusterStore
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.fetch_sessions import FetchSessionCache
from broker_runtime.server.metrics import BrokerMetrics
from broker_runtime.server.network import CLOSE
from broker_runtime.server.quota_manager import ClientQuotas
from broker_runtime.server.reconfigure import Reconfiguration
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.session import Session
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.producer_state import ProducerIdManager

__all__ = [
    "CLOSE_CONNECTION",
    "BrokerContext",
    "Deployment",
    "HandlerResult",
    "MarkerChannel",
    "Periodic",
    "Placement",
    "answer_after_loads",
]

#: Returned by a handler that refuses to answer: the connection is closed (one log line says why).
CLOSE_CONNECTION = CLOSE

_log = logging.getLogger(__name__)

HandlerResult = Any  # dict[str, Any] | None | CLOSE | asyncio.Future[dict[str, Any] | None | CLOSE]


@dataclass(frozen=True)
class Periodic:
    """A task the broker runs every ``interval_ms`` on its loop (or on its storage thread, ``storage``)."""

    interval_ms: int
    action: Callable[[], object]
    name: str
    storage: bool = False


#: FindCoordinator's answer for one key: (error, message, node id, host, port) of its coordinator.
Placement = tuple[ErrorCode, str | None, int, str, int]


class MarkerChannel(Protocol):
    """Where the transaction coordinator's markers go: ``send`` is its
    :data:`~broker_runtime.coordinator.transaction.MarkerSender`."""

    def send(self, request: MarkerRequest, done: MarkerDone) -> None: ...

    async def stop(self) -> None:
        """Stop sending (markers not written yet are completed by the next coordinator)."""
        ...


class Deployment(Protocol):
    """Where this broker runs (see the module docstring for what each implementation supplies). Every method is
    called on the event-loop thread (``close`` after the loop stopped serving)."""

    @property
    def store(self) -> ClusterStore:
        """The cluster metadata and its admin writes (what handlers reach as ``ctx.cluster``)."""
        ...

    @property
    def replicated(self) -> bool:
        """Partitions may have other replicas: hosted as the metadata says, high watermarks from followers."""
        ...

    @property
    def controller_active(self) -> bool:
        """This node holds the controller role (a single node always does)."""
        ...

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        """The leader's ISR change (Kafka's AlterPartition); False when refused or not recorded."""
        ...

    def confirm_leadership(self, why: str = "before appending") -> str | None:
        """None when this node may act as a leader now, else why not (its session could not be renewed)."""
        ...

    def heartbeat(self) -> None:
        """Prove this node is alive (periodic)."""
        ...

    def producer_ids(self, state_file: Path) -> ProducerIdManager:
        """The producer-id blocks of this node, recorded in ``state_file``."""
        ...

    def attach(self, ctx: BrokerContext) -> None:
        """The components are built: from now on metadata changes are applied to them (once, before serving)."""
        ...

    def refresh(self) -> bool:
        """Re-read the metadata now and apply a new view to the components; True when it changed."""
        ...

    def internal_topic(
        self, ctx: BrokerContext, name: str, num_partitions: int, *, fsync: bool, timeout_ms: int, what: str
    ) -> InternalTopic:
        """Where a coordinator's records of internal topic ``name`` go (see the module docstring): ``fsync``
        each local append, wait at most ``timeout_ms`` for a replication, ``what`` names the writes in logs."""
        ...

    def marker_sender(self, ctx: BrokerContext) -> MarkerChannel:
        """The transaction coordinator's markers channel."""
        ...

    def find_coordinator(self, ctx: BrokerContext, key_type: int, key: str) -> Placement:
        """The coordinator of ``key`` (FindCoordinator's key type: 0 a group id, 1 a transactional id)."""
        ...

    def offsets_partition(self, ctx: BrokerContext, group_id: str) -> tuple[int | None, str | None]:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition once the topic exists (made now if
        needed), else (None, why not)."""
        ...

    def start_coordinators(self, ctx: BrokerContext) -> None:
        """Give the coordinators the internal partitions this node leads now (at start)."""
        ...

    def periodic_tasks(self) -> list[Periodic]:
        """The deployment's own periodic tasks."""
        ...

    def controlled_shutdown(self) -> None:
        """Before a clean stop: hand this node's leaderships over (Kafka's controlled shutdown)."""
        ...

    def close(self) -> None:
        """Release what the deployment holds (last step of a stop)."""
        ...


def answer_after_loads(
    ctx: BrokerContext, names: list[str], answer: Callable[[dict[str, BaseException]], dict[str, Any]]
) -> HandlerResult:
    """The answer of a request that created or extended topics ``names``: at once when none of their logs is
    still loading (:meth:`TopicManager.pending`), else a future of ``answer(failures)`` once every load ended
    (``failures``: topic -> the exception of its failed load), so the client sees the topics served."""
    pending = {name: ctx.topics.pending(name) for name in names}
    pending = {name: futures for name, futures in pending.items() if futures}
    if not pending:
        return answer({})
    result: asyncio.Future[dict[str, Any]] = ctx.loop.create_future()
    everything = [f for futures in pending.values() for f in futures]

    def ended(_: asyncio.Future[Any]) -> None:
        if result.done() or not all(f.done() for f in everything):
            return
        failures = {
            name: exc
            for name, futures in pending.items()
            for exc in [next((f.exception() for f in futures if f.exception() is not None), None)]
            if exc is not None
        }
        try:
            result.set_result(answer(failures))
        except BaseException as exc:  # noqa: BLE001 - the connection's own error path answers it
            result.set_exception(exc)

    for future in everything:
        future.add_done_callback(ended)
    return result


@dataclass
class BrokerContext:
    """The broker's components; see the module docstring."""

    config: BrokerConfig
    topics: TopicManager
    replicas: ReplicaManager
    #: Consumer and follower fetches waiting for data, keyed by (topic, partition).
    fetch_purgatory: DelayedOperationPurgatory[Any]
    #: acks=-1 produces (and internal writes) waiting for the high watermark, keyed by (topic, partition).
    produce_purgatory: DelayedOperationPurgatory[Any]
    clock: Clock
    loop: asyncio.AbstractEventLoop
    #: Where this broker runs: its metadata, liveness, internal-topic writes, coordinator placement.
    deployment: Deployment
    next_producer_id: Callable[[], int]
    #: host and port written into Metadata/FindCoordinator answers (the bound port when listeners said 0).
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 0
    #: Wall-clock milliseconds (record timestamps, LogAppendTime); monotonic time comes from ``clock``.
    wall_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    #: Makes sure the loop advances the purgatory timers at their next expiration (call after parking).
    schedule_timer: Callable[[], None] = field(default=lambda: None)
    #: The broker's metrics (None while ``pylog.metrics.listener`` is unset: nothing is counted).
    metrics: BrokerMetrics | None = None
    #: Listener name -> the (host, port) this broker advertises on it (Metadata answers with the endpoints of
    #: the listener a request arrived on, as Kafka).
    advertised_endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: The session (listener, security protocol, principal) of the request being handled; set by the dispatcher
    #: before each handler call, valid during that call (an authorizer reads the principal here).
    request_session: Session = field(default_factory=lambda: Session("PLAINTEXT", "PLAINTEXT"))
    #: The ACL authorizer (``authorizer.class.name``); None = every request is allowed, as Kafka without one.
    authorizer: Authorizer | None = None
    #: API key -> (min, max) version of every handler (``handlers.supported_versions()``), what ApiVersions
    #: advertises; handed over by the composition root, so no handler imports the registry back.
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The transaction coordinator (of the ``__transaction_state`` partitions this node leads: all of them on a
    #: single node). Set by the composition right after the context is made, before anything is served.
    txn_coordinator: TransactionCoordinator = field(init=False)
    #: The group coordinator (of the ``__consumer_offsets`` partitions this node leads), likewise.
    group_coordinator: GroupCoordinator = field(init=False)
    #: Where the transaction coordinator's markers go (the deployment's channel), likewise.
    txn_markers: MarkerChannel = field(init=False)
    #: What dynamic broker configs change at runtime (set by the composition, likewise).
    reconfiguration: Reconfiguration = field(init=False)
    #: The client quotas' rates and throttles (set by the composition, likewise; its quotas follow the cluster
    #: metadata through :meth:`apply_broker_configs`).
    client_quotas: ClientQuotas = field(init=False)
    #: The incremental fetch sessions (KIP-227) of this broker (set by the composition, likewise).
    fetch_sessions: FetchSessionCache = field(init=False)

    @property
    def cluster(self) -> ClusterStore:
        """Cluster membership and assignments: the deployment's metadata store (a single node's own)."""
        return self.deployment.store

    def refresh_cluster(self) -> bool:
        """Re-read the cluster metadata now and apply it (a request named a topic this broker does not know);
        True when it changed."""
        return self.deployment.refresh()

    def apply_broker_configs(self, named: Sequence[str] = ()) -> None:
        """The dynamic broker configs of the metadata -> this broker's reconfigurable parts (the log defaults of
        every open log, connection limits, listener key stores: :mod:`~broker_runtime.server.reconfigure`) and
        its client quotas to the rates (:mod:`~broker_runtime.server.quota_manager`); ``named``: the keys an
        AlterConfigs just set (a listener key store named is reloaded even if unchanged)."""
        view = self.cluster.view
        self.reconfiguration.apply(view.broker_configs, named)
        self.client_quotas.update(view.client_quotas)

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May the current request's principal, from its host, do ``operation`` on the resource? Always True
        without an authorizer; the bindings are those of the latest cluster view."""
        if self.authorizer is None:
            return True
        s = self.request_session
        host = s.client_address.rpartition(":")[0].strip("[]")
        return self.authorizer.authorize(
            self.cluster.view.acls, s.principal, host, operation, resource_type, name
        )

    def authorized_cluster(self, operation: AclOperation) -> bool:
        return self.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Some resource of the type allows ``operation`` (see :meth:`Authorizer.authorize_any`)."""
        if self.authorizer is None:
            return True
        s = self.request_session
        host = s.client_address.rpartition(":")[0].strip("[]")
        return self.authorizer.authorize_any(
            self.cluster.view.acls, s.principal, host, operation, resource_type
        )

    def inter_broker_allowed(self) -> bool:
        """May the current request do what only brokers do (follower Fetch, WriteTxnMarkers, OffsetForLeaderEpoch
        for every topic)? Only with CLUSTER_ACTION on the cluster, on every listener, the inter-broker one
        included: as Kafka, the listener a request came in on grants nothing; the brokers' own principal (the
        inter-broker listener's login) must be a super user or hold CLUSTER_ACTION. Always True without an
        authorizer."""
        return self.authorized_cluster(AclOperation.CLUSTER_ACTION)

    def endpoint_of(self, broker: Any, listener: str | None = None) -> tuple[str, int]:
        """``(host, port)`` of ``broker`` (a cluster view's BrokerInfo) on ``listener`` (default: the current
        request's listener; an answer computed later, in a callback, must pass the listener it captured while
        its request was handled, as ``request_session`` belongs to whichever request runs then): this broker's
        advertised endpoint of that listener, another broker's registered one (falling back to its inter-broker
        address when it did not register that listener)."""
        if listener is None:
            listener = self.request_session.listener
        if broker.node_id == self.config.node_id:
            return self.advertised_endpoints.get(listener, (self.advertised_host, self.advertised_port))
        found = dict(getattr(broker, "endpoints", ()) or ()).get(listener)
        return (found[0], found[1]) if found else (broker.host, broker.port)

    def own_endpoint(self) -> tuple[str, int]:
        """This broker's advertised ``(host, port)`` on the current request's listener."""
        return self.advertised_endpoints.get(
            self.request_session.listener, (self.advertised_host, self.advertised_port)
        )
