"""A synchronous Kafka-protocol client: the router (connections, metadata, leaders) with the data plane (list
offsets, fetch, pipelined produce) and the admin, transaction and group facades.

Used by the Spark connector (driver and executors), the CLI tools and the tests, against pylog's broker or a
real Kafka cluster. :class:`KafkaClient` is a :class:`~broker_runtime.client.router.ClientRouter` (routing,
leader failover, retry budget and versions are described there) that adds:

* the data plane: :meth:`KafkaClient.list_offsets` and :meth:`KafkaClient.fetch`, partition-led calls run by
  the router's leader-retry driver, and produce, addressed to a node by the caller;
* ``client.admin`` (:class:`~broker_runtime.client.admin.AdminClient`), ``client.transactions``
  (:class:`~broker_runtime.client.transactions.TransactionClient`) and ``client.groups``
  (:class:`~broker_runtime.client.groups.GroupClient`): thin facades sharing this client's connections and
  metadata, as Kafka's Java client separates its admin client, the producer's transaction manager and the
  consumer's coordinator.

Threading: none inside; a client and its facades belong to the thread that calls them (connections, caches and
in-flight handles are unguarded). The connector makes one client per caller: each read or write task on its
executor's Python worker, the driver's planning and commit calls, the streaming sink's kept driver client (one
call at a time). A client is cheap: connections open on first use.

Errors: a non-zero error code where a call has no per-partition result to carry it becomes
``KafkaError(code, "<what> topic t partition 3 ...")``; :meth:`KafkaClient.fetch` and
:meth:`KafkaClient.produce` return the codes per partition (``FetchResult.error``, ``ProduceResult.error``)
since callers decide per partition what to retry. Connection failures raise
:class:`~broker_runtime.errors.BrokerConnectionError` naming ``host:port``.

Produce and its pipelining: produce is addressed to a node by the caller (``leader_for``), because producers
batch per leader anyway; they refresh (``metadata``) and retry under their own policy: the produce calls never
retry, so a caller with its own retry policy (the connector's idempotent producer) stays in control.
:meth:`KafkaClient.send_produce` writes a request and returns an :class:`InFlight` handle without waiting;
:meth:`KafkaClient.poll_produce` waits for that handle's response (responses arrive in send order, so earlier
ones are read and kept first); :meth:`KafkaClient.produce_pipelined` drives a stream of requests with at most
``max_in_flight`` outstanding per connection and yields the results in order. A handle whose connection broke
(or was closed with ``disconnect``) raises ``BrokerConnectionError`` when polled, as its answer will never come.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from broker_runtime.client.admin import AdminClient
from broker_runtime.client.connection import BrokerConnection
from broker_runtime.client.groups import GroupClient
from broker_runtime.client.router import (
    REFRESH_ERRORS,
    ClientRouter,
    LeaderRetry,
    by_topic,
    connection_failure,
    partition_answers,
)
from broker_runtime.client.transactions import TransactionClient
from broker_runtime.errors import ConfigError, KafkaError
from broker_runtime.protocol.messages import CONSUMER_REPLICA_ID, ApiKey, IsolationLevel
from broker_runtime.protocol.messages.produce import ACKS_NONE
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = ["FetchResult", "InFlight", "KafkaClient", "ProduceResult"]


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


class KafkaClient(ClientRouter):
    """Blocking Kafka-protocol client; see the module docstring (and the router's for routing and retries)."""

    @cached_property
    def admin(self) -> AdminClient:
        """Topics, partitions, records, configs, cluster, ACLs, log dirs, producers (Kafka's admin client)."""
        return AdminClient(self)

    @cached_property
    def transactions(self) -> TransactionClient:
        """InitProducerId, AddPartitionsToTxn, EndTxn (the requests of Kafka's producer's transaction manager)."""
        return TransactionClient(self)

    @cached_property
    def groups(self) -> GroupClient:
        """What kafka-consumer-groups asks of the group coordinators."""
        return GroupClient(self)

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        versions: dict[int, int] = {}

        def request(node: int, part: dict[TopicPartition, int]) -> dict[str, Any]:
            conn = self.connection(node)
            versions[node] = conn.version_for(ApiKey.LIST_OFFSETS)
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
                        for topic, parts in by_topic(part.items()).items()
                    ],
                },
            )
            return body

        def answer(node: int, body: dict[str, Any], retry: LeaderRetry) -> None:
            for tp, p in partition_answers(body["Topics"]):
                code = p["ErrorCode"]
                if code:
                    err = KafkaError(
                        code, f"list offsets topic {tp[0]} partition {tp[1]} timestamp {requests.get(tp)}"
                    )
                    if code in REFRESH_ERRORS:
                        retry.later(tp, err)
                        continue
                    raise err
                if versions[node] == 0:
                    offsets = p["OldStyleOffsets"]
                    result[tp] = (offsets[0] if offsets else -1, -1)
                else:
                    result[tp] = (p["Offset"], p["Timestamp"])

        retry = self.call_leaders(requests, request, answer)
        if retry.errors:
            raise retry.exhausted("list offsets")
        return result

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

        Per-partition errors are returned in ``FetchResult.error``; leader moves are retried first, within the
        retry budget (then their last code is returned, or, when a leader could not be reached, raised).
        """
        results: dict[TopicPartition, FetchResult] = {}

        def request(node: int, part: dict[TopicPartition, int]) -> dict[str, Any]:
            _, body = self.connection(node).request(
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
                        for topic, parts in by_topic(part.items()).items()
                    ],
                },
            )
            return body

        def answer(node: int, body: dict[str, Any], retry: LeaderRetry) -> None:
            if body["ErrorCode"]:
                raise KafkaError(body["ErrorCode"], f"fetch from node {node}")
            for tp, p in partition_answers(body["Responses"], name="Topic"):
                code = p["ErrorCode"]
                if code in REFRESH_ERRORS:
                    retry.later(tp, KafkaError(code, f"fetch topic {tp[0]} partition {tp[1]}"))
                    continue
                aborted = p["AbortedTransactions"]
                results[tp] = FetchResult(
                    code,
                    p["HighWatermark"],
                    p["LastStableOffset"],
                    p["LogStartOffset"],
                    p["Records"],
                    None if aborted is None else [(a["ProducerId"], a["FirstOffset"]) for a in aborted],
                    p["PreferredReadReplica"],
                )

        retry = self.call_leaders(requests, request, answer)
        if any(connection_failure(failed) for failed in retry.errors.values()):
            raise retry.exhausted("fetch")
        for tp, failed in retry.errors.items():  # leader errors: per partition, as documented
            results[tp] = FetchResult(int(failed.code), -1, -1, -1, None, None)
        return results

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
        conn = self.connection(node_id)
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
                    for topic, parts in by_topic(topic_partitions.items()).items()
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
        for tp, p in partition_answers(body["Responses"], partitions="PartitionResponses", index="Index"):
            result[tp] = ProduceResult(
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
