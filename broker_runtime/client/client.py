"""A small synchronous Kafka-protocol client: metadata, topic creation, offsets, fetch and pipelined produce.

Used by the Spark connector (driver and executors), the CLI tools and the tests, against pylog's broker or a
real Kafka cluster. One blocking :class:`~broker_runtime.client.connection.BrokerConnection` per broker,
opened on first use; versions are negotiated per connection through ApiVersions.

Routing: :meth:`KafkaClient.metadata` refreshes the cached cluster view (brokers, partition leaders and
their leader epochs; never auto-creating a topic unless asked to). It asks any live broker it knows: open
connections first, then the brokers of the last metadata, then the bootstrap servers, with brokers whose
connection failed recently last; a broker that cannot be reached (refused, reset, timed out) is skipped for
the next one, so a dead bootstrap server is not fatal while another one answers. A broker that leaves the
metadata (a fenced node) takes its connection and its cached leaderships with it.
:meth:`KafkaClient.partitions_for` waits for a topic's partitions (e.g. while the broker auto-creates it).

Leader failover: partition-addressed calls (:meth:`list_offsets`, :meth:`fetch`) group their partitions by
leader, send the leader epoch of the cached metadata as ``CurrentLeaderEpoch`` (Fetch v9+, ListOffsets v4+;
-1 while unknown, which every broker accepts), and retry the partitions whose leader moved or is unknown
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH) or whose leader's connection failed, after a metadata refresh and ``retry_backoff_ms``.
The retry budget is ``retry_timeout_ms`` when given (retry until that much time has passed since the call
began), else ``retries`` attempts. When it runs out, the last error is raised (or, for :meth:`fetch`,
per-partition codes are returned) naming the partition, the attempts and the time spent.
:meth:`produce` is addressed to a node by the caller (``leader_for``), because producers batch per leader
anyway; they refresh (:meth:`metadata`) and retry under their own policy.

Errors: a non-zero error code where a call has no per-partition result to carry it becomes
``KafkaError(code, "<what> topic t partition 3 ...")``; :meth:`fetch` and :meth:`produce` return the codes per
partition (``FetchResult.error``, ``ProduceResult.error``) since callers decide per partition what to retry.
Connection failures raise :class:`~broker_runtime.errors.BrokerConnectionError` naming
``host:port``; no bare socket exception escapes.

Pipelining (produce): :meth:`send_produce` writes a request and returns an :class:`InFlight` handle without
waiting; :meth:`poll_produce` waits for that handle's response (responses arrive in send order, so earlier
ones are read and kept first). :meth:`produce_pipelined` drives a stream of requests with at most
``max_in_flight`` outstanding per connection and yields the results in order. The produce calls never
retry: a caller with its own retry policy (the connector's idempotent producer) stays in control, and a
handle whose connection broke (or was closed with :meth:`disconnect`) raises ``BrokerConnectionError``
when polled, as its answer will never come.

Versions: each API is spoken at ``min(pylog's max, broker's max)``; ``min_versions`` raises the floor per
API key for callers that rely on newer fields (Produce is always v3+: the record batches are magic 2).

Not thread-safe: use one client per thread (it is cheap; connections are lazy).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.client.connection import BrokerConnection
from broker_runtime.errors import BrokerConnectionError, ConfigError, ErrorCode, KafkaError
from broker_runtime.protocol.messages import (
    CONSUMER_REPLICA_ID,
    ApiKey,
    IsolationLevel,
    alter_configs,
    create_topics,
    describe_configs,
    find_coordinator,
)
from broker_runtime.protocol.messages.produce import ACKS_NONE
from broker_runtime.security import ClientSecurity

__all__ = [
    "BrokerMetadata",
    "ClusterMetadata",
    "ConfigEntry",
    "FetchResult",
    "InFlight",
    "KafkaClient",
    "NewTopic",
    "PartitionMetadata",
    "ProduceResult",
    "TopicMetadata",
]

TopicPartition = tuple[str, int]

_REFRESH_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
#: Produce carries magic-2 record batches, which need Produce v3+.
_DEFAULT_MIN_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 3}
_COORDINATOR_ERRORS = frozenset(
    {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
#: What Kafka's producer retries on AddPartitionsToTxn / EndTxn: the coordinator moved or is loading (find it
#: again), or the previous transaction's markers are still being written (CONCURRENT_TRANSACTIONS).
_TXN_RETRY_ERRORS = _COORDINATOR_ERRORS | {ErrorCode.CONCURRENT_TRANSACTIONS}
#: Client-side ceilings: AddPartitionsToTxn v4+ is the broker-to-coordinator batch (KIP-890), and EndTxn v5
#: switches the coordinator to transaction version 2 (an epoch bump per transaction), which would break the
#: retry of a completed EndTxn this client relies on. Every Kafka broker with transactions serves these.
_DEFAULT_MAX_VERSIONS: dict[int, int] = {ApiKey.ADD_PARTITIONS_TO_TXN: 3, ApiKey.END_TXN: 4}


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


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 partitions/replication factor means the broker's defaults."""

    name: str
    num_partitions: int = create_topics.NO_NUM_PARTITIONS
    replication_factor: int = create_topics.NO_REPLICATION_FACTOR
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a DescribeConfigs answer; ``source`` is Kafka's ``ConfigSource`` number. A ``sensitive``
    config (a password, a JAAS entry, a key) has ``value`` None, and so has each of its ``synonyms``
    (``(name, value, source)``, highest precedence first)."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


@dataclass(frozen=True, slots=True)
class FetchResult:
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview | bytes | None  # raw record batches, never parsed here
    aborted_transactions: list[tuple[int, int]] | None  # (producer id, first offset)
    preferred_read_replica: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()


@dataclass(slots=True)
class InFlight:
    """A produce request written to a connection whose response has not been read yet."""

    connection: BrokerConnection
    correlation_id: int
    version: int
    acks: int
    result: dict[TopicPartition, ProduceResult] | None = None
    done: bool = False
    #: The connection's generation when the request was written (a later one means it was lost).
    generation: int = 0


def _parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"bootstrap_servers: address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _by_topic(items: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in items:
        grouped.setdefault(topic, []).append((partition, value))
    return grouped


class KafkaClient:
    """Blocking Kafka-protocol client; see the module docstring for routing, errors and pipelining."""

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
        #: transactional id -> its coordinator's node id (FindCoordinator), until it answers NOT_COORDINATOR etc.
        self._txn_coordinators: dict[str, int] = {}
        self._closed = False
        #: ``security.protocol`` with its SASL and TLS settings (every connection of this client uses them).
        self.security = security or ClientSecurity()

    # --- lifecycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            max_versions=_DEFAULT_MAX_VERSIONS,
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

    def _any_conn(self) -> BrokerConnection:
        """A connected broker: the first of :meth:`_candidates` that connects."""
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

    def _request_any(self, api_key: int, body: Callable[[int], Mapping[str, Any]]) -> dict[str, Any]:
        """Send a cluster-wide request (``body`` built for the negotiated version) to the first broker of
        :meth:`_candidates` that answers; a broker whose connection fails meanwhile is skipped."""
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

    def _conn(self, node_id: int | None) -> BrokerConnection:
        if node_id is None:
            return self._any_conn()
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

    def disconnect(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (no-op when there is none); the next call reconnects.

        Requests in flight on it are lost: polling their :class:`InFlight` handles raises
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
        return dict(self._conn(node).broker_versions)

    def negotiated_version(self, api_key: int, node: int | None = None) -> int:
        return self._conn(node).version_for(api_key)

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

        body = self._request_any(ApiKey.METADATA, request)
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
            result_topics[name] = TopicMetadata(name, t["ErrorCode"], t["IsInternal"], partitions)
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
            self._backoff()

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

    def _group_by_leader(
        self, keys: Iterable[TopicPartition], retry: _Retry
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

    def _backoff(self) -> None:
        time.sleep(self.retry_backoff_ms / 1000)

    # --- admin -----------------------------------------------------------------------------------------------

    def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]] | Sequence[NewTopic],
        *,
        configs: Mapping[str, str | None] | None = None,
        timeout_ms: int = 60000,
        validate_only: bool = False,
    ) -> dict[str, ErrorCode | int]:
        """Create topics on the controller; return each topic's error code (0 = created).

        ``topics`` maps name -> (partitions, replication factor), or is a list of :class:`NewTopic`;
        ``configs`` apply to every topic given as a mapping.
        """
        if isinstance(topics, Mapping):
            new = [NewTopic(n, p, r, dict(configs or {})) for n, (p, r) in topics.items()]
        else:
            new = list(topics)
        request = {
            "Topics": [
                {
                    "Name": t.name,
                    "NumPartitions": t.num_partitions
                    if t.assignments is None
                    else create_topics.NO_NUM_PARTITIONS,
                    "ReplicationFactor": (
                        t.replication_factor if t.assignments is None else create_topics.NO_REPLICATION_FACTOR
                    ),
                    "Assignments": [
                        {"PartitionIndex": i, "BrokerIds": list(ids)}
                        for i, ids in (t.assignments or {}).items()
                    ],
                    "Configs": [{"Name": k, "Value": v} for k, v in t.configs.items()],
                }
                for t in new
            ],
            "timeoutMs": timeout_ms,
            "validateOnly": validate_only,
        }
        for attempt in range(self.retries + 1):
            if self._controller_id < 0 and not self._brokers:
                self.metadata([])
            node = self._controller_id if self._controller_id in self._brokers else None
            _, body = self._conn(node).request(ApiKey.CREATE_TOPICS, request)
            codes = {t["Name"]: _code(t["ErrorCode"]) for t in body["Topics"]}
            if ErrorCode.NOT_CONTROLLER in codes.values() and attempt < self.retries:
                self.metadata([])
                self._backoff()
                continue
            return codes
        raise AssertionError("unreachable")

    def describe_configs(
        self,
        topics: Mapping[str, Sequence[str] | None] | Sequence[str],
        *,
        resource_type: int = describe_configs.RESOURCE_TOPIC,
    ) -> dict[str, dict[str, str | None]]:
        """Configuration of each named resource (topics by default): name -> {key: value}."""
        wanted = topics if isinstance(topics, Mapping) else dict.fromkeys(topics)
        _, body = self._any_conn().request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "Resources": [
                    {
                        "ResourceType": resource_type,
                        "ResourceName": name,
                        "ConfigurationKeys": None if keys is None else list(keys),
                    }
                    for name, keys in wanted.items()
                ]
            },
        )
        out: dict[str, dict[str, str | None]] = {}
        for r in body["Results"]:
            if r["ErrorCode"]:
                raise KafkaError(
                    r["ErrorCode"], f"describe configs of {r['ResourceName']}: {r['ErrorMessage']}"
                )
            out[r["ResourceName"]] = {c["Name"]: c["Value"] for c in r["Configs"]}
        return out

    def _admin_request(self, api_key: int, request: Mapping[str, Any]) -> dict[str, Any]:
        """A cluster-wide admin request, sent to the controller when known (as Kafka's admin client does),
        else to any broker."""
        if self._controller_id < 0 and not self._brokers:
            self.metadata([])
        node = self._controller_id if self._controller_id in self._brokers else None
        _, body = self._conn(node).request(api_key, request)
        return body

    def delete_topics(self, names: Sequence[str], *, timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics; per name None (deleted) or the broker's error."""
        body = self._admin_request(
            ApiKey.DELETE_TOPICS,
            {"TopicNames": list(names), "Topics": [{"Name": n} for n in names], "TimeoutMs": timeout_ms},
        )
        return {
            r["Name"]: KafkaError(r["ErrorCode"], r.get("ErrorMessage") or f"delete topic {r['Name']}")
            if r["ErrorCode"]
            else None
            for r in body["Responses"]
        }

    def create_partitions(
        self, counts: Mapping[str, int], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> dict[str, KafkaError | None]:
        """Raise each topic's partition count to the given total; per topic None or the broker's error."""
        body = self._admin_request(
            ApiKey.CREATE_PARTITIONS,
            {
                "Topics": [{"Name": n, "Count": c, "Assignments": None} for n, c in counts.items()],
                "TimeoutMs": timeout_ms,
                "ValidateOnly": validate_only,
            },
        )
        return {
            r["Name"]: KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"create partitions of {r['Name']}")
            if r["ErrorCode"]
            else None
            for r in body["Results"]
        }

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int | KafkaError]:
        """Move each partition's log start offset to the given offset (-1: the high watermark), on its leader;
        per partition the new log start offset or the error. Leader moves are retried as :meth:`list_offsets`."""
        result: dict[TopicPartition, int | KafkaError] = {}
        todo = dict(offsets)
        budget = _Budget(self)
        while True:
            retry = _Retry()
            for node, tps in self._group_by_leader(todo, retry).items():
                try:
                    _, body = self._conn(node).request(
                        ApiKey.DELETE_RECORDS,
                        {
                            "Topics": [
                                {
                                    "Name": t,
                                    "Partitions": [{"PartitionIndex": p, "Offset": o} for p, o in parts],
                                }
                                for t, parts in _by_topic((tp, todo[tp]) for tp in tps).items()
                            ],
                            "TimeoutMs": timeout_ms,
                        },
                    )
                except KafkaError as e:
                    if not _connection_failure(e):
                        raise
                    self._leader_failed(node, tps, e, retry)
                    continue
                for t in body["Topics"]:
                    for p in t["Partitions"]:
                        tp = (t["Name"], p["PartitionIndex"])
                        code = p["ErrorCode"]
                        if not code:
                            result[tp] = p["LowWatermark"]
                            continue
                        err = KafkaError(
                            code, f"delete records of topic {tp[0]} partition {tp[1]} before {todo.get(tp)}"
                        )
                        if code in _REFRESH_ERRORS and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            self._forget_leader(tp)
                            retry.later(tp, err)
                        else:
                            result[tp] = err
            if not retry.errors:
                return result
            if not budget.another_attempt():
                for tp, err in retry.errors.items():
                    result[tp] = err
                return result
            todo = {tp: todo[tp] for tp in retry.errors}
            self._refresh_for(todo)

    def alter_configs(
        self,
        resource_type: int,
        name: str,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and delete dynamic configs of one topic or broker (IncrementalAlterConfigs SET / DELETE);
        raises KafkaError with the broker's message."""
        entries = [
            {"Name": k, "ConfigOperation": alter_configs.SET, "Value": v}
            for k, v in (set_configs or {}).items()
        ] + [{"Name": k, "ConfigOperation": alter_configs.DELETE, "Value": None} for k in delete_configs]
        body = self._admin_request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "Resources": [{"ResourceType": resource_type, "ResourceName": name, "Configs": entries}],
                "ValidateOnly": validate_only,
            },
        )
        for r in body["Responses"]:
            if r["ErrorCode"]:
                raise KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"alter configs of {name}")

    def describe_config_entries(self, resource_type: int, name: str) -> list[ConfigEntry]:
        """Every config of one topic or broker with its value, source and synonyms (DescribeConfigs)."""
        _, body = self._any_conn().request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "Resources": [
                    {"ResourceType": resource_type, "ResourceName": name, "ConfigurationKeys": None}
                ],
                "IncludeSynonyms": True,
            },
        )
        out: list[ConfigEntry] = []
        for r in body["Results"]:
            if r["ErrorCode"]:
                raise KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"describe configs of {name}")
            out += [
                ConfigEntry(
                    c["Name"],
                    c["Value"],
                    int(c["ConfigSource"]),
                    bool(c["ReadOnly"]),
                    bool(c["IsSensitive"]),
                    tuple((s["Name"], s["Value"], int(s["Source"])) for s in c.get("Synonyms") or ()),
                )
                for c in r["Configs"]
            ]
        return out

    def describe_cluster(self) -> dict[str, Any]:
        """DescribeCluster: ``ClusterId``, ``ControllerId`` and ``Brokers`` (id, host, port, rack)."""
        _, body = self._any_conn().request(ApiKey.DESCRIBE_CLUSTER, {})
        if body["ErrorCode"]:
            raise KafkaError(body["ErrorCode"], body["ErrorMessage"] or "describe cluster")
        return body

    def acl_request(self, api_key: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """CreateAcls / DescribeAcls / DeleteAcls (``api_key``) with a request body of Kafka's field names, sent
        to any broker (ACLs are cluster-wide); the response body, its error codes left to the caller."""
        _, answer = self._any_conn().request(api_key, dict(body))
        return answer

    def describe_log_dirs(self, node: int) -> list[dict[str, Any]]:
        """DescribeLogDirs of one broker: per log directory its partitions and their sizes."""
        _, body = self._conn(node).request(ApiKey.DESCRIBE_LOG_DIRS, {"Topics": None})
        results: list[dict[str, Any]] = body["Results"]
        return results

    def describe_producers(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, list[dict[str, Any]]]:
        """DescribeProducers on each partition's leader: its active producers; raises KafkaError."""
        out: dict[TopicPartition, list[dict[str, Any]]] = {}
        retry = _Retry()
        for node, group in self._group_by_leader(list(tps), retry).items():
            _, body = self._conn(node).request(
                ApiKey.DESCRIBE_PRODUCERS,
                {
                    "Topics": [
                        {"Name": t, "PartitionIndexes": [p for p, _ in parts]}
                        for t, parts in _by_topic((tp, None) for tp in group).items()
                    ]
                },
            )
            for t in body["Topics"]:
                for p in t["Partitions"]:
                    if p["ErrorCode"]:
                        raise KafkaError(
                            p["ErrorCode"],
                            p["ErrorMessage"] or f"describe producers of {t['Name']}-{p['PartitionIndex']}",
                        )
                    out[(t["Name"], p["PartitionIndex"])] = p["ActiveProducers"]
        if retry.errors:
            raise next(iter(retry.errors.values()))
        return out

    def init_producer_id(
        self,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> tuple[int, int]:
        """Obtain ``(producer id, epoch)`` for an idempotent (or, with an id, transactional) producer.

        A coordinator that is not available, moved or still loading (answered by FindCoordinator or by
        InitProducerId) is looked up again until the retry budget (``retry_timeout_ms``, else ``retries``) is
        spent, as Kafka's producer does: a new Kafka cluster answers COORDINATOR_NOT_AVAILABLE while it creates
        ``__transaction_state`` for the first transactional id."""
        request = {
            "TransactionalId": transactional_id,
            "TransactionTimeoutMs": transaction_timeout_ms,
            "ProducerId": producer_id,
            "ProducerEpoch": producer_epoch,
        }
        budget = _Budget(self)
        while True:
            try:
                node = (
                    self._transaction_coordinator(transactional_id) if transactional_id is not None else None
                )
                _, body = self._conn(node).request(ApiKey.INIT_PRODUCER_ID, request)
                code = body["ErrorCode"]
            except KafkaError as exc:  # FindCoordinator's own answer
                if exc.code not in _COORDINATOR_ERRORS:
                    raise
                code = exc.code
            if code == ErrorCode.NONE:
                return body["ProducerId"], body["ProducerEpoch"]
            if code in _COORDINATOR_ERRORS and budget.another_attempt():
                self._backoff()
                continue
            raise KafkaError(code, f"InitProducerId for transactional id {transactional_id!r}")

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tps: Iterable[TopicPartition],
    ) -> None:
        """AddPartitionsToTxn (v0-3, the client's versions): ``tps`` join the producer's open transaction.

        Sent to the transaction coordinator (FindCoordinator); retries what Kafka's producer retries
        (:data:`_TXN_RETRY_ERRORS`, UNKNOWN_TOPIC_OR_PARTITION while a topic is being created, a lost
        connection) within the retry budget. Anything else (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
        INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, ...) raises ``KafkaError`` with that code, naming
        the transactional id and the partitions.
        """
        wanted = sorted(set(tps))
        if not wanted:
            return
        request = {
            "V3AndBelowTransactionalId": transactional_id,
            "V3AndBelowProducerId": producer_id,
            "V3AndBelowProducerEpoch": producer_epoch,
            "V3AndBelowTopics": [
                {"Name": topic, "Partitions": [p for p, _ in parts]}
                for topic, parts in _by_topic((tp, None) for tp in wanted).items()
            ],
        }

        def codes(body: Mapping[str, Any]) -> int:
            worst = ErrorCode.NONE
            for t in body["ResultsByTopicV3AndBelow"]:
                for p in t["ResultsByPartition"]:
                    code = p["PartitionErrorCode"]
                    # OPERATION_NOT_ATTEMPTED only says another partition failed: report that one.
                    if code and (worst in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED)):
                        worst = code
            return int(worst)

        names = ", ".join(f"{t}-{p}" for t, p in wanted)
        self._txn_request(
            transactional_id,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            request,
            codes,
            f"AddPartitionsToTxn of {names} for transactional id {transactional_id!r} "
            f"(producer id {producer_id} epoch {producer_epoch})",
            retry_also=frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.OPERATION_NOT_ATTEMPTED}),
        )

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn (v0-4): commit (``commit=True``) or abort the producer's transaction.

        Any process may send it on the producer's behalf with its id and epoch (as a driver committing its
        tasks' transactions). Resending the same end of a transaction that already completed succeeds (the
        coordinator answers a retry with NONE); the other end is INVALID_TXN_STATE. Retries and errors as
        :meth:`add_partitions_to_txn`; a fenced producer (a newer InitProducerId, or the coordinator aborted the
        transaction on its timeout) raises PRODUCER_FENCED or INVALID_PRODUCER_EPOCH.
        """
        self._txn_request(
            transactional_id,
            ApiKey.END_TXN,
            {
                "TransactionalId": transactional_id,
                "ProducerId": producer_id,
                "ProducerEpoch": producer_epoch,
                "Committed": commit,
            },
            lambda body: int(body["ErrorCode"]),
            f"EndTxn({'commit' if commit else 'abort'}) for transactional id {transactional_id!r} "
            f"(producer id {producer_id} epoch {producer_epoch})",
        )

    def end_txns(self, txns: Sequence[tuple[str, int, int]], commit: bool) -> dict[str, KafkaError]:
        """EndTxn for each ``(transactional id, producer id, epoch)``, pipelined; the failures by transactional id.

        The requests go out back to back on one connection per coordinator and the answers are read after
        (:meth:`_txn_pipelined`); a transaction whose answer is retriable (or lost with its connection) is
        then retried alone as :meth:`end_txn` does. Semantics per transaction as :meth:`end_txn`.
        """
        verb = "commit" if commit else "abort"
        calls = [
            (
                tid,
                ApiKey.END_TXN,
                {"TransactionalId": tid, "ProducerId": pid, "ProducerEpoch": epoch, "Committed": commit},
            )
            for tid, pid, epoch in txns
        ]

        def one(i: int) -> None:
            tid, pid, epoch = txns[i]
            self.end_txn(tid, pid, epoch, commit)

        return self._txn_pipelined(
            calls, lambda body: int(body["ErrorCode"]), one, lambda i: f"EndTxn({verb}) for {txns[i][0]!r}"
        )

    def check_txns(
        self, txns: Sequence[tuple[str, int, int, Sequence[TopicPartition]]]
    ) -> dict[str, KafkaError]:
        """AddPartitionsToTxn of partitions each transaction already holds (a no-op while it is open at that
        epoch; PRODUCER_FENCED once it was aborted), pipelined as :meth:`end_txns`; the failures by id."""
        calls = [
            (
                tid,
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {
                    "V3AndBelowTransactionalId": tid,
                    "V3AndBelowProducerId": pid,
                    "V3AndBelowProducerEpoch": epoch,
                    "V3AndBelowTopics": [
                        {"Name": topic, "Partitions": [p for p, _ in parts]}
                        for topic, parts in _by_topic((tp, None) for tp in sorted(set(tps))).items()
                    ],
                },
            )
            for tid, pid, epoch, tps in txns
        ]

        def codes(body: Mapping[str, Any]) -> int:
            worst = ErrorCode.NONE
            for t in body["ResultsByTopicV3AndBelow"]:
                for p in t["ResultsByPartition"]:
                    code = p["PartitionErrorCode"]
                    if code and (worst in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED)):
                        worst = code
            return int(worst)

        def one(i: int) -> None:
            self.add_partitions_to_txn(*txns[i])

        return self._txn_pipelined(calls, codes, one, lambda i: f"AddPartitionsToTxn for {txns[i][0]!r}")

    def _txn_pipelined(
        self,
        calls: Sequence[tuple[str, int, Mapping[str, Any]]],
        code_of: Callable[[Mapping[str, Any]], int],
        retry_one: Callable[[int], None],
        what: Callable[[int], str],
    ) -> dict[str, KafkaError]:
        """Send every ``(transactional id, api key, body)`` to its coordinator without waiting in between, then
        read the answers. An answer that is retriable, or lost with its connection, is redone by
        ``retry_one(index)`` (the one-at-a-time method with its retry budget). Returns the failures."""
        failed: dict[str, KafkaError] = {}
        redo: list[int] = []
        sent: dict[int, list[tuple[int, int, int]]] = {}  # node -> [(index, correlation id, generation)]
        for i, (tid, api_key, body) in enumerate(calls):
            try:
                node = self._txn_coordinators.get(tid)
                if node is None:
                    node = self._txn_coordinators[tid] = self._transaction_coordinator(tid)
                conn = self._conn(node)
                corr, _ = conn.send(api_key, body)
                sent.setdefault(node, []).append((i, corr, conn.generation))
            except KafkaError as e:
                if not (_connection_failure(e) or e.code in _TXN_RETRY_ERRORS):
                    failed[tid] = KafkaError(e.code, f"{what(i)}: {e}")
                else:
                    redo.append(i)
        for node, pending in sent.items():
            for i, corr, generation in pending:
                tid = calls[i][0]
                try:
                    code = code_of(self._conn(node).receive(corr, generation))
                except KafkaError as e:
                    if _connection_failure(e):
                        self.disconnect(node)
                    redo.append(i)
                    continue
                if code == ErrorCode.NONE:
                    continue
                if code in _TXN_RETRY_ERRORS or code == ErrorCode.NETWORK_EXCEPTION:
                    self._txn_coordinators.pop(tid, None)
                    redo.append(i)
                else:
                    failed[tid] = KafkaError(code, what(i))
        for i in sorted(redo):
            try:
                retry_one(i)
            except KafkaError as e:
                failed[calls[i][0]] = e
        return failed

    def _txn_request(
        self,
        transactional_id: str,
        api_key: int,
        request: Mapping[str, Any],
        code_of: Callable[[Mapping[str, Any]], int],
        what: str,
        retry_also: frozenset[ErrorCode] = frozenset(),
    ) -> dict[str, Any]:
        """Send ``request`` to the transaction coordinator of ``transactional_id``, retrying coordinator moves,
        CONCURRENT_TRANSACTIONS and lost connections within the retry budget (``retry_timeout_ms``, else
        ``retries`` attempts); raise ``KafkaError`` with the last code, naming ``what``."""
        budget = _Budget(self)
        retriable = _TXN_RETRY_ERRORS | retry_also
        while True:
            node: int | None = self._txn_coordinators.get(transactional_id)
            try:
                if node is None:
                    node = self._txn_coordinators[transactional_id] = self._transaction_coordinator(
                        transactional_id
                    )
                _, body = self._conn(node).request(api_key, request)
                code = code_of(body)
            except KafkaError as e:
                if not (_connection_failure(e) or e.code in retriable):
                    raise
                if node is not None and _connection_failure(e):
                    self.disconnect(node)
                code, body = int(e.code), {}
            if code == ErrorCode.NONE:
                return body
            if (
                code in _COORDINATOR_ERRORS
                or code == ErrorCode.NETWORK_EXCEPTION
                or code == ErrorCode.BROKER_NOT_AVAILABLE
            ):
                self._txn_coordinators.pop(transactional_id, None)  # find it again
            if code not in retriable or not budget.another_attempt():
                spent = int((time.monotonic() - budget.started) * 1000)
                raise KafkaError(code, f"{what}, after {budget.attempts} attempt(s) in {spent} ms")
            self._backoff()

    def _transaction_coordinator(self, transactional_id: str) -> int:
        return self._coordinator(
            transactional_id, find_coordinator.KEY_TYPE_TRANSACTION, f"transactional id {transactional_id!r}"
        )

    def _coordinator(self, key: str, key_type: int, what: str) -> int:
        """The node coordinating ``key`` (FindCoordinator); its address joins the known brokers."""
        conn = self._any_conn()
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

    # --- consumer groups (what kafka-consumer-groups asks) ---------------------------------------------------

    def _group_request(
        self, group: str, api_key: int, body: Callable[[int], Mapping[str, Any]]
    ) -> dict[str, Any]:
        """One request to ``group``'s coordinator, found again while it moves or loads (within the budget)."""
        budget = _Budget(self)
        while True:
            node = self._coordinator(group, find_coordinator.KEY_TYPE_GROUP, f"group {group!r}")
            conn = self._conn(node)
            _, answer = conn.request(api_key, body(conn.version_for(api_key)))
            codes = [g.get("ErrorCode", 0) for g in answer.get("Groups", [answer])]
            codes += [answer.get("ErrorCode", 0)]
            if not any(code in _COORDINATOR_ERRORS for code in codes):
                return answer
            if not budget.another_attempt():
                code = next(c for c in codes if c in _COORDINATOR_ERRORS)
                raise KafkaError(code, f"group {group!r}: its coordinator did not answer")
            self._backoff()

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group of every broker (ListGroups asks one broker for the groups it coordinates):
        ``GroupId``, ``ProtocolType`` and (v4+) ``GroupState`` per group."""
        groups: dict[str, dict[str, Any]] = {}
        for node in sorted(self.metadata([]).brokers):
            _, answer = self._conn(node).request(ApiKey.LIST_GROUPS, {"StatesFilter": [], "TypesFilter": []})
            if answer["ErrorCode"]:
                raise KafkaError(answer["ErrorCode"], f"list groups of node {node}")
            for group in answer["Groups"]:
                groups[group["GroupId"]] = group
        return [groups[name] for name in sorted(groups)]

    def describe_group(self, group: str) -> dict[str, Any]:
        """DescribeGroups of one group: ``GroupState``, ``ProtocolType``, ``ProtocolData`` and ``Members``."""
        answer = self._group_request(group, ApiKey.DESCRIBE_GROUPS, lambda v: {"Groups": [group]})
        described: dict[str, Any] = answer["Groups"][0]
        if described["ErrorCode"]:
            raise KafkaError(described["ErrorCode"], f"describe group {group!r}")
        return described

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """Every offset ``group`` committed (OffsetFetch v2+ with null topics): ``(topic, partition) -> offset``."""

        def body(version: int) -> dict[str, Any]:
            if version < 2:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION, "OffsetFetch v2+ is needed to list a group's offsets"
                )
            return {"GroupId": group, "Topics": None, "Groups": [{"GroupId": group, "Topics": None}]}

        answer = self._group_request(group, ApiKey.OFFSET_FETCH, body)
        found = answer["Groups"][0] if "Groups" in answer and answer["Groups"] else answer
        if found["ErrorCode"]:
            raise KafkaError(found["ErrorCode"], f"fetch the committed offsets of group {group!r}")
        out: dict[TopicPartition, int] = {}
        for topic in found["Topics"]:
            for p in topic["Partitions"]:
                if p["ErrorCode"]:
                    raise KafkaError(
                        p["ErrorCode"], f"committed offset of {topic['Name']}-{p['PartitionIndex']}"
                    )
                if p["CommittedOffset"] >= 0:
                    out[(topic["Name"], p["PartitionIndex"])] = p["CommittedOffset"]
        return out

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as an admin does (no member, generation -1: the coordinator accepts
        it only while the group has no active members)."""
        answer = self._group_request(
            group,
            ApiKey.OFFSET_COMMIT,
            lambda v: {
                "GroupId": group,
                "GenerationIdOrMemberEpoch": -1,
                "MemberId": "",
                "Topics": [
                    {
                        "Name": topic,
                        "Partitions": [
                            {"PartitionIndex": p, "CommittedOffset": o, "CommittedMetadata": ""}
                            for p, o in parts
                        ],
                    }
                    for topic, parts in _by_topic(sorted(offsets.items())).items()
                ],
            },
        )
        for topic in answer["Topics"]:
            for p in topic["Partitions"]:
                if p["ErrorCode"]:
                    raise KafkaError(
                        p["ErrorCode"],
                        f"commit offsets of group {group!r} for {topic['Name']}-{p['PartitionIndex']}",
                    )

    def delete_group(self, group: str) -> None:
        """DeleteGroups of one group (refused with NON_EMPTY_GROUP while it has members)."""
        answer = self._group_request(group, ApiKey.DELETE_GROUPS, lambda v: {"GroupsNames": [group]})
        result = answer["Results"][0]
        if result["ErrorCode"]:
            raise KafkaError(result["ErrorCode"], f"delete group {group!r}")

    # --- offsets and fetch -----------------------------------------------------------------------------------

    def list_offsets(
        self,
        requests: Mapping[TopicPartition, int],
        *,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Resolve timestamps to offsets: ``LATEST_TIMESTAMP``, ``EARLIEST_TIMESTAMP``, ``MAX_TIMESTAMP`` (the
        sentinels of :mod:`broker_runtime.protocol.messages`), else a time in ms.

        Returns ``(topic, partition) -> (offset, timestamp)``; raises ``KafkaError`` naming the partition.
        """
        result: dict[TopicPartition, tuple[int, int]] = {}
        todo = dict(requests)
        budget = _Budget(self)
        while True:
            retry = _Retry()
            for node, tps in self._group_by_leader(todo, retry).items():
                try:
                    conn = self._conn(node)
                    version = conn.version_for(ApiKey.LIST_OFFSETS)
                    _, body = conn.request(
                        ApiKey.LIST_OFFSETS,
                        {
                            "ReplicaId": CONSUMER_REPLICA_ID,
                            "IsolationLevel": isolation_level,
                            "Topics": [
                                {
                                    "Name": topic,
                                    "Partitions": [
                                        {
                                            "PartitionIndex": p,
                                            "CurrentLeaderEpoch": self.leader_epoch_for(topic, p),
                                            "Timestamp": ts,
                                            "MaxNumOffsets": 1,
                                        }
                                        for p, ts in parts
                                    ],
                                }
                                for topic, parts in _by_topic((tp, todo[tp]) for tp in tps).items()
                            ],
                        },
                    )
                except KafkaError as e:
                    if not _connection_failure(e):
                        raise
                    self._leader_failed(node, tps, e, retry)
                    continue
                for t in body["Topics"]:
                    for p in t["Partitions"]:
                        tp = (t["Name"], p["PartitionIndex"])
                        code = p["ErrorCode"]
                        if code:
                            err = KafkaError(
                                code, f"list offsets topic {tp[0]} partition {tp[1]} timestamp {todo.get(tp)}"
                            )
                            if code in _REFRESH_ERRORS:
                                self._forget_leader(tp)
                                retry.later(tp, err)
                                continue
                            raise err
                        if version == 0:
                            offsets = p["OldStyleOffsets"]
                            result[tp] = (offsets[0] if offsets else -1, -1)
                        else:
                            result[tp] = (p["Offset"], p["Timestamp"])
            if not retry.errors:
                return result
            if not budget.another_attempt():
                raise budget.exhausted(retry, "list offsets")
            todo = {tp: todo[tp] for tp in retry.errors}
            self._refresh_for(todo)

    def fetch(
        self,
        requests: Mapping[TopicPartition, int],
        *,
        max_bytes: int = 52428800,
        partition_max_bytes: int = 1048576,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, FetchResult]:
        """Fetch raw record batches from each partition's leader, starting at the given offsets.

        Per-partition errors are returned in ``FetchResult.error`` (leader moves are retried once after a
        metadata refresh first).
        """
        results: dict[TopicPartition, FetchResult] = {}
        todo = dict(requests)
        budget = _Budget(self)
        while True:
            retry = _Retry()
            for node, tps in self._group_by_leader(todo, retry).items():
                try:
                    _, body = self._conn(node).request(
                        ApiKey.FETCH,
                        {
                            "ReplicaId": CONSUMER_REPLICA_ID,
                            "MaxWaitMs": max_wait_ms,
                            "MinBytes": min_bytes,
                            "MaxBytes": max_bytes,
                            "IsolationLevel": isolation_level,
                            "SessionId": 0,
                            "SessionEpoch": -1,
                            "Topics": [
                                {
                                    "Topic": topic,
                                    "Partitions": [
                                        {
                                            "Partition": p,
                                            "CurrentLeaderEpoch": self.leader_epoch_for(topic, p),
                                            "FetchOffset": offset,
                                            "PartitionMaxBytes": partition_max_bytes,
                                        }
                                        for p, offset in parts
                                    ],
                                }
                                for topic, parts in _by_topic((tp, todo[tp]) for tp in tps).items()
                            ],
                        },
                    )
                except KafkaError as e:
                    if not _connection_failure(e):
                        raise
                    self._leader_failed(node, tps, e, retry)
                    continue
                if body["ErrorCode"]:
                    raise KafkaError(body["ErrorCode"], f"fetch from node {node}")
                for t in body["Responses"]:
                    for p in t["Partitions"]:
                        tp = (t["Topic"], p["PartitionIndex"])
                        code = p["ErrorCode"]
                        if code in _REFRESH_ERRORS:
                            self._forget_leader(tp)
                            retry.later(tp, KafkaError(code, f"fetch topic {tp[0]} partition {tp[1]}"))
                            continue
                        aborted = p["AbortedTransactions"]
                        results[tp] = FetchResult(
                            code,
                            p["HighWatermark"],
                            p["LastStableOffset"],
                            p["LogStartOffset"],
                            p["Records"],
                            None
                            if aborted is None
                            else [(a["ProducerId"], a["FirstOffset"]) for a in aborted],
                            p["PreferredReadReplica"],
                        )
            if not retry.errors:
                return results
            if not budget.another_attempt():
                if any(_connection_failure(failed) for failed in retry.errors.values()):
                    raise budget.exhausted(retry, "fetch")
                for tp, failed in retry.errors.items():  # leader errors: per partition, as documented
                    results[tp] = FetchResult(int(failed.code), -1, -1, -1, None, None)
                return results
            todo = {tp: todo[tp] for tp in retry.errors}
            self._refresh_for(todo)

    def _leader_failed(self, node: int, tps: list[TopicPartition], exc: KafkaError, retry: _Retry) -> None:
        """The connection to ``node`` failed while asking it about ``tps``: they are retried after a refresh."""
        self.disconnect(node)
        for tp in tps:
            self._forget_leader(tp)
            retry.later(tp, exc)

    def _refresh_for(self, tps: Iterable[TopicPartition]) -> None:
        """Back off, then reload the leaders of ``tps``' topics; a failing refresh is left to the next round."""
        self._backoff()
        with contextlib.suppress(KafkaError):
            self.metadata(sorted({t for t, _ in tps}))

    # --- produce ---------------------------------------------------------------------------------------------

    def send_produce(
        self,
        node_id: int,
        topic_partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> InFlight:
        """Write a Produce request to ``node_id`` without waiting; complete it with :meth:`poll_produce`.

        Each value is one magic-2 record batch set (bytes from the record builder), sent as-is.
        With ``acks=0`` the handle is complete at once (the broker never answers).
        """
        conn = self._conn(node_id)
        corr, version = conn.send(
            ApiKey.PRODUCE,
            {
                "TransactionalId": transactional_id,
                "Acks": acks,
                "TimeoutMs": timeout_ms,
                "TopicData": [
                    {
                        "Name": topic,
                        "PartitionData": [{"Index": p, "Records": records} for p, records in parts],
                    }
                    for topic, parts in _by_topic(topic_partitions.items()).items()
                ],
            },
            expect_response=acks != ACKS_NONE,
        )
        return InFlight(conn, corr, version, acks, None, acks == ACKS_NONE, conn.generation)

    def produce_answered(self, in_flight: InFlight) -> bool:
        """True when :meth:`poll_produce` of ``in_flight`` would not wait (its answer, or its failure, is there)."""
        return in_flight.done or in_flight.connection.answered(in_flight.correlation_id, in_flight.generation)

    def poll_produce(self, in_flight: InFlight) -> dict[TopicPartition, ProduceResult] | None:
        """Wait for the response to ``in_flight`` (``None`` for acks=0); per-partition errors are in the results.

        Raises :class:`BrokerConnectionError` when the connection broke (or was disconnected) before the
        answer was read: the request may or may not have been written to the log.
        """
        if in_flight.done:
            return in_flight.result
        body = in_flight.connection.receive(in_flight.correlation_id, in_flight.generation)
        result: dict[TopicPartition, ProduceResult] = {}
        for t in body["Responses"]:
            for p in t["PartitionResponses"]:
                result[(t["Name"], p["Index"])] = ProduceResult(
                    p["ErrorCode"],
                    p["BaseOffset"],
                    p["LogAppendTimeMs"],
                    p["LogStartOffset"],
                    p["ErrorMessage"],
                    tuple((e["BatchIndex"], e["BatchIndexErrorMessage"]) for e in p["RecordErrors"]),
                )
        in_flight.result = result
        in_flight.done = True
        return result

    def produce(
        self,
        node_id: int,
        topic_partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> dict[TopicPartition, ProduceResult] | None:
        """Send one Produce request and wait for its answer (``None`` for acks=0)."""
        return self.poll_produce(
            self.send_produce(
                node_id, topic_partitions, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
            )
        )

    def produce_pipelined(
        self,
        node_id: int,
        requests: Iterable[Mapping[TopicPartition, bytes | bytearray | memoryview]],
        *,
        acks: int,
        timeout_ms: int,
        max_in_flight: int = 5,
        transactional_id: str | None = None,
    ) -> Iterator[dict[TopicPartition, ProduceResult] | None]:
        """Send ``requests`` to ``node_id`` keeping up to ``max_in_flight`` unanswered; yield results in order.

        The next request is written before the oldest answer is awaited, so the network and the broker work
        while this thread waits. Stopping the iteration early leaves the remaining answers unread on the
        connection; a later request on it reads past them and keeps them until the connection closes.
        """
        if max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1, got {max_in_flight}")
        window: deque[InFlight] = deque()
        for tps in requests:
            if len(window) >= max_in_flight:
                yield self.poll_produce(window.popleft())
            window.append(
                self.send_produce(
                    node_id, tps, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
                )
            )
        while window:
            yield self.poll_produce(window.popleft())


def _code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value


def _connection_failure(exc: KafkaError) -> bool:
    """The broker could not be reached or vanished mid-request (refused, reset, timed out, not in the metadata)."""
    return isinstance(exc, BrokerConnectionError) or exc.code == ErrorCode.BROKER_NOT_AVAILABLE


@dataclass
class _Retry:
    """The partitions of one round to try again, each with the error that sent it back."""

    errors: dict[TopicPartition, KafkaError] = field(default_factory=dict)

    def later(self, tp: TopicPartition, exc: KafkaError) -> None:
        self.errors[tp] = exc


class _Budget:
    """How long a partition-addressed call keeps retrying (``retry_timeout_ms``, else ``retries`` attempts)."""

    def __init__(self, client: KafkaClient) -> None:
        self.started = time.monotonic()
        self.attempts = 1
        self.retries = client.retries
        self.backoff_s = client.retry_backoff_ms / 1000
        self.timeout_ms = client.retry_timeout_ms

    def another_attempt(self) -> bool:
        if self.timeout_ms is None:
            more = self.attempts <= self.retries
        else:
            more = time.monotonic() + self.backoff_s < self.started + self.timeout_ms / 1000
        if more:
            self.attempts += 1
        return more

    def exhausted(self, retry: _Retry, what: str) -> KafkaError:
        """The error to raise when the budget is spent: the last one, naming partitions and the time spent."""
        tp, last = next(iter(retry.errors.items()))
        spent = int((time.monotonic() - self.started) * 1000)
        bound = f"retries={self.retries}" if self.timeout_ms is None else f"retry budget {self.timeout_ms} ms"
        names = ", ".join(f"{t}-{p}" for t, p in sorted(retry.errors))
        return KafkaError(
            last.code,
            f"{what} of {names} still failing after {self.attempts} attempt(s) in {spent} ms ({bound}); "
            f"last error for {tp[0]}-{tp[1]}: {last}",
        )
