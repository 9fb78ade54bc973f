"""Cluster membership and partition assignment: who the brokers are, which replicas each partition has, who
leads it, and its ISR.

Two implementations of one small interface (:class:`ClusterStore`):

* :class:`SingleNodeCluster` -- the default: this broker alone; every local topic's partitions have replicas
  = ISR = [this node], leader this node, epoch 0. Nothing is persisted beyond the logs themselves.
* :class:`SharedFileCluster` -- several broker processes on one machine (``pylog.cluster.dir``, set by
  ``pylog-broker cluster``). The truth is one JSON document, ``<cluster dir>/cluster.json``, kept by the
  :class:`~broker_runtime.controller.FileMetadataStore` (the store seam: atomic writes, every change a
  read-modify-write under a bounded ``flock``)::

      {"version": 1, "cluster_id": "...",
       "controller": {"id": 0, "epoch": 2}, "controller_id": 0,
       "brokers": {"0": {"host": "127.0.0.1", "port": 40001, "broker_epoch": 3, "fenced": false}, ...},
       "topics": {"events": {"configs": {...},
                             "partitions": [{"replicas": [0, 1, 2], "leader": 0, "leader_epoch": 4,
                                             "isr": [0, 1, 2], "partition_epoch": 9}, ...]}},
       "next_producer_id": 2000,
       "broker_configs": {"": {"log.retention.ms": "..."}, "1": {...}},
       "acls": [["TOPIC", "events", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"], ...],
       "deleted_topics": ["old-topic"]}

  Writers and what they write:

  * each broker at start takes its process lock and registers its address with a new ``broker_epoch``; the same
    write fences its previous incarnation and unfences the new one
    (:func:`~broker_runtime.controller.register_broker`);
  * CreateTopics (and auto-creation) on any broker runs the assignment
    (:func:`~broker_runtime.replication.assign_replicas`, a pure function of the sorted broker ids, so the
    result does not depend on which broker ran it);
  * the leader of a partition alters that partition's ISR (Kafka's AlterPartition), checked against its leader
    epoch (a replaced leader is refused) and refused for fenced new members;
  * the controller (:mod:`broker_runtime.controller`) fences and unfences brokers, moves leadership with a
    new leader epoch, and rebalances preferred leaders;
  * DeleteTopics removes the topic and records its name in ``deleted_topics`` (a broker that was down deletes
    its local logs of those names when it comes back; creating the name again removes it from the list);
    CreatePartitions appends partitions placed as CreateTopics places them; AlterConfigs /
    IncrementalAlterConfigs replace a topic's ``configs`` or the dynamic broker configs of ``broker_configs``
    (key ``""`` the cluster-wide defaults, ``"<node id>"`` one broker's); every broker applies them when it
    sees the change;
  * CreateAcls / DeleteAcls on any broker rewrite ``acls`` (:class:`~broker_runtime.security.acl.AclBinding`
    rows, :meth:`~broker_runtime.security.acl.AclBinding.to_json`); every broker authorizes against the list
    of its latest view (a single node keeps the same rows in ``acls.json`` in its first log directory);
  * a broker that needs producer ids takes the next block of ``next_producer_id`` (Kafka's
    AllocateProducerIds), so producer ids are unique across the cluster.

  Brokers notice changes by polling the file's identity (inode, mtime, size) every ``POLL_INTERVAL_MS`` and on
  demand (a Metadata request, a topic they do not know). Registrations are never removed: a broker that stops
  is fenced, and unfenced when it runs again.

Thread-safety: each store is used from its broker's event-loop thread only; cross-process safety comes from
the file lock and atomic renames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_runtime.controller import (
    CLUSTER_FILE,
    CLUSTER_LOCK_FILE,
    LOCK_TIMEOUT_S,
    NO_LEADER,
    BrokerSession,
    FileMetadataStore,
    apply_elections,
    fence_broker,
    preferred_election,
    register_broker,
    unclean_allowed,
    unfence_broker,
)
from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.fsutil import write_atomically
from broker_runtime.replication.assignment import assign_replicas
from broker_runtime.security.acl import AclBinding
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
    "SingleNodeCluster",
    "TopicInfo",
]

_log = logging.getLogger(__name__)

POLL_INTERVAL_MS = 100
_FORMAT_VERSION = 1
#: ``ControllerId`` when no broker holds the controller role (Kafka's MetadataResponse answers -1 then too).
NO_CONTROLLER = -1


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    #: Fenced by the controller (dead or session expired): not a leader, not in any ISR, not in Metadata.
    fenced: bool = False
    #: Every advertised listener: ``(name, (host, port))`` pairs; ``host``/``port`` are the inter-broker one's.
    endpoints: tuple[tuple[str, tuple[str, int]], ...] = ()


@dataclass(frozen=True)
class PartitionInfo:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)


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
    """This broker alone: the view is derived from the local topics (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        topics: TopicManager,
        dynamic_configs_path: Path | None = None,
        acls_path: Path | None = None,
    ) -> None:
        self.node_id = node_id
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

    @property
    def view(self) -> ClusterView:
        node = self.node_id
        only = PartitionInfo((node,), node, 0, (node,))
        topics = {
            name: TopicInfo(name, (only,) * (self._topics.partition_count(name) or 0))
            for name in self._topics.names()
        }
        return ClusterView(
            {node: BrokerInfo(node, self._host, self._port)},
            topics,
            node,
            broker_configs=self._broker_configs,
            acls=self._acls,
        )

    def refresh(self) -> bool:
        return False

    def register(self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None) -> None:
        self._host, self._port = host, port

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
            write_atomically(self._dynamic_path, json.dumps(updated, indent=1, sort_keys=True).encode())
        self._broker_configs = updated

    def update_acls(self, change: AclChange) -> None:
        """Apply ``change`` and persist the result (atomic rename) before it takes effect."""
        updated = change(self._acls)
        if self._acls_path is not None:
            rows = [b.to_json() for b in updated]
            write_atomically(self._acls_path, json.dumps(rows, indent=1).encode())
        self._acls = updated


def _parse_view(data: Mapping[str, Any]) -> ClusterView:
    brokers = {
        int(k): BrokerInfo(
            int(k),
            str(v["host"]),
            int(v["port"]),
            bool(v.get("fenced", False)),
            tuple((str(n), (str(e[0]), int(e[1]))) for n, e in sorted(v.get("endpoints", {}).items())),
        )
        for k, v in data.get("brokers", {}).items()
    }
    topics: dict[str, TopicInfo] = {}
    for name, t in data.get("topics", {}).items():
        parts = tuple(
            PartitionInfo(
                tuple(p["replicas"]),
                int(p["leader"]),
                int(p["leader_epoch"]),
                tuple(p["isr"]),
                int(p.get("partition_epoch", 0)),
            )
            for p in t["partitions"]
        )
        topics[name] = TopicInfo(name, parts, dict(t.get("configs", {})))
    controller = data.get("controller") or {}
    return ClusterView(
        brokers,
        topics,
        int(controller.get("id", data.get("controller_id", NO_CONTROLLER))),
        broker_configs={str(k): dict(v) for k, v in data.get("broker_configs", {}).items()},
        deleted_topics=frozenset(data.get("deleted_topics", ())),
        acls=_parse_acls(data.get("acls"), CLUSTER_FILE),
    )


class SharedFileCluster:
    """Cluster metadata in ``<cluster dir>/cluster.json`` shared by the brokers of one machine."""

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
        self.store = FileMetadataStore(cluster_dir)
        self.dir = self.store.dir
        self.path = self.store.path
        self.lock_path = self.store.lock_path
        self.session = BrokerSession(self.dir, node_id)
        self._cluster_id = cluster_id
        self._topics = topics
        self._unclean_default = unclean_leader_election_enable
        self._view = ClusterView({}, {}, NO_CONTROLLER)
        self._version: object = None
        self.refresh()

    # -- reading --------------------------------------------------------------------------------------------

    @property
    def view(self) -> ClusterView:
        return self._view

    def refresh(self) -> bool:
        """Re-read the file if it changed since the last read; True when the view changed."""
        version = self.store.version()
        if version == self._version:
            return False
        data = self.store.read()
        self._version = version
        view = _parse_view(data)
        changed = view != self._view
        self._view = view
        return changed

    # -- writing --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[dict[str, Any]]:
        """Hold the cluster lock; yields the current file content, written back when the block succeeds."""
        with self.store.update(timeout_s) as data:
            yield data
            data["version"] = _FORMAT_VERSION
            data.setdefault("cluster_id", self._cluster_id)
            data.setdefault("brokers", {})
            data.setdefault("topics", {})
        self.refresh()

    def register(self, host: str, port: int, endpoints: Mapping[str, tuple[str, int]] | None = None) -> None:
        """Take this node's process lock and record its address with a new broker epoch (at start); refuses to
        join a cluster with another cluster.id. A previous incarnation of this node is fenced in the same write
        (see :func:`~broker_runtime.controller.register_broker`), and the first heartbeat is written under the
        lock, so no controller sees this registration without a live session."""
        self.session.acquire()
        with self._locked(timeout_s=30.0) as data:
            existing = data.get("cluster_id")
            if existing is not None and existing != self._cluster_id:
                raise ConfigError(
                    f"{self.path} belongs to cluster {existing!r}, this broker is configured for {self._cluster_id!r}"
                )
            epoch = register_broker(
                data, self.node_id, host, port, unclean_default=self._unclean_default, now=time.monotonic()
            )
            if endpoints:
                data["brokers"][str(self.node_id)]["endpoints"] = {
                    n: [h, p] for n, (h, p) in endpoints.items()
                }
            self.session.broker_epoch = epoch
            self.session.beat()
        _log.info(
            "node %d registered as %s:%d in %s (broker epoch %d)", self.node_id, host, port, self.path, epoch
        )

    def renew_session(self) -> None:
        """Beat under the cluster lock, then re-read the metadata: after this, the view is at least as new as any
        decision a controller made about this broker's session (a broker that was not running for a while calls
        it before acting as a leader again)."""
        with self.store.update() as _:
            self.session.beat()
        self.refresh()

    def controlled_shutdown(self) -> None:
        """Before a clean stop: fence this broker now (leaderships move, it leaves the ISRs) instead of leaving
        the partitions it leads unavailable until the controller notices it is gone (Kafka's controlled
        shutdown). Logs a WARNING and carries on when the metadata cannot be written."""
        try:
            with self._locked() as data:
                brokers = data.get("brokers", {})
                me = brokers.get(str(self.node_id))
                if me is None or me.get("fenced", False):
                    return
                me["fenced"] = True
                live = {int(b) for b, info in brokers.items() if not info.get("fenced", False)}
                topics = data.get("topics", {})
                apply_elections(
                    data,
                    lambda name, entry: fence_broker(
                        entry,
                        self.node_id,
                        live,
                        unclean=unclean_allowed(topics[name], self._unclean_default),
                    ),
                    f"node {self.node_id} shutting down",
                    offline_level=logging.INFO,
                )
        except (TimeoutError, OSError) as exc:
            _log.warning(
                "node %d: controlled shutdown could not move leadership (%s); the controller will fence this "
                "node once it is gone",
                self.node_id,
                exc,
            )

    def close(self) -> None:
        self.session.release()

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
        """Assign and record a new topic (any broker may call; the lock serializes). Raises TopicError."""
        try:
            with self._locked() as data:
                result = self._create_locked(data, name, partitions, replication_factor, configs, assignments)
                if validate_only:
                    raise _ValidateOnly(result)
        except _ValidateOnly as done:
            return done.result
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        _log.info("created topic %s: %d partition(s), replication factor %d", name, *result)
        return result

    def _create_locked(
        self,
        data: dict[str, Any],
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None,
    ) -> tuple[int, int]:
        problem = topic_name_error(name)
        if problem is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        topics: dict[str, Any] = data.setdefault("topics", {})
        if name in topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        folded = name.replace(".", "_")
        for existing in topics:
            if existing.replace(".", "_") == folded:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        registered = data.get("brokers", {})
        brokers = sorted(int(b) for b in registered)
        # As Kafka's placement: new replicas go to unfenced brokers only.
        unfenced = sorted(int(b) for b, info in registered.items() if not info.get("fenced", False))
        if assignments:
            indexes = sorted(assignments)
            if indexes != list(range(len(indexes))):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partitions of topic {name} must be numbered 0..{len(indexes) - 1}, got {indexes}",
                )
            replica_lists = [list(assignments[i]) for i in indexes]
            for i, ids in enumerate(replica_lists):
                if not ids or len(set(ids)) != len(ids) or any(b not in brokers for b in ids):
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {i} of topic {name}: replicas {ids} must be distinct registered brokers "
                        f"{brokers}",
                    )
            partitions, replication_factor = len(replica_lists), len(replica_lists[0])
        else:
            if replication_factor <= 0:
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
                )
            if replication_factor > len(unfenced):
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                    f"factor of {replication_factor} cannot be reached because only {len(unfenced)} broker(s) "
                    "are registered and unfenced.",
                )
            if partitions <= 0:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Number of partitions must be larger than 0, got {partitions}.",
                )
            replica_lists = assign_replicas(unfenced, partitions, replication_factor)
        # Name, partition count and configs are also checked by the local rules (compression, LogConfig).
        self._topics.check_config(name, partitions, configs)
        topics[name] = {
            "configs": dict(configs),
            "partitions": [_new_partition(ids, unfenced) for ids in replica_lists],
        }
        if name in data.get("deleted_topics", ()):
            data["deleted_topics"] = [t for t in data["deleted_topics"] if t != name]
        return partitions, replication_factor

    def delete_topic(self, name: str) -> None:
        """Remove the topic from the metadata (every replica deletes its logs when it sees the change)."""
        try:
            with self._locked() as data:
                if name not in data.get("topics", {}):
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
                del data["topics"][name]
                deleted = set(data.get("deleted_topics", ()))
                deleted.add(name)
                data["deleted_topics"] = sorted(deleted)
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        _log.info("deleted topic %s from the cluster metadata", name)

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, *, validate_only: bool = False
    ) -> None:
        """Append partitions ``current..count-1``, placed as CreateTopics places a topic of ``count``
        partitions (or as ``assignments`` say)."""
        try:
            with self._locked() as data:
                entry = data.get("topics", {}).get(name)
                if entry is None:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
                parts = entry["partitions"]
                registered = data.get("brokers", {})
                unfenced = sorted(int(b) for b, info in registered.items() if not info.get("fenced", False))
                replication = len(parts[0]["replicas"])
                _check_new_count(
                    name, len(parts), count, assignments, sorted(int(b) for b in registered), replication
                )
                if assignments is not None:
                    new = [list(ids) for ids in assignments]
                else:
                    if replication > len(unfenced):
                        raise TopicError(
                            ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the new partitions of {name} {replication} time(s): only "
                            f"{len(unfenced)} broker(s) are unfenced.",
                        )
                    new = assign_replicas(unfenced, count, replication)[len(parts) :]
                if validate_only:
                    raise _ValidateOnly((count, replication))
                parts.extend(_new_partition(ids, unfenced) for ids in new)
        except _ValidateOnly:
            return
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        _log.info("topic %s: %d partition(s) now", name, count)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's overrides in the metadata (validated by the caller)."""
        try:
            with self._locked() as data:
                entry = data.get("topics", {}).get(name)
                if entry is None:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
                entry["configs"] = dict(configs)
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of ``resource`` (``""`` = cluster-wide defaults, else a node id)."""
        try:
            with self._locked() as data:
                table = data.setdefault("broker_configs", {})
                if configs:
                    table[resource] = dict(configs)
                else:
                    table.pop(resource, None)
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None

    def update_acls(self, change: AclChange) -> None:
        """Apply ``change`` to the cluster's ACL list under the lock (see :data:`AclChange`)."""
        try:
            with self._locked() as data:
                current = _parse_acls(data.get("acls"), self.path)
                data["acls"] = [b.to_json() for b in change(current)]
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        """The leader's ISR change (Kafka's AlterPartition); False (and a log line) when it is refused or cannot
        be recorded now. Refused: a caller that is not the recorded leader of ``leader_epoch`` (a leader that was
        replaced while it was not running), and a new member that is fenced or unknown (INELIGIBLE_REPLICA)."""
        try:
            with self._locked() as data:
                entry = data["topics"][topic]["partitions"][partition]
                if entry["leader"] != self.node_id or int(entry["leader_epoch"]) != leader_epoch:
                    raise _Rejected(
                        f"node {self.node_id} in leader epoch {leader_epoch} is not the leader of {topic}-{partition} "
                        f"(leader {entry['leader']}, epoch {entry['leader_epoch']}): FENCED_LEADER_EPOCH"
                    )
                brokers = data.get("brokers", {})
                for member in set(isr) - set(entry["isr"]):
                    info = brokers.get(str(member))
                    if info is None or info.get("fenced", False):
                        raise _Rejected(f"replica {member} is fenced or not registered: INELIGIBLE_REPLICA")
                entry["isr"] = sorted(isr)
                entry["partition_epoch"] = int(entry.get("partition_epoch", 0)) + 1
        except (TimeoutError, _Rejected, KeyError, IndexError, OSError) as exc:
            _log.warning("ISR change of %s-%d to %s not recorded: %s", topic, partition, isr, exc)
            return False
        return True

    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders: the preferred replica (or, ``unclean``, the first live replica of a leaderless
        partition) becomes leader with a new epoch; per partition the outcome. ``partitions`` None means every
        partition, and then only the partitions an election changed or could not change are reported."""
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        try:
            with self._locked() as data:
                topics = data.get("topics", {})
                brokers = data.get("brokers", {})
                live = {int(b) for b, info in brokers.items() if not info.get("fenced", False)}
                wanted = partitions
                if wanted is None:
                    wanted = [(t, i) for t, info in topics.items() for i in range(len(info["partitions"]))]
                for topic, index in wanted:
                    parts = topics.get(topic, {}).get("partitions", [])
                    if not 0 <= index < len(parts):
                        out[(topic, index)] = (
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"{topic}-{index} does not exist",
                        )
                        continue
                    entry = parts[index]
                    if unclean:
                        if int(entry["leader"]) != NO_LEADER:
                            out[(topic, index)] = (
                                ErrorCode.ELECTION_NOT_NEEDED,
                                "the partition has a leader",
                            )
                            continue
                        candidates = [int(r) for r in entry["replicas"] if int(r) in live]
                        done = unfence_broker(entry, candidates[0], unclean=True) if candidates else None
                        if done is None:
                            out[(topic, index)] = (
                                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                f"no replica of {topic}-{index} is live",
                            )
                            continue
                    else:
                        done, why = preferred_election(entry, live)
                        if done is None:
                            out[(topic, index)] = (ErrorCode[why], f"{why} for {topic}-{index}")
                            continue
                    parts[index] = done.entry
                    _log.log(
                        logging.WARNING if done.unclean else logging.INFO,
                        "%s-%d: %s leader election: leader %s -> %d, epoch %d, ISR %s",
                        topic,
                        index,
                        "UNCLEAN" if done.unclean else "preferred",
                        entry["leader"],
                        done.entry["leader"],
                        done.entry["leader_epoch"],
                        done.entry["isr"],
                    )
                    out[(topic, index)] = (ErrorCode.NONE, None)
        except (TimeoutError, OSError) as exc:
            wanted_keys = partitions or []
            return {key: (ErrorCode.REQUEST_TIMED_OUT, str(exc)) for key in wanted_keys}
        if partitions is None:
            out = {k: v for k, v in out.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
        return out

    def allocate_producer_ids(self, floor: int, block_size: int) -> tuple[int, int]:
        """The next block of ``block_size`` producer ids no node has had, starting at ``floor`` or later.

        Kafka's controller hands out producer-id blocks (AllocateProducerIds) and records the next free id in
        its metadata; here ``next_producer_id`` in ``cluster.json``, advanced under the cluster lock, plays
        that part. Raises :class:`~broker_runtime.errors.WaitTimeoutError` when the lock cannot be had.
        """
        with self._locked() as data:
            start = max(int(data.get("next_producer_id", 0)), floor)
            end = start + block_size - 1
            data["next_producer_id"] = end + 1
        _log.info("node %d took producer ids [%d, %d] from %s", self.node_id, start, end, self.path)
        return start, end


def _check_new_count(
    name: str,
    current: int,
    count: int,
    assignments: list[list[int]] | None,
    brokers: list[int],
    replication: int,
) -> None:
    """CreatePartitions' checks (Kafka's ``ReplicationControlManager.createPartitions``)."""
    if count < current:
        raise TopicError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than the requested {count}.",
        )
    if count == current:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    if assignments is not None:
        if len(assignments) != count - current:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {count - current} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        for ids in assignments:
            if len(ids) != replication or len(set(ids)) != len(ids) or any(b not in brokers for b in ids):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"replicas {list(ids)} of a new partition of {name} must be {replication} distinct "
                    f"registered broker(s) of {brokers}",
                )


def _new_partition(replicas: list[int], unfenced: list[int]) -> dict[str, Any]:
    """A new partition: led by its first unfenced replica, the unfenced replicas in sync (a fenced replica of
    an explicit assignment joins the ISR once it runs and catches up); no leader when none is unfenced."""
    live = [r for r in replicas if r in unfenced]
    return {
        "replicas": replicas,
        "leader": live[0] if live else NO_LEADER,
        "leader_epoch": 0,
        "isr": sorted(live) if live else list(replicas),
        "partition_epoch": 0,
    }


class _ValidateOnly(Exception):
    """Leaves the locked block without writing (CreateTopics validateOnly)."""

    def __init__(self, result: tuple[int, int]) -> None:
        super().__init__("validate only")
        self.result = result


class _Rejected(Exception):
    pass
