"""Cluster membership and partition assignment as the broker sees it: who the brokers are, which replicas each
partition has, who leads it, and its ISR (:class:`ClusterView`, an immutable snapshot of typed records).

Two implementations of one small interface (:class:`ClusterStore`):

* :class:`SingleNodeCluster` -- the default: this broker alone; every local topic's partitions have replicas
  = ISR = [this node], leader this node, epoch 0. Nothing is persisted beyond the logs themselves.
* :class:`SingleHostCluster` (formerly ``SharedFileCluster``, a name kept) -- several broker processes on ONE
  machine (``pylog.cluster.dir``, set by ``pylog-broker cluster``), over the controller's seam
  (:mod:`broker_runtime.controller`): the typed :class:`~broker_runtime.controller.ClusterMetadata` is kept by a
  :class:`~broker_runtime.controller.SingleHostMetadataStore` (``<cluster dir>/cluster.json``, its format in
  :mod:`broker_runtime.controller.metadata`; atomic writes, every change a read-modify-write under a bounded
  ``flock``; sessions as ``flock`` + heartbeats stamped with the host's monotonic clock). A multi-host
  deployment would put another ``MetadataStore`` behind the same seam.

  Brokers ask, the controller writes (KRaft's rule): this class never changes the metadata itself; each change
  is a request through :class:`~broker_runtime.controller.ControllerChannel`, answered by the controller's
  operations (:mod:`~broker_runtime.controller.cluster_control`,
  :mod:`~broker_runtime.controller.replication_control`):

  * each broker at start takes its session (process lock) and registers its address with a new broker epoch;
    the same write fences its previous incarnation and unfences the new one;
  * CreateTopics (and auto-creation) on any broker: the controller checks the request and places the replicas
    (:func:`~broker_runtime.replication.assign_replicas`, a pure function of the sorted broker ids, so the
    result does not depend on which broker asked);
  * the leader of a partition alters that partition's ISR (Kafka's AlterPartition), checked against its leader
    epoch (a replaced leader is refused) and refused for fenced new members;
  * the active controller (:class:`~broker_runtime.controller.Controller`) fences and unfences brokers, moves
    leadership with a new leader epoch, and rebalances preferred leaders;
  * DeleteTopics removes the topic and records its name in ``deleted_topics`` (a broker that was down deletes
    its local logs of those names when it comes back; creating the name again removes it from the list);
    CreatePartitions appends partitions placed as CreateTopics places them; AlterConfigs /
    IncrementalAlterConfigs replace a topic's configs or the dynamic broker configs (``""`` the cluster-wide
    defaults, ``"<node id>"`` one broker's); every broker applies them when it sees the change;
  * CreateAcls / DeleteAcls on any broker rewrite the ACL rows (:class:`~broker_runtime.security.acl.AclBinding`
    rows, :meth:`~broker_runtime.security.acl.AclBinding.to_json`); every broker authorizes against the list
    of its latest view (a single node keeps the same rows in ``acls.json`` in its first log directory);
  * AlterClientQuotas on any broker rewrites the client quota rows (:mod:`.client_quotas`); every broker
    enforces the quotas of its latest view (a single node keeps them in ``client-quotas.json``);
  * a broker that needs producer ids takes the next block of the cluster's counter (Kafka's
    AllocateProducerIds), so producer ids are unique across the cluster.

  Brokers notice changes by polling the store's version (the file's inode, mtime, size) every
  ``POLL_INTERVAL_MS`` and on demand (a Metadata request, a topic they do not know). Registrations are never
  removed: a broker that stops is fenced, and unfenced when it runs again.

Thread-safety: each cluster object is used from its broker's event-loop thread only; cross-process safety comes
from the store (on a single host: the file lock and atomic renames).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_runtime.controller import (
    CLUSTER_FILE,
    CLUSTER_LOCK_FILE,
    LOCK_TIMEOUT_S,
    NO_CONTROLLER,
    AlterPartitionRejected,
    BrokerInfo,
    ClusterMetadata,
    Controller,
    ControllerChannel,
    ControllerConfig,
    PartitionInfo,
    SingleHostMetadataStore,
    TopicInfo,
    TopicRules,
    check_new_count,
)
from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.fsutil import write_atomically
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID
from broker_runtime.replication.assignment import assign_replicas
from broker_runtime.security.acl import AclBinding
from broker_runtime.server.client_quotas import Entity, QuotaMap, from_rows, to_rows
from broker_runtime.server.topics import TopicError, TopicManager, topic_name_error

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "NO_CONTROLLER",
    "POLL_INTERVAL_MS",
    "BrokerInfo",
    "ClusterStore",
    "ClusterView",
    "PartitionInfo",
    "SharedFileCluster",
    "SingleHostCluster",
    "SingleNodeCluster",
    "TopicInfo",
]

_log = logging.getLogger(__name__)

POLL_INTERVAL_MS = 100


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot of the cluster metadata."""

    brokers: Mapping[int, BrokerInfo]
    topics: Mapping[str, TopicInfo]
    #: The broker holding the controller role; :data:`NO_CONTROLLER` while none does (a cluster starting).
    controller_id: int = NO_CONTROLLER
    #: Dynamic broker configs: ``""`` -> cluster-wide defaults, ``"<node id>"`` -> one broker's.
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Topics deleted through DeleteTopics (and not created again since).
    deleted_topics: frozenset[str] = frozenset()
    #: The ACL bindings (CreateAcls / DeleteAcls), in creation order.
    acls: tuple[AclBinding, ...] = ()
    #: The client quotas (AlterClientQuotas): entity -> key -> value (:mod:`.client_quotas`).
    client_quotas: QuotaMap = field(default_factory=dict)

    def topic_id(self, name: str | None) -> uuid.UUID:
        """The topic's id; the zero id (Kafka's "none") for an unknown topic."""
        info = self.topics.get(name) if name is not None else None
        return ZERO_TOPIC_ID if info is None or info.topic_id is None else info.topic_id

    def names_by_id(self) -> dict[uuid.UUID, str]:
        """Topic id -> name, for requests that name topics by id (Metadata v12+, Fetch v13+, DeleteTopics v6)."""
        return {t.topic_id: name for name, t in self.topics.items() if t.topic_id is not None}


class ClusterStore(Protocol):
    """What the broker needs from cluster membership; see the module docstring."""

    node_id: int

    @property
    def view(self) -> ClusterView: ...

    def refresh(self) -> bool: ...

    def register(
        self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None
    ) -> None: ...

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> tuple[int, int]: ...

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool: ...

    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]: ...

    def delete_topic(self, name: str) -> None: ...

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, *, validate_only: bool = False
    ) -> None: ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None: ...

    def update_acls(self, change: AclChange) -> None: ...

    def update_client_quotas(self, change: QuotaChange) -> None: ...


#: A read-modify-write of the client quotas (checked by the caller): the current ones in, the new ones out
#: (under the store's lock in a cluster, as :data:`AclChange`).
QuotaChange = Callable[[QuotaMap], dict[Entity, dict[str, float]]]

#: A read-modify-write of the ACL list: the current bindings in, the new ones out (called under the store's
#: lock in a cluster, so two brokers' changes never overwrite each other).
AclChange = Callable[[tuple[AclBinding, ...]], tuple[AclBinding, ...]]


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _parse_acls(rows: Any, where: object) -> tuple[AclBinding, ...]:
    try:
        return tuple(AclBinding.from_json(row) for row in rows or ())
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: unreadable ACL bindings ({exc!r})") from None


class SingleNodeCluster:
    """This broker alone: the view is derived from the local topics (see the module docstring).

    The view is built once per change, not per read: every handler (and every authorization, which reads the
    ACLs of the view) reads it, many once per topic, so building it from every topic on each read made requests
    over many topics quadratic (creating 1,000 topics took minutes). It is rebuilt on the first read after
    anything it holds changed: the topic manager's :attr:`~broker_runtime.server.topics.TopicManager.version`
    (names, partition counts, topic ids; counted by its maps on every write) or this object's own
    ``_changes`` (the address, dynamic broker configs, ACLs and client quotas, bumped by each of their setters
    here). A read therefore never answers a topic deleted, or misses one created, before it.

    Threading: the event-loop thread mutates (requests; a creation's partitions are registered by a callback on
    the loop once the partition-load thread made their files) and reads; before the loop runs, the starting
    thread does both. The partition-load thread touches neither the topic maps nor this object.
    """

    def __init__(
        self,
        node_id: int,
        topics: TopicManager,
        dynamic_configs_path: Path | None = None,
        acls_path: Path | None = None,
        client_quotas_path: Path | None = None,
    ) -> None:
        self.node_id = node_id
        #: Where the client quotas persist (JSON rows of :func:`~.client_quotas.to_rows`), if anywhere.
        self._quotas_path = client_quotas_path
        self._client_quotas: dict[Entity, dict[str, float]] = {}
        if client_quotas_path is not None and client_quotas_path.exists():
            try:
                quota_rows = json.loads(client_quotas_path.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{client_quotas_path}: unreadable client quotas ({exc})") from None
            self._client_quotas = from_rows(quota_rows, client_quotas_path)
        #: Where the ACL bindings persist (JSON list of :meth:`AclBinding.to_json` rows), if anywhere.
        self._acls_path = acls_path
        self._acls: tuple[AclBinding, ...] = ()
        if acls_path is not None and acls_path.exists():
            try:
                rows = json.loads(acls_path.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{acls_path}: unreadable ACL bindings ({exc})") from None
            self._acls = _parse_acls(rows, acls_path)
        self._topics = topics
        self._host = "127.0.0.1"
        self._port = 0
        #: Where the dynamic broker configs persist (JSON ``{"": {...}, "<node id>": {...}}``), if anywhere.
        self._dynamic_path = dynamic_configs_path
        self._broker_configs: dict[str, dict[str, str]] = {}
        if dynamic_configs_path is not None and dynamic_configs_path.exists():
            try:
                loaded = json.loads(dynamic_configs_path.read_text())
                self._broker_configs = {
                    str(k): {str(a): str(b) for a, b in v.items()} for k, v in loaded.items()
                }
            except (OSError, ValueError, AttributeError) as exc:
                raise ConfigError(
                    f"{dynamic_configs_path}: unreadable dynamic broker configs ({exc})"
                ) from None
        #: Bumped by every change of what the view holds besides the topics (see the class docstring).
        self._changes = 0
        #: ``((topic manager version, _changes), view)`` of the last build.
        self._built: tuple[tuple[int, int], ClusterView] | None = None

    @property
    def view(self) -> ClusterView:
        """The current view: the one last built while nothing it holds changed since, else a new one."""
        key = (self._topics.version, self._changes)
        built = self._built
        if built is not None and built[0] == key:
            return built[1]
        view = self._build_view()
        self._built = (key, view)
        return view

    def _build_view(self) -> ClusterView:
        node = self.node_id
        only = PartitionInfo((node,), node, 0, (node,))
        topics = {
            name: TopicInfo(
                name,
                (only,) * (self._topics.partition_count(name) or 0),
                topic_id=self._topics.topic_id(name),
            )
            for name in self._topics.names()
        }
        return ClusterView(
            {node: BrokerInfo(node, self._host, self._port)},
            topics,
            node,
            broker_configs=self._broker_configs,
            acls=self._acls,
            client_quotas=self._client_quotas,
        )

    def refresh(self) -> bool:
        return False

    def register(self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None) -> None:
        self._host, self._port = host, port
        self._changes += 1

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
        node = self.node_id
        if assignments:
            for index, ids in sorted(assignments.items()):
                if list(ids) != [node]:
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {index} of topic {name}: replicas {list(ids)} "
                        f"must be exactly [{node}] on this single-node broker",
                    )
            partitions, replication_factor = len(assignments), 1
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor != 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        self._topics.check_new(name, partitions, configs)
        if not validate_only:
            if _on_event_loop():  # a request: the files are made on the partition-load thread
                self._topics.create_in_background(name, partitions, configs)
            else:
                self._topics.create(name, partitions, configs)
        return partitions, replication_factor

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        return list(isr) == [self.node_id]

    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        view = self.view
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, index in partitions or []:
            info = view.topics.get(topic)
            if info is None or not 0 <= index < len(info.partitions):
                out[(topic, index)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{topic}-{index} does not exist",
                )
            else:
                out[(topic, index)] = (ErrorCode.ELECTION_NOT_NEEDED, "the only replica already leads")
        return out

    def delete_topic(self, name: str) -> None:
        if self._topics.partition_count(name) is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        self._topics.delete(name)

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, *, validate_only: bool = False
    ) -> None:
        current = self._topics.partition_count(name)
        if current is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        _check_new_count(name, current, count, assignments, [self.node_id], 1)
        if self._topics.pending(name):
            raise TopicError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, f"Topic {name} is still being created or extended; retry."
            )
        if not validate_only:
            if _on_event_loop():
                self._topics.add_partitions_in_background(name, count)
            else:
                self._topics.add_partitions(name, count)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self._topics.set_overrides(name, configs)

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        updated = dict(self._broker_configs)
        if configs:
            updated[resource] = dict(configs)
        else:
            updated.pop(resource, None)
        if self._dynamic_path is not None:
            # 0600: a dynamic listener key store's password is among these values.
            write_atomically(
                self._dynamic_path, json.dumps(updated, indent=1, sort_keys=True).encode(), mode=0o600
            )
        self._broker_configs = updated
        self._changes += 1

    def update_acls(self, change: AclChange) -> None:
        """Apply ``change`` and persist the result (atomic rename) before it takes effect."""
        updated = change(self._acls)
        if self._acls_path is not None:
            rows = [b.to_json() for b in updated]
            write_atomically(self._acls_path, json.dumps(rows, indent=1).encode())
        self._acls = updated
        self._changes += 1

    def update_client_quotas(self, change: QuotaChange) -> None:
        """Apply ``change`` and persist the result (atomic rename) before it takes effect."""
        updated = {entity: dict(values) for entity, values in change(self._client_quotas).items() if values}
        if self._quotas_path is not None:
            write_atomically(self._quotas_path, json.dumps(to_rows(updated), indent=1).encode())
        self._client_quotas = updated
        self._changes += 1


def _view_of(meta: ClusterMetadata, where: object) -> ClusterView:
    return ClusterView(
        dict(meta.brokers),
        dict(meta.topics),
        meta.controller_holder,
        broker_configs=meta.broker_configs,
        deleted_topics=frozenset(meta.deleted_topics),
        acls=_parse_acls(meta.acls, where),
        client_quotas=from_rows(meta.client_quotas, where),
    )


class SingleHostCluster:
    """Cluster metadata shared by the brokers of ONE machine, behind the controller's seam (see the module
    docstring): reads through the :class:`~broker_runtime.controller.SingleHostMetadataStore`, every change a
    request to the controller (:class:`~broker_runtime.controller.ControllerChannel`)."""

    def __init__(
        self,
        node_id: int,
        cluster_dir: str | os.PathLike[str],
        cluster_id: str,
        topics: TopicManager,
        *,
        unclean_leader_election_enable: bool = False,
    ) -> None:
        self.node_id = node_id
        self.store = SingleHostMetadataStore(cluster_dir)
        self.dir = self.store.dir
        self.path = self.store.path
        self.lock_path = self.store.lock_path
        self.session = self.store.session(node_id)
        self._topics = topics
        self._channel = ControllerChannel(
            self.store,
            self.session,
            cluster_id,
            TopicRules(topic_name_error, topics.check_config, assign_replicas),
            unclean_leader_election_enable=unclean_leader_election_enable,
            where=self.path,
        )
        self._view = ClusterView({}, {}, NO_CONTROLLER)
        self._version: object = None
        self.refresh()

    # -- reading --------------------------------------------------------------------------------------------

    @property
    def view(self) -> ClusterView:
        return self._view

    def refresh(self) -> bool:
        """Re-read the metadata if it changed since the last read; True when the view changed."""
        version = self.store.version()
        if version == self._version:
            return False
        meta = self.store.read()
        self._version = version
        view = _view_of(meta, self.path)
        changed = view != self._view
        self._view = view
        return changed

    # -- this broker's registration and session ---------------------------------------------------------------

    def register(self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None) -> None:
        """Take this node's session (its process lock) and register its address with a new broker epoch (at
        start); refuses to join a cluster with another cluster.id. A previous incarnation of this node is fenced
        in the same write, and the first heartbeat is written inside it, so no controller sees this registration
        without a live session."""
        epoch = self._channel.register(host, port, endpoints)
        self.refresh()
        _log.info(
            "node %d registered as %s:%d in %s (broker epoch %d)", self.node_id, host, port, self.path, epoch
        )

    def heartbeat(self) -> None:
        """Beat (every ``broker.heartbeat.interval.ms``)."""
        self._channel.heartbeat()

    @property
    def last_heartbeat(self) -> float:
        """``time.monotonic()`` of this broker's last heartbeat (0 before the first)."""
        return self.session.last_beat

    def renew_session(self) -> None:
        """Beat inside a metadata update, then re-read the metadata: after this, the view is at least as new as
        any decision a controller made about this broker's session (a broker that was not running for a while
        calls it before acting as a leader again)."""
        self._channel.renew_session()
        self.refresh()

    def controller(self, config: ControllerConfig) -> Controller:
        """This broker's :class:`~broker_runtime.controller.Controller` (the active role when it holds it)."""
        return Controller(self.store, self.session, config)

    def controlled_shutdown(self) -> None:
        """Before a clean stop: fence this broker now (leaderships move, it leaves the ISRs) instead of leaving
        the partitions it leads unavailable until the controller notices it is gone (Kafka's controlled
        shutdown). Logs a WARNING and carries on when the metadata cannot be written."""
        try:
            self._channel.controlled_shutdown()
        except (TimeoutError, OSError) as exc:
            _log.warning(
                "node %d: controlled shutdown could not move leadership (%s); the controller will fence this "
                "node once it is gone",
                self.node_id,
                exc,
            )
            return
        self.refresh()

    def close(self) -> None:
        self._channel.close()

    # -- requests to the controller ---------------------------------------------------------------------------

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
        """Assign and record a new topic (any broker may ask). Raises TopicError."""
        with self._timeouts_refused():
            result = self._channel.create_topic(
                name, partitions, replication_factor, configs, assignments, validate_only=validate_only
            )
        if not validate_only:
            _log.info("created topic %s: %d partition(s), replication factor %d", name, *result)
        return result

    def delete_topic(self, name: str) -> None:
        """Remove the topic from the metadata (every replica deletes its logs when it sees the change)."""
        with self._timeouts_refused():
            self._channel.delete_topic(name)
        _log.info("deleted topic %s from the cluster metadata", name)

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, *, validate_only: bool = False
    ) -> None:
        """Append partitions ``current..count-1``, placed as CreateTopics places a topic of ``count``
        partitions (or as ``assignments`` say)."""
        with self._timeouts_refused():
            self._channel.create_partitions(name, count, assignments, validate_only=validate_only)
        if not validate_only:
            _log.info("topic %s: %d partition(s) now", name, count)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's overrides in the metadata (validated by the caller)."""
        with self._timeouts_refused():
            self._channel.set_topic_configs(name, configs)

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of ``resource`` (``""`` = cluster-wide defaults, else a node id)."""
        with self._timeouts_refused():
            self._channel.set_broker_configs(resource, configs)

    def update_acls(self, change: AclChange) -> None:
        """Apply ``change`` to the cluster's ACL list inside one controller write (see :data:`AclChange`)."""

        def rows(current: list[list[Any]]) -> list[list[Any]]:
            return [b.to_json() for b in change(_parse_acls(current, self.path))]

        with self._timeouts_refused():
            self._channel.update_acl_rows(rows)

    def update_client_quotas(self, change: QuotaChange) -> None:
        """Apply ``change`` to the cluster's client quotas inside one controller write (see :data:`QuotaChange`)."""

        def rows(current: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return to_rows(change(from_rows(current, self.path)))

        with self._timeouts_refused():
            self._channel.update_client_quota_rows(rows)

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        """The leader's ISR change (Kafka's AlterPartition); False (and a log line) when it is refused or cannot
        be recorded now (see :func:`~broker_runtime.controller.replication_control.alter_partition`)."""
        try:
            self._channel.alter_partition(topic, partition, isr, leader_epoch)
        except (TimeoutError, AlterPartitionRejected, KeyError, IndexError, OSError) as exc:
            _log.warning("ISR change of %s-%d to %s not recorded: %s", topic, partition, isr, exc)
            return False
        self.refresh()
        return True

    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders: the preferred replica (or, ``unclean``, the first live replica of a leaderless
        partition) becomes leader with a new epoch; per partition the outcome. ``partitions`` None means every
        partition, and then only the partitions an election changed or could not change are reported."""
        try:
            out = self._channel.elect_leaders(unclean, partitions)
        except (TimeoutError, OSError) as exc:
            return {key: (ErrorCode.REQUEST_TIMED_OUT, str(exc)) for key in partitions or []}
        self.refresh()
        return out

    def allocate_producer_ids(self, floor: int, block_size: int) -> tuple[int, int]:
        """The next block of ``block_size`` producer ids no node has had, starting at ``floor`` or later
        (Kafka's AllocateProducerIds: the controller records the next free id in the metadata). Raises
        :class:`~broker_runtime.errors.WaitTimeoutError` when the metadata cannot be had."""
        start, end = self._channel.allocate_producer_ids(floor, block_size)
        self.refresh()
        _log.info("node %d took producer ids [%d, %d] from %s", self.node_id, start, end, self.path)
        return start, end

    @contextlib.contextmanager
    def _timeouts_refused(self) -> Iterator[None]:
        """A request that cannot reach the controller's metadata in time fails as REQUEST_TIMED_OUT; then
        the view is re-read (it includes this request's write)."""
        try:
            yield
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        self.refresh()


#: The former name of :class:`SingleHostCluster`, kept for its callers.
SharedFileCluster = SingleHostCluster

_check_new_count = check_new_count
