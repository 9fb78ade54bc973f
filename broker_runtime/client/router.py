"""The client's router: connections, the cached cluster metadata, leader lookup and the one leader-retry driver.

Threading: none inside. A :class:`ClientRouter` (so a :class:`~broker_runtime.client.KafkaClient` and its
facades) belongs to the thread that calls it: its connections, caches and retry state are unguarded. The
connector makes one client per caller (each read or write task on its executor's Python worker, the driver's
planning and commit calls, the streaming sink's kept driver client used one call at a time); a client is cheap,
since connections are opened on first use.

Invariants:
* one :class:`~broker_runtime.client.connection.BrokerConnection` per known broker id (``_conns``), plus at most
  one to a bootstrap address (``_bootstrap_conn``); a connection whose broker left the metadata or moved to
  another address is closed and dropped at the next metadata answer;
* the leader cache (``_leaders``, ``_leader_epochs``) names only brokers of the last metadata answer, and holds
  a partition only while that answer gave it a leader; a partition a call had to retry is dropped from it;
* a closed client opens no connection again.

Routing: :meth:`ClientRouter.metadata` refreshes the cached cluster view (brokers, partition leaders and
their leader epochs; never auto-creating a topic unless asked to). It asks any live broker it knows: open
connections first, then the brokers of the last metadata, then the bootstrap servers, with brokers whose
connection failed recently last; a broker that cannot be reached (refused, reset, timed out) is skipped for
the next one, so a dead bootstrap server is not fatal while another one answers. A broker that leaves the
metadata (a fenced node) takes its connection and its cached leaderships with it.
:meth:`ClientRouter.partitions_for` waits for a topic's partitions (e.g. while the broker auto-creates it).
Cluster-wide admin requests go to the controller when known (:meth:`ClientRouter.controller_connection`, as
Kafka's admin client does); coordinators are found with FindCoordinator (:meth:`ClientRouter.find_coordinator`).

Leader failover, one driver for every partition-led call (:meth:`ClientRouter.call_leaders`: the client's
ListOffsets and Fetch, the admin's DeleteRecords and DescribeProducers): the partitions are grouped by leader,
each leader gets one request (which sends the leader epoch of the cached metadata as ``CurrentLeaderEpoch``
where the API has it: Fetch v9+, ListOffsets v4+; -1 while unknown, which every broker accepts), and the
partitions whose leader moved or is unknown (the caller's answer handler sends them back, typically for
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH: :data:`REFRESH_ERRORS`) or whose leader's connection failed are retried after
``retry_backoff_ms`` and a metadata refresh. The retry budget (:class:`RetryBudget`) is ``retry_timeout_ms``
when given (retry until that much time has passed since the call began), else ``retries`` attempts; the
coordinator calls of the facades spend the same budget. When it runs out the caller gets the partitions still
failing with their last errors (:class:`LeaderRetry`) and decides: raise (naming the partitions, the attempts
and the time spent) or answer per partition.

Errors: connection failures raise :class:`~broker_runtime.errors.BrokerConnectionError` naming ``host:port``;
no bare socket exception escapes. Versions: each API is spoken at ``min(pylog's max, broker's max)``;
``min_versions`` raises the floor per API key for callers that rely on newer fields (Produce is always v3+: the
record batches are magic 2), :data:`DEFAULT_MAX_VERSIONS` caps the transaction APIs at their client versions.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker_runtime.client.connection import BrokerConnection
from broker_runtime.errors import BrokerConnectionError, ConfigError, ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.security import ClientSecurity

__all__ = [
    "COORDINATOR_ERRORS",
    "DEFAULT_MAX_VERSIONS",
    "REFRESH_ERRORS",
    "BrokerMetadata",
    "ClientRouter",
    "ClusterMetadata",
    "LeaderRetry",
    "PartitionMetadata",
    "RetryBudget",
    "TopicMetadata",
    "by_topic",
    "connection_failure",
    "partition_answers",
]

V = TypeVar("V")

#: The partition errors that mean "the leader moved or is not known yet": refresh the metadata and retry.
REFRESH_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
#: The coordinator (of a group, of a transactional id) is not there (yet): find it again and retry.
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
#: Produce carries magic-2 record batches, which need Produce v3+.
_DEFAULT_MIN_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 3}
#: Client-side ceilings: AddPartitionsToTxn v4+ is the broker-to-coordinator batch (KIP-890), and EndTxn v5,
#: Produce v12 and TxnOffsetCommit v5 are transaction version 2 (an epoch bump per transaction, partitions added
#: by their leaders), which this client does not run: it adds its partitions itself and keeps its epoch across
#: transactions (the retry of a completed EndTxn relies on it), as Kafka's Java client below transaction.version 2. Fetch v13+ names topics by id, and this client (and the
#: connector's readers on it) fetch by name. Every Kafka broker with transactions serves these.
DEFAULT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.END_TXN: 4,
    ApiKey.FETCH: 12,
    ApiKey.PRODUCE: 11,
    ApiKey.TXN_OFFSET_COMMIT: 4,
}


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error: int
    is_internal: bool
    partitions: dict[int, PartitionMetadata]
    #: The topic's id (KIP-516; Metadata v10+); the zero UUID when the broker keeps none.
    topic_id: uuid.UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]


def _parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"bootstrap_servers: address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def by_topic(items: Iterable[tuple[TopicPartition, V]]) -> dict[str, list[tuple[int, V]]]:
    """``((topic, partition), value)`` pairs grouped as the requests nest them: topic -> [(partition, value)]."""
    grouped: dict[str, list[tuple[int, V]]] = {}
    for (topic, partition), value in items:
        grouped.setdefault(topic, []).append((partition, value))
    return grouped


def partition_answers(
    topics: Iterable[Mapping[str, Any]],
    *,
    name: str = "Name",
    partitions: str = "Partitions",
    index: str = "PartitionIndex",
) -> Iterator[tuple[TopicPartition, Mapping[str, Any]]]:
    """The per-partition entries of an answer's topic list as ``((topic, partition), entry)``; the field names
    default to the common ones (Fetch answers ``Topic``, Produce ``PartitionResponses`` and ``Index``)."""
    for topic in topics:
        for entry in topic[partitions]:
            yield (topic[name], entry[index]), entry


def connection_failure(exc: KafkaError) -> bool:
    """The broker could not be reached or vanished mid-request (refused, reset, timed out, not in the metadata)."""
    return isinstance(exc, BrokerConnectionError) or exc.code == ErrorCode.BROKER_NOT_AVAILABLE


class RetryBudget:
    """How long one call keeps retrying: ``retry_timeout_ms`` when set, else ``retries`` attempts after the
    first (a budget made with ``retries=False`` allows the first attempt only)."""

    def __init__(self, router: ClientRouter, *, retries: bool = True) -> None:
        self.started = time.monotonic()
        self.attempts = 1
        #: The client's ``retries`` and ``retry_timeout_ms`` when the call began.
        self.retries, self.timeout_ms = router.retries, router.retry_timeout_ms
        self._backoff_s = router.retry_backoff_ms / 1000 if retries else None

    def another_attempt(self) -> bool:
        if self._backoff_s is None:
            return False
        if self.timeout_ms is None:
            more = self.attempts <= self.retries
        else:
            more = time.monotonic() + self._backoff_s < self.started + self.timeout_ms / 1000
        if more:
            self.attempts += 1
        return more

    def spent_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


@dataclass
class LeaderRetry:
    """One partition-led call's partitions to try again, each with the error that sent it back.

    Answer handlers of :meth:`ClientRouter.call_leaders` add to it (:meth:`later`); when the call returns, what
    is left is what still failed when the budget ran out."""

    budget: RetryBudget
    errors: dict[TopicPartition, KafkaError] = field(default_factory=dict)

    def later(self, tp: TopicPartition, exc: KafkaError) -> None:
        self.errors[tp] = exc

    def exhausted(self, what: str) -> KafkaError:
        """The error to raise when the budget is spent: the last one, naming partitions and the time spent."""
        tp, last = next(iter(self.errors.items()))
        budget = self.budget
        bound = (
            f"retries={budget.retries}"
            if budget.timeout_ms is None
            else f"retry budget {budget.timeout_ms} ms"
        )
        names = ", ".join(f"{t}-{p}" for t, p in sorted(self.errors))
        return KafkaError(
            last.code,
            f"{what} of {names} still failing after {budget.attempts} attempt(s) in {budget.spent_ms()} ms "
            f"({bound}); last error for {tp[0]}-{tp[1]}: {last}",
        )


class ClientRouter:
    """Connections, metadata cache and leader lookup of a blocking Kafka-protocol client; see the module
    docstring. :class:`~broker_runtime.client.KafkaClient` adds the data plane and the facades."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "pylog",
        request_timeout_ms: int = 30000,
        retries: int = 3,
        retry_backoff_ms: int = 100,
        retry_timeout_ms: int | None = None,
        min_versions: Mapping[int, int] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        servers = (
            bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
        )
        self._bootstrap = [_parse_address(s) for s in servers if s.strip()]
        if not self._bootstrap:
            raise ConfigError("bootstrap_servers is empty")
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        #: With a value: partition-addressed calls retry leader moves for this long (``retries`` is ignored).
        self.retry_timeout_ms = retry_timeout_ms
        #: api key -> the lowest version this client accepts (a broker offering less is refused).
        self.min_versions = {**_DEFAULT_MIN_VERSIONS, **(min_versions or {})}
        self._bootstrap_conn: BrokerConnection | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._brokers: dict[int, BrokerMetadata] = {}
        self._leaders: dict[TopicPartition, int] = {}
        #: The leader epoch of each cached leader (sent as CurrentLeaderEpoch).
        self._leader_epochs: dict[TopicPartition, int] = {}
        #: ``host:port`` -> when its connection last failed; such brokers are asked for metadata last.
        self._suspects: dict[str, float] = {}
        self._controller_id = -1
        self._closed = False
        #: ``security.protocol`` with its SASL and TLS settings (every connection of this client uses them).
        self.security = security or ClientSecurity()

    # --- lifecycle -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection (idempotent)."""
        self._closed = True
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
            self._bootstrap_conn = None

    # --- connections -----------------------------------------------------------------------------------------

    def _new_conn(self, host: str, port: int, node_id: int | None) -> BrokerConnection:
        if self._closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "the client is closed")
        return BrokerConnection(
            host,
            port,
            client_id=self.client_id,
            timeout_s=self.request_timeout_ms / 1000,
            node_id=node_id,
            min_versions=self.min_versions,
            max_versions=DEFAULT_MAX_VERSIONS,
            security=self.security,
        )

    def _candidates(self) -> Iterator[BrokerConnection]:
        """Connections to ask a cluster-wide question, best first (see the module docstring); not connected yet
        unless they already were. Each address is offered once."""
        offered: set[str] = set()
        open_conns = [
            c for c in (*self._conns.values(), self._bootstrap_conn) if c is not None and c.connected
        ]
        for conn in sorted(open_conns, key=lambda c: self._suspects.get(c.address, 0.0)):
            if conn.address not in offered:
                offered.add(conn.address)
                yield conn
        known: list[tuple[str, int, int | None]] = [
            (b.host, b.port, node_id) for node_id, b in self._brokers.items()
        ]
        known += [(host, port, None) for host, port in self._bootstrap]
        known.sort(key=lambda k: self._suspects.get(f"{k[0]}:{k[1]}", 0.0))  # stable: unsuspected first
        for host, port, node_id in known:
            address = f"{host}:{port}"
            if address in offered:
                continue
            offered.add(address)
            if node_id is not None:
                node_conn = self._conns.get(node_id)
                if node_conn is None:
                    node_conn = self._conns[node_id] = self._new_conn(host, port, node_id)
                yield node_conn
            else:
                conn = self._new_conn(host, port, None)
                if self._bootstrap_conn is not None:
                    self._bootstrap_conn.close()
                self._bootstrap_conn = conn
                yield conn

    def _unreachable(self, failures: list[BrokerConnectionError]) -> BrokerConnectionError:
        if len(failures) == 1:
            return failures[0]
        return BrokerConnectionError(
            ",".join(f"{h}:{p}" for h, p in self._bootstrap),
            "no broker reachable: " + "; ".join(f"{e.address} {e.detail}" for e in failures),
        )

    def _note_failure(self, address: str) -> None:
        self._suspects[address] = time.monotonic()

    def any_connection(self) -> BrokerConnection:
        """A connected broker: the first of the candidates (see the module docstring) that connects."""
        failures: list[BrokerConnectionError] = []
        for conn in self._candidates():
            try:
                conn.connect()
            except BrokerConnectionError as e:
                self._note_failure(conn.address)
                failures.append(e)
                continue
            return conn
        raise self._unreachable(failures)

    def request_any(self, api_key: int, body: Callable[[int], Mapping[str, Any]]) -> dict[str, Any]:
        """Send a cluster-wide request (``body`` built for the negotiated version) to the first candidate broker
        that answers; a broker whose connection fails meanwhile is skipped."""
        failures: list[BrokerConnectionError] = []
        for conn in self._candidates():
            try:
                _, answer = conn.request(api_key, body(conn.version_for(api_key)))
            except BrokerConnectionError as e:
                conn.close()
                self._note_failure(conn.address)
                failures.append(e)
                continue
            self._suspects.pop(conn.address, None)
            return answer
        raise self._unreachable(failures)

    def connection(self, node_id: int | None) -> BrokerConnection:
        """The connected connection to ``node_id`` (metadata refreshed when the node is not known yet;
        BROKER_NOT_AVAILABLE when it is not in the cluster), or to any broker for ``None``."""
        if node_id is None:
            return self.any_connection()
        conn = self._conns.get(node_id)
        if conn is None:
            broker = self._brokers.get(node_id)
            if broker is None:
                self.metadata([])
                broker = self._brokers.get(node_id)
                if broker is None:
                    raise KafkaError(
                        ErrorCode.BROKER_NOT_AVAILABLE, f"node {node_id} is not in the cluster metadata"
                    )
            conn = self._new_conn(broker.host, broker.port, node_id)
            self._conns[node_id] = conn
        conn.connect()
        return conn

    def controller_connection(self) -> BrokerConnection:
        """The controller's connection when the metadata names it (admin requests go there, as Kafka's admin
        client sends them), else any broker's; metadata is fetched first when none was yet."""
        if self._controller_id < 0 and not self._brokers:
            self.metadata([])
        return self.connection(self._controller_id if self._controller_id in self._brokers else None)

    def disconnect(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (no-op when there is none); the next call reconnects.

        Requests in flight on it are lost: polling their :class:`~broker_runtime.client.InFlight` handles raises
        :class:`BrokerConnectionError` (answers read before the close are still returned). The broker is
        asked for metadata after the others until it answers again (callers disconnect a failed broker).
        """
        conn = self._conns.get(node_id)
        if conn is not None:
            conn.close()
            self._note_failure(conn.address)

    def api_versions(self, node: int | None = None) -> dict[int, tuple[int, int]]:
        """The broker's advertised version ranges (api key -> (min, max)); the client speaks
        ``min(pylog's max, broker's max)`` of each."""
        return dict(self.connection(node).broker_versions)

    def negotiated_version(self, api_key: int, node: int | None = None) -> int:
        return self.connection(node).version_for(api_key)

    def backoff(self) -> None:
        """Sleep ``retry_backoff_ms`` (between two attempts of a retried call)."""
        time.sleep(self.retry_backoff_ms / 1000)

    # --- metadata --------------------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> ClusterMetadata:
        """Fetch cluster metadata for ``topics`` (``None`` = all topics) and refresh the leader cache."""

        def request(version: int) -> dict[str, Any]:
            if topics is None:
                wanted: list[dict[str, Any]] | None = [] if version == 0 else None
            else:
                if version == 0 and not topics:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "Metadata v0 cannot ask for no topics")
                wanted = [{"Name": t} for t in topics]
            return {
                "Topics": wanted,
                "AllowAutoTopicCreation": allow_auto_create,
                "IncludeClusterAuthorizedOperations": False,
                "IncludeTopicAuthorizedOperations": False,
            }

        body = self.request_any(ApiKey.METADATA, request)
        if body["ErrorCode"]:  # v13+ (KIP-1102): REBOOTSTRAP_REQUIRED, which this client does not do
            raise KafkaError(
                body["ErrorCode"],
                "Metadata answered a top-level error: the broker wants the client to bootstrap again",
            )
        brokers = {
            b["NodeId"]: BrokerMetadata(b["NodeId"], b["Host"], b["Port"], b["Rack"]) for b in body["Brokers"]
        }
        result_topics: dict[str, TopicMetadata] = {}
        for t in body["Topics"]:
            name = t["Name"]
            partitions = {}
            for p in t["Partitions"]:
                pm = PartitionMetadata(
                    name,
                    p["PartitionIndex"],
                    p["LeaderId"],
                    p["LeaderEpoch"],
                    tuple(p["ReplicaNodes"]),
                    tuple(p["IsrNodes"]),
                    tuple(p["OfflineReplicas"]),
                    p["ErrorCode"],
                )
                partitions[pm.partition] = pm
                if pm.leader >= 0:
                    self._leaders[(name, pm.partition)] = pm.leader
                    self._leader_epochs[(name, pm.partition)] = pm.leader_epoch
                else:
                    self._forget_leader((name, pm.partition))
            result_topics[name] = TopicMetadata(
                name, t["ErrorCode"], t["IsInternal"], partitions, t.get("TopicId", uuid.UUID(int=0))
            )
        self._update_brokers(brokers)
        self._controller_id = body["ControllerId"]
        return ClusterMetadata(body["ClusterId"], body["ControllerId"], brokers, result_topics)

    def _update_brokers(self, brokers: dict[int, BrokerMetadata]) -> None:
        for node_id, conn in list(self._conns.items()):
            b = brokers.get(node_id)
            if b is None or (b.host, b.port) != (conn.host, conn.port):
                conn.close()
                del self._conns[node_id]
        # A broker gone from the metadata (fenced, dead) leads nothing any more, whatever the cache says.
        for tp, node_id in list(self._leaders.items()):
            if node_id not in brokers:
                self._forget_leader(tp)
        self._brokers = brokers

    def _forget_leader(self, tp: TopicPartition) -> None:
        self._leaders.pop(tp, None)
        self._leader_epochs.pop(tp, None)

    def partitions_for(
        self, topic: str, *, allow_auto_create: bool = False, timeout_ms: int | None = None
    ) -> list[int]:
        """The sorted partition ids of ``topic``, waiting while the broker reports a retriable error.

        With ``allow_auto_create`` the Metadata request lets a broker with auto.create.topics.enable create
        a missing topic (which may take a moment, hence the wait). Waits at most
        ``timeout_ms`` (default: the request timeout), then raises ``KafkaError`` with the last code.
        """
        wait_s = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            t = self.metadata([topic], allow_auto_create=allow_auto_create).topics.get(topic)
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t is None else t.error
            if code == ErrorCode.NONE and t is not None:
                if t.partitions:
                    return sorted(t.partitions)
                code = ErrorCode.LEADER_NOT_AVAILABLE  # created, partitions not assigned yet
            err = KafkaError(code, f"metadata of topic {topic!r}")
            if not err.retriable or time.monotonic() > deadline:
                raise err
            self.backoff()

    def leader_for(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``/``partition`` (metadata refreshed when unknown)."""
        leader = self._leaders.get((topic, partition))
        if leader is not None:
            return leader
        md = self.metadata([topic])
        t = md.topics.get(topic)
        if t is None or t.error:
            raise KafkaError(
                t.error if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"metadata of topic {topic}"
            )
        p = t.partitions.get(partition)
        if p is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} has no partition {partition}"
            )
        if p.leader < 0:
            raise KafkaError(
                p.error or ErrorCode.LEADER_NOT_AVAILABLE, f"topic {topic} partition {partition}"
            )
        return p.leader

    def leader_epoch_for(self, topic: str, partition: int) -> int:
        """The leader epoch of the cached metadata for ``topic``/``partition``; -1 when unknown."""
        return self._leader_epochs.get((topic, partition), -1)

    def find_coordinator(self, key: str, key_type: int, what: str) -> int:
        """The node coordinating ``key`` (FindCoordinator of ``key_type``); its address joins the known brokers.
        Raises ``KafkaError`` with FindCoordinator's code, naming ``what``."""
        conn = self.any_connection()
        version = conn.version_for(ApiKey.FIND_COORDINATOR)
        _, body = conn.request(
            ApiKey.FIND_COORDINATOR, {"Key": key, "KeyType": key_type, "CoordinatorKeys": [key]}
        )
        found = body["Coordinators"][0] if version >= 4 else body
        if found["ErrorCode"]:
            raise KafkaError(found["ErrorCode"], f"FindCoordinator for {what}")
        node = found["NodeId"]
        if node not in self._brokers:
            self._brokers = {**self._brokers, node: BrokerMetadata(node, found["Host"], found["Port"])}
        return int(node)

    # --- the leader-retry driver -----------------------------------------------------------------------------

    def call_leaders(
        self,
        todo: Mapping[TopicPartition, V],
        request: Callable[[int, dict[TopicPartition, V]], dict[str, Any]],
        answer: Callable[[int, dict[str, Any], LeaderRetry], None],
        *,
        retries: bool = True,
    ) -> LeaderRetry:
        """Run one partition-led call: each leader of ``todo``'s partitions gets ``request(node, its share)``
        (which sends it and returns the answer's body), then ``answer(node, body, retry)`` reads it, putting
        the partitions whose leader moved on ``retry`` (``retry.later``). Partitions without a leader now
        (a retriable metadata error) and those of a leader whose connection failed are retried too; each
        retried partition leaves the leader cache. Between rounds: ``retry_backoff_ms`` and a metadata refresh
        of their topics, while the :class:`RetryBudget` lasts (one round only with ``retries=False``).

        Returns the last round's :class:`LeaderRetry`: empty when every partition was answered, else the
        partitions still failing with their last errors (the caller raises or answers them per partition).
        A non-retriable metadata error, or any other error of ``request``, is raised as it is.
        """
        budget = RetryBudget(self, retries=retries)
        pending = dict(todo)
        while True:
            retry = LeaderRetry(budget)
            for node, tps in self._group_by_leader(pending, retry).items():
                try:
                    body = request(node, {tp: pending[tp] for tp in tps})
                except KafkaError as e:
                    if not connection_failure(e):
                        raise
                    self.disconnect(node)
                    for tp in tps:
                        retry.later(tp, e)
                    continue
                answer(node, body, retry)
            for tp in retry.errors:
                self._forget_leader(tp)
            if not retry.errors or not budget.another_attempt():
                return retry
            pending = {tp: pending[tp] for tp in retry.errors}
            self._refresh_for(pending)

    def _group_by_leader(
        self, keys: Iterable[TopicPartition], retry: LeaderRetry
    ) -> dict[int, list[TopicPartition]]:
        """Partitions by leader; a partition without a leader now (retriable) is left to ``retry``."""
        groups: dict[int, list[TopicPartition]] = {}
        for tp in keys:
            try:
                leader = self.leader_for(*tp)
            except KafkaError as e:
                if not e.retriable:
                    raise
                retry.later(tp, e)
                continue
            groups.setdefault(leader, []).append(tp)
        return groups

    def _refresh_for(self, tps: Iterable[TopicPartition]) -> None:
        """Back off, then reload the leaders of ``tps``' topics; a failing refresh is left to the next round."""
        self.backoff()
        with contextlib.suppress(KafkaError):
            self.metadata(sorted({t for t, _ in tps}))
