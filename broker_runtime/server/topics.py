"""Topics of this broker: names, partition counts, per-topic configs, creation of the local partition logs.

Single node: the truth lives in the storage (one log directory per partition, topic overrides kept by the
LogManager); this class keeps an in-memory map ``topic -> partition count`` rebuilt from
``LogManager.all_logs()`` at start and updated on every creation, plus a cache of each topic's effective
:class:`LogConfig`.

Cluster: the cluster metadata is the truth for names, partition counts and configs (:meth:`use_cluster`
installs it); this broker creates only the logs of the partitions it hosts (:meth:`ensure_partition`), and
``get_log`` answers None for the others.

Topic name rules are Kafka's (``org.apache.kafka.common.internals.Topic``): 1..249 characters of
``[a-zA-Z0-9._-]``, not ``.`` or ``..``; a name that equals an existing one after mapping ``.`` to ``_`` collides.

Changes after creation (the admin APIs): :meth:`TopicManager.delete` removes a topic's local logs (DeleteTopics),
:meth:`TopicManager.add_partitions` creates the logs of new partitions (CreatePartitions, single node),
:meth:`TopicManager.set_overrides` replaces a topic's overrides and :meth:`TopicManager.set_base` the broker
defaults (AlterConfigs / IncrementalAlterConfigs); both reconfigure the open logs at once, as Kafka applies its
dynamic log configs. In a cluster :meth:`TopicManager.apply_cluster_view` does the same from the metadata: it
deletes the local logs of topics the metadata no longer has and applies changed overrides.

Loads off the event loop: the request paths (CreateTopics, CreatePartitions, Metadata's auto-creation on a
single node; the partitions the cluster metadata assigns here) create their logs on one thread named
``pylog-partition-load`` (:meth:`create_in_background`, :meth:`add_partitions_in_background`,
:meth:`hosted_or_load`; there too a stray replica moved aside and, at the first start of a cluster upgraded from
topic-id-less metadata, the ``partition.metadata`` written to each hosted directory), since a creation is
directories, files and fsyncs (about a millisecond a partition on a
quiet disk, far more on a slow one: the loop would stall every connection that long). A partition is served
only once registered here, on the loop, after its load: until then lookups say it does not exist (single node)
or is not hosted (cluster, NOT_LEADER_OR_FOLLOWER), and clients retry, as they do while Kafka's brokers apply
new metadata. The coordinators' first use of ``__consumer_offsets`` / ``__transaction_state`` on a single node
still creates them with :meth:`create`, on the loop.

Topic ids (KIP-516): every topic has one, a random UUID drawn when it is created
(:func:`~broker_runtime.protocol.topic_id.new_topic_id`) and written to each of its partition directories as
``partition.metadata`` (:mod:`broker_runtime.storage.partition_metadata`). Single node: those files are the truth;
:meth:`load` refuses (:class:`~broker_runtime.errors.InconsistentTopicIdError`, the broker does not start) a topic
whose partition directories name different ids, and gives a topic whose directories have none (written before
pylog had topic ids) a new id, written to each, saying so at WARNING. Cluster: the metadata's id is the truth; a
hosted partition's directory without a file gets it; one naming another id is a stray replica (Kafka's
``LogManager.isStrayKraftReplica``: the topic was deleted and created again while this broker was away): it is
never served, its directory is renamed ``<topic>-<partition>.<id>-stray`` (:meth:`LogManager.mark_stray`, kept
for the operator to remove, as Kafka keeps it) with a WARNING naming both ids, and the replica of the current
topic is created empty in its place and catches up from the leader; such a log of a partition this broker does not
host (the new incarnation was placed elsewhere) is moved aside the same way (:meth:`drop_stray`).

Errors are reported as :class:`TopicError` carrying the Kafka error code and a message naming the topic.
Thread-safety: event-loop thread only (the file work of a load runs on the partition-load thread through the
thread-safe :class:`LogManager`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from broker_runtime.errors import ConfigError, ErrorCode, InconsistentTopicIdError, TopicError
from broker_runtime.protocol.topic_id import format_topic_id, new_topic_id
from broker_runtime.security.secrets import is_sensitive, redacted
from broker_runtime.storage.config import TOPIC_CONFIG_NAMES, LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["MAX_TOPIC_NAME_LENGTH", "TopicError", "TopicManager", "topic_name_error"]

_log = logging.getLogger(__name__)
_K = TypeVar("_K")
_V = TypeVar("_V")

#: What the cluster metadata says of a topic: (partition count, configs, topic id).
ClusterTopic = tuple[int, Mapping[str, str], "uuid.UUID | None"]


def sensitive_topic_config(name: str, value: str | None) -> bool:
    """True when topic config ``name`` = ``value`` is a secret (:mod:`broker_runtime.security.secrets`: an unknown
    name, or a value holding a JAAS entry or a key): answered null with ``IsSensitive=true``, logged hidden."""
    return is_sensitive(name, value, known=TOPIC_CONFIG_NAMES)


def _loggable(overrides: Mapping[str, str]) -> dict[str, str | None] | str:
    """Topic configs as a log line shows them: any sensitive value ``[hidden]``."""
    return redacted(overrides, known=TOPIC_CONFIG_NAMES) if overrides else ""


MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return f"Topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_NAME.match(name):
        return f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


class _Counted(dict[_K, _V]):
    """A dict counting its changes (:attr:`changes`, bumped by every write, even of an equal value): the topic
    manager's :attr:`TopicManager.version` is made of these counts, so no write path can forget to bump it."""

    changes = 0

    def __setitem__(self, key: _K, value: _V) -> None:
        self.changes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: _K) -> None:
        self.changes += 1
        super().__delitem__(key)

    def pop(self, key: _K, *default: Any) -> Any:
        self.changes += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[_K, _V]:
        self.changes += 1
        return super().popitem()

    def clear(self) -> None:
        self.changes += 1
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.changes += 1
        super().update(*args, **kwargs)

    def setdefault(self, key: _K, default: Any = None) -> Any:
        self.changes += 1
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> _Counted[_K, _V]:  # type: ignore[override,misc]
        self.changes += 1
        super().update(other)
        return self


class TopicManager:
    """Topic names and partition counts over a :class:`LogManager`; see the module docstring."""

    def __init__(self, logs: LogManager, log_config: LogConfig) -> None:
        self._logs = logs
        self._log_config = log_config
        # Both count their writes: :attr:`version`.
        self._partitions: _Counted[str, int] = _Counted()
        self._configs: dict[str, LogConfig] = {}
        self._logs_by_tp: dict[tuple[str, int], PartitionLog] = {}
        #: Single node: each topic's id (read from, or written to, its partition directories).
        self._topic_ids: _Counted[str, uuid.UUID] = _Counted()
        self._cluster_topics: Callable[[], Mapping[str, ClusterTopic]] | None = None
        #: Loads in progress on the partition-load thread, by topic: single node, the topic being created
        #: (count, future); cluster, each partition being loaded (``(topic, partition)`` keys).
        self._creating: dict[str, tuple[int, asyncio.Future[None]]] = {}
        self._loading: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._adding: dict[str, asyncio.Future[None]] = {}
        self._loader: ThreadPoolExecutor | None = None
        #: Cluster: local logs of another incarnation of their topic moved aside (each also a WARNING line).
        self.stray_logs = 0
        #: Partition loads that failed (each also an ERROR line), for the metrics.
        self.load_failures = 0

    def use_cluster(self, topics: Callable[[], Mapping[str, ClusterTopic]]) -> None:
        """Take names, partition counts, overrides and topic ids from the cluster metadata (see
        :data:`ClusterTopic`)."""
        self._cluster_topics = topics

    def load(self) -> None:
        """Rebuild the topic map from the logs the storage recovered."""
        self._partitions.clear()
        self._logs_by_tp.clear()
        self._topic_ids.clear()
        by_topic: dict[str, list[PartitionLog]] = {}
        for log in self._logs.all_logs().values():
            self._logs_by_tp[(log.topic, log.partition)] = log
            self._partitions[log.topic] = max(self._partitions.get(log.topic, 0), log.partition + 1)
            by_topic.setdefault(log.topic, []).append(log)
        if self._cluster_topics is None:
            for name, logs in sorted(by_topic.items()):
                self._topic_ids[name] = self._single_node_topic_id(name, logs)

    def _single_node_topic_id(self, name: str, logs: list[PartitionLog]) -> uuid.UUID:
        """The id the partition directories of ``name`` agree on; assigned (and said) when none has one."""
        found = {log.topic_id for log in logs if log.topic_id is not None}
        if len(found) > 1:
            listed = ", ".join(
                f"{log.name}: {format_topic_id(log.topic_id) if log.topic_id else 'none'}"
                for log in sorted(logs, key=lambda lg: lg.partition)
            )
            raise InconsistentTopicIdError(
                f"the partition directories of topic {name} name different topic ids in their "
                f"partition.metadata ({listed}): some belong to another topic of that name; move those away"
            )
        topic_id = found.pop() if found else new_topic_id()
        missing = [log for log in logs if log.topic_id is None]
        for log in missing:
            self._logs.assign_topic_id(log, topic_id)
        if missing and len(missing) == len(logs):
            _log.warning(
                "topic %s had no topic id (its partition directories predate topic ids): assigned %s, "
                "written to partition.metadata of its %d partition(s)",
                name,
                format_topic_id(topic_id),
                len(logs),
            )
        return topic_id

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id, or None for an unknown topic (or, in a cluster, a topic the metadata has no id for)."""
        if self._cluster_topics is not None:
            found = self._cluster_topics().get(name)
            return None if found is None else found[2]
        return self._topic_ids.get(name)

    @property
    def version(self) -> int:
        """Grows with every change of a single node's topic names, partition counts or topic ids (what its
        cluster view is made of: :class:`~broker_runtime.server.cluster.SingleNodeCluster` rebuilds its view
        only when this moved). Counted by the maps themselves, so every write path bumps it."""
        return self._partitions.changes + self._topic_ids.changes

    # -- queries ------------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        if self._cluster_topics is not None:
            return sorted(self._cluster_topics())
        return sorted(self._partitions)

    def partition_count(self, topic: str) -> int | None:
        if self._cluster_topics is not None:
            found = self._cluster_topics().get(topic)
            return None if found is None else found[0]
        return self._partitions.get(topic)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The PartitionLog of (topic, partition), or None when it does not exist."""
        return self._logs_by_tp.get((topic, partition))

    def config(self, topic: str) -> LogConfig:
        """The topic's effective log config (broker defaults + its overrides)."""
        cfg = self._configs.get(topic)
        if cfg is None:
            overrides = self.overrides(topic)
            cfg = self._log_config.with_topic_overrides(overrides) if overrides else self._log_config
            self._configs[topic] = cfg
        return cfg

    def overrides(self, topic: str) -> dict[str, str]:
        if self._cluster_topics is not None:
            found = self._cluster_topics().get(topic)
            if found is not None:
                return dict(found[1])
        return dict(self._logs.topic_overrides(topic) or {})

    # -- creation -----------------------------------------------------------------------------------------

    def check_new(self, name: str, num_partitions: int, overrides: Mapping[str, str]) -> LogConfig:
        """Validate a creation without doing it; returns the would-be config or raises :class:`TopicError`."""
        problem = topic_name_error(name)
        if problem is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self._partitions or name in self._creating:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        folded = name.replace(".", "_")
        for existing in [*self._partitions, *self._creating]:
            if existing.replace(".", "_") == folded:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        return self.check_config(name, num_partitions, overrides)

    def check_config(self, name: str, num_partitions: int, overrides: Mapping[str, str]) -> LogConfig:
        """The partition-count and config checks of a creation (no name or existence checks)."""
        if num_partitions <= 0:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions must be larger than 0, got {num_partitions}.",
            )
        try:
            return self._log_config.with_topic_overrides(dict(overrides)) if overrides else self._log_config
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    def create(self, name: str, num_partitions: int, overrides: Mapping[str, str] | None = None) -> None:
        """Create the topic's partition logs (validated first); raises :class:`TopicError`."""
        overrides = dict(overrides or {})
        self.check_new(name, num_partitions, overrides)
        topic_id = new_topic_id()
        for partition in range(num_partitions):
            log = self._logs.create_log(name, partition, overrides, topic_id=topic_id)
            self._logs_by_tp[(name, partition)] = log
        self._partitions[name] = num_partitions
        self._topic_ids[name] = topic_id
        self._configs.pop(name, None)
        _log.info("created topic %s with %d partition(s) %s", name, num_partitions, _loggable(overrides))

    # -- loads on the partition-load thread ---------------------------------------------------------------

    def _load_thread(self) -> ThreadPoolExecutor:
        if self._loader is None:
            self._loader = ThreadPoolExecutor(1, thread_name_prefix="pylog-partition-load")
        return self._loader

    def _move_stray(
        self, name: str, partition: int, stray: uuid.UUID, topic_id: uuid.UUID | None, hosted: bool = True
    ) -> None:
        """Move aside the log of ``name``-``partition`` that belongs to the topic's incarnation ``stray``."""
        aside = self._logs.mark_stray(name, partition)
        self.stray_logs += 1
        _log.warning(
            "partition %s-%d: the local log belongs to topic id %s, not to the topic's current id %s (the topic "
            "was deleted and created again while this broker was away): marked stray and moved to %s; %s",
            name,
            partition,
            format_topic_id(stray),
            format_topic_id(topic_id) if topic_id is not None else "none",
            aside,
            "the replica of the current topic is created empty and catches up from the leader"
            if hosted
            else "this broker is not a replica of the current topic's partition",
        )

    def _create_logs(
        self,
        name: str,
        partitions: Sequence[int],
        overrides: Mapping[str, str],
        topic_id: uuid.UUID | None,
        stray: uuid.UUID | None = None,
        adopt: PartitionLog | None = None,
    ) -> list[PartitionLog]:
        """Partition-load thread: the logs of ``partitions``, all or none (a failure deletes the ones made);
        with ``stray``, the one partition's log of that other incarnation is moved aside first; with ``adopt``,
        that existing log (written before topic ids) of the one partition is given ``topic_id`` instead."""
        if adopt is not None and topic_id is not None:
            self._logs.assign_topic_id(adopt, topic_id)
            return [adopt]
        made: list[PartitionLog] = []
        if stray is not None:
            self._move_stray(name, partitions[0], stray, topic_id)
        try:
            for partition in partitions:
                made.append(self._logs.create_log(name, partition, dict(overrides), topic_id=topic_id))
        except BaseException:
            for log in made:
                try:
                    self._logs.delete_log(name, log.partition)
                except Exception:  # noqa: BLE001 - the first failure is the one reported
                    _log.exception(
                        "could not remove the log of %s-%d after a failed load", name, log.partition
                    )
            raise
        return made

    def _start_load(
        self,
        name: str,
        partitions: Sequence[int],
        overrides: Mapping[str, str],
        topic_id: uuid.UUID | None,
        stray: uuid.UUID | None = None,
        adopt: PartitionLog | None = None,
    ) -> asyncio.Future[list[PartitionLog]]:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(
            self._load_thread(),
            self._create_logs,
            name,
            list(partitions),
            dict(overrides),
            topic_id,
            stray,
            adopt,
        )

    def _load_failed(self, name: str, partitions: Sequence[int], exc: BaseException) -> TopicError:
        self.load_failures += 1
        _log.error("could not create the logs of %s partitions %s: %s", name, list(partitions), exc)
        return TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"could not create the logs of topic {name}: {exc}")

    def create_in_background(
        self, name: str, num_partitions: int, overrides: Mapping[str, str] | None = None
    ) -> asyncio.Future[None]:
        """Like :meth:`create`, with the file work on the partition-load thread (event loop only). Until the
        returned future is done the topic does not exist for lookups (Metadata, Produce and Fetch see an unknown
        topic) but a second creation of the name fails with TOPIC_ALREADY_EXISTS; then every partition is
        registered at once. A failure (the future's :class:`TopicError`, KAFKA_STORAGE_ERROR) leaves no log."""
        overrides = dict(overrides or {})
        self.check_new(name, num_partitions, overrides)
        topic_id = new_topic_id()
        loading = self._start_load(name, range(num_partitions), overrides, topic_id)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creating[name] = (num_partitions, done)

        def finish(loaded: asyncio.Future[list[PartitionLog]]) -> None:
            self._creating.pop(name, None)
            exc = loaded.exception()
            if exc is not None:
                done.set_exception(self._load_failed(name, range(num_partitions), exc))
                return
            for log in loaded.result():
                self._logs_by_tp[(name, log.partition)] = log
            self._partitions[name] = num_partitions
            self._topic_ids[name] = topic_id
            self._configs.pop(name, None)
            _log.info("created topic %s with %d partition(s) %s", name, num_partitions, _loggable(overrides))
            done.set_result(None)

        loading.add_done_callback(finish)
        return done

    def add_partitions_in_background(self, name: str, count: int) -> asyncio.Future[None]:
        """Like :meth:`add_partitions`, the logs made on the partition-load thread (event loop only); the new
        count shows once every new log is registered. A failure leaves none of the new logs."""
        current = self._partitions.get(name, 0)
        overrides = self.overrides(name)
        new = range(current, count)
        loading = self._start_load(name, new, overrides, self.topic_id(name))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._adding[name] = done

        def finish(loaded: asyncio.Future[list[PartitionLog]]) -> None:
            self._adding.pop(name, None)
            exc = loaded.exception()
            if exc is not None:
                done.set_exception(self._load_failed(name, new, exc))
                return
            for log in loaded.result():
                self._logs_by_tp[(name, log.partition)] = log
            self._partitions[name] = max(self._partitions.get(name, 0), count)
            _log.info("topic %s: partitions %d -> %d", name, current, count)
            done.set_result(None)

        loading.add_done_callback(finish)
        return done

    def hosted_or_load(
        self,
        name: str,
        partition: int,
        overrides: Mapping[str, str],
        on_loaded: Callable[[], None],
        topic_id: uuid.UUID | None = None,
    ) -> PartitionLog | None:
        """Cluster mode: the local log of a partition this broker hosts, or None while it is being created on
        the partition-load thread (started here when absent); ``on_loaded`` runs on the loop once it is
        registered, so the caller can apply the latest metadata to it. A topic the metadata no longer has by
        then is deleted again instead; a failed load is logged, counted and retried at the next call. Off an
        event loop (tools, unit tests) the log is made at once. With ``topic_id`` (the metadata's), a log whose
        ``partition.metadata`` names another id is a stray (see the module docstring): it is unregistered at once
        (never served again), then moved aside and replaced by a new, empty log on the partition-load thread; one
        without the file (written before topic ids: the first start of an upgraded cluster) is unregistered until
        the partition-load thread has written the id to it."""
        key = (name, partition)
        if key in self._loading:
            return None
        log = self._logs_by_tp.get(key)
        stray: uuid.UUID | None = None
        adopt: PartitionLog | None = None
        if log is not None and topic_id is not None and log.topic_id != topic_id:
            # File work either way, on the partition-load thread; not served until it is done.
            del self._logs_by_tp[key]
            if log.topic_id is None:  # written before topic ids: this topic's log, given the id
                adopt = log
            else:  # another incarnation's: moved aside, replaced by a new log
                stray = log.topic_id
            log = None
        if log is not None:
            return log
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (tools, unit tests): made here and now
            self._create_logs(name, [partition], overrides, topic_id, stray, adopt)
            return self.ensure_partition(name, partition, overrides, topic_id)
        loading = self._start_load(name, [partition], overrides, topic_id, stray, adopt)
        self._loading[key] = loading

        def finish(loaded: asyncio.Future[list[PartitionLog]]) -> None:
            self._loading.pop(key, None)
            exc = loaded.exception()
            if exc is not None:
                self._load_failed(name, [partition], exc)
                return
            if self._cluster_topics is not None and name not in self._cluster_topics():
                self._logs.delete_log(name, partition)  # deleted while it loaded
                return
            self._logs_by_tp[key] = loaded.result()[0]
            self._partitions[name] = max(self._partitions.get(name, 0), partition + 1)
            self._configs.pop(name, None)
            on_loaded()

        loading.add_done_callback(finish)
        return None

    def drop_stray(
        self, name: str, partition: int, topic_id: uuid.UUID | None, on_done: Callable[[], None]
    ) -> None:
        """Cluster mode, a partition this broker does not host: a local log of it whose ``partition.metadata``
        names another id than the metadata's ``topic_id`` (an older incarnation; the new one was placed on other
        brokers while this one was away) is unregistered at once and moved aside on the partition-load thread,
        like a hosted stray (:meth:`hosted_or_load`); ``on_done`` runs on the loop afterwards (the partition may
        have been assigned here meanwhile). A failure is logged at ERROR and counted in ``load_failures``."""
        key = (name, partition)
        log = self._logs_by_tp.get(key)
        if log is None or key in self._loading or topic_id is None:
            return
        if log.topic_id is None or log.topic_id == topic_id:
            return
        stray = log.topic_id
        del self._logs_by_tp[key]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (tools, unit tests): here and now
            self._move_stray(name, partition, stray, topic_id, hosted=False)
            return
        moving = loop.run_in_executor(
            self._load_thread(), self._move_stray, name, partition, stray, topic_id, False
        )
        self._loading[key] = moving

        def finish(moved: asyncio.Future[None]) -> None:
            self._loading.pop(key, None)
            exc = moved.exception()
            if exc is not None:
                self.load_failures += 1
                _log.error("could not move aside the stray log of %s-%d: %s", name, partition, exc)
                return
            on_done()

        moving.add_done_callback(finish)

    def pending(self, name: str) -> list[asyncio.Future[Any]]:
        """The creation, partition addition or partition loads of topic ``name`` not finished yet."""
        found: list[asyncio.Future[Any]] = [done for t, (_, done) in self._creating.items() if t == name]
        if name in self._adding:
            found.append(self._adding[name])
        found.extend(f for (t, _), f in self._loading.items() if t == name)
        return found

    def stop_loads(self) -> None:
        """Shutdown: wait for the partition-load thread's current work and stop it."""
        if self._loader is not None:
            self._loader.shutdown(wait=True)
            self._loader = None

    def ensure_partition(
        self, name: str, partition: int, overrides: Mapping[str, str], topic_id: uuid.UUID | None = None
    ) -> PartitionLog:
        """The local log of a partition this broker hosts, created when absent (cluster mode)."""
        log = self._logs_by_tp.get((name, partition))
        if log is None:
            log = self._logs.create_log(name, partition, dict(overrides), topic_id=topic_id)
            self._logs_by_tp[(name, partition)] = log
            self._partitions[name] = max(self._partitions.get(name, 0), partition + 1)
            self._configs.pop(name, None)
        return log

    # -- changes ------------------------------------------------------------------------------------------

    def delete(self, name: str) -> int:
        """Delete every local partition log of ``name``; returns how many were deleted."""
        deleted = 0
        for topic, partition in sorted(self._logs_by_tp):
            if topic == name and self._logs.delete_log(topic, partition):
                deleted += 1
            if topic == name:
                del self._logs_by_tp[(topic, partition)]
        self._partitions.pop(name, None)
        self._configs.pop(name, None)
        self._topic_ids.pop(name, None)
        if deleted:
            _log.info("deleted topic %s (%d local partition(s))", name, deleted)
        return deleted

    def add_partitions(self, name: str, count: int) -> None:
        """Single node: create the logs of partitions ``current..count-1`` with the topic's overrides."""
        current = self._partitions.get(name, 0)
        overrides = self.overrides(name)
        for partition in range(current, count):
            self._logs_by_tp[(name, partition)] = self._logs.create_log(
                name, partition, overrides, topic_id=self.topic_id(name)
            )
        self._partitions[name] = max(current, count)
        _log.info("topic %s: partitions %d -> %d", name, current, count)

    def set_overrides(self, name: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's overrides (persisted with each local partition) and apply them now."""
        try:
            self._logs.set_topic_overrides(name, dict(overrides))
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        self._configs.pop(name, None)

    def set_base(self, log_config: LogConfig) -> None:
        """New broker-level defaults (dynamic broker configs): every local log is reconfigured now."""
        self._log_config = log_config
        self._logs.set_base_config(log_config)
        self._configs.clear()

    @property
    def base(self) -> LogConfig:
        """The broker-level defaults every topic starts from."""
        return self._log_config

    def apply_cluster_view(self, names: Mapping[str, Mapping[str, str]], deleted: set[str]) -> list[str]:
        """Cluster mode: ``names`` maps each topic of the metadata to its overrides. Local logs of topics in
        ``deleted`` (no longer in the metadata) are deleted; changed overrides are applied. Returns the topics
        deleted here."""
        gone: list[str] = []
        self._configs.clear()  # overrides of topics hosted elsewhere may have changed too
        local = {t for t, _ in self._logs_by_tp}
        for name in sorted(local & deleted):
            if name not in names:
                self.delete(name)
                gone.append(name)
        for name in sorted(local & set(names)):
            wanted = dict(names[name])
            log = next(log for (t, _), log in self._logs_by_tp.items() if t == name)
            if dict(log.config.topic_overrides) != wanted:
                self.set_overrides(name, wanted)
        return gone

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start-offset and replication checkpoints now (after DeleteRecords)."""
        self._logs.checkpoint()

    def local_logs(self) -> dict[tuple[str, int], PartitionLog]:
        """Every partition log this broker holds."""
        return dict(self._logs_by_tp)

    def dir_of(self, topic: str, partition: int) -> str | None:
        """The log directory holding a local partition, or None."""
        found = self._logs.dir_of(topic, partition)
        return None if found is None else str(found)
