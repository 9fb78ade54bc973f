"""The transaction coordinator in a cluster: the server's side of it (the coordinator logic itself lives in
:mod:`broker_runtime.coordinator.transaction`).

* **Placement** (:func:`ensure_state_topic`, :func:`coordinator_node`): the coordinator of a transactional id
  is the leader of its ``__transaction_state`` partition (``abs(hashCode) % transaction.state.log.num.partitions``).
  The topic is created on the first transactional FindCoordinator with
  ``min(transaction.state.log.replication.factor, unfenced brokers)`` replicas (WARNING when fewer than asked)
  and ``min.insync.replicas = transaction.state.log.min.isr``.
* **Ownership** (:class:`~.local_cluster.LocalCluster`, after every metadata change): each partition of the
  topic that this node now leads is loaded (its local replica replayed; Prepare states completed by re-sending
  markers) with the partition's leader epoch as coordinator epoch, and each one it stopped leading is dropped
  (NOT_COORDINATOR from then on). Loading is synchronous on the event loop, so no request sees a half-loaded
  partition (Kafka answers COORDINATOR_LOAD_IN_PROGRESS in that window; here there is none).
* **State writes** (:class:`~.internal_topics.ReplicatedInternalTopic`): an append to the leader's replica with
  acks=-1 rules (leadership confirmed, NOT_ENOUGH_REPLICAS under the minimum ISR); the request handlers answer
  only once the records are replicated (:func:`answer_after_state_write`: NOT_COORDINATOR when leadership moved
  meanwhile, COORDINATOR_NOT_AVAILABLE when the ISR shrank or the wait timed out; the client retries; a single
  node answers at once), and an answer read from a transactional id's state without writing waits for that
  state's last record too (the coordinator applies a record once appended here, before it is replicated).
* **Markers** (:class:`ClusterTransactions`, the cluster's marker channel): in the background, once the Prepare record is replicated, one
  WriteTxnMarkers request per partition leader (this node's own partitions are appended directly, with the same
  rules), carrying the coordinator epoch. Retriable failures (no leader, NOT_LEADER_OR_FOLLOWER, the ISR under
  the minimum, timeouts, a dead or unreachable leader) are retried every ``RETRY_BACKOFF_MS`` with fresh metadata,
  never dropped; UNKNOWN_TOPIC_OR_PARTITION (topic deleted) is reported to the coordinator, which drops that
  marker with a WARNING as Kafka does; TRANSACTION_COORDINATOR_FENCED / INVALID_PRODUCER_EPOCH, or this node
  losing the partition, stop the sender (the current coordinator completes the transaction). Tests only:
  while the file named by ``pylog.test.transaction.markers.hold.file`` exists, markers wait (after the Prepare
  record is replicated), so a test can kill a node at that point.

Threading: event-loop thread only (the marker sender's tasks run on the loop too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC, MarkerDone, MarkerRequest
from broker_runtime.errors import ErrorCode, PylogError
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.records import CONTROL_COMMIT
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.security.async_client import open_connection, round_trip
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import complete_offsets_txn
from broker_runtime.server.replica_manager import AppendResult
from broker_runtime.server.replicated import answer_after_replication, wait_replicated
from broker_runtime.server.topics import TopicError

__all__ = [
    "RETRY_BACKOFF_MS",
    "ClusterTransactions",
    "answer_after_state_write",
    "coordinator_node",
    "ensure_state_topic",
]

_log = logging.getLogger(__name__)

#: Wait between rounds of marker retries (Kafka's coordinator retries its marker requests as its sender loops).
RETRY_BACKOFF_MS = 100
#: How long a state write or a marker request may wait for replication before it counts as failed.
REPLICATION_TIMEOUT_MS = 30_000
#: A marker request to another broker without an answer for this long is retried (connection dropped).
REQUEST_TIMEOUT_S = REPLICATION_TIMEOUT_MS / 1000 + 5
_WRITE_TXN_MARKERS_VERSION = 1
_RETRIABLE_MARKER_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
_STOP_MARKER_ERRORS = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})


def ensure_state_topic(ctx: BrokerContext) -> None:
    """Create ``__transaction_state`` in the cluster metadata if it does not exist (see the module docstring)."""
    cfg = ctx.config
    if ctx.cluster.view.topics.get(TRANSACTION_STATE_TOPIC) is not None:
        return
    unfenced = [b for b in ctx.cluster.view.brokers.values() if not b.fenced]
    replication = min(cfg.transaction_state_log_replication_factor, max(1, len(unfenced)))
    if replication < cfg.transaction_state_log_replication_factor:
        _log.warning(
            "creating %s with replication factor %d: transaction.state.log.replication.factor=%d but only %d "
            "broker(s) are registered and unfenced",
            TRANSACTION_STATE_TOPIC,
            replication,
            cfg.transaction_state_log_replication_factor,
            len(unfenced),
        )
    configs = {
        "cleanup.policy": "compact",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "min.insync.replicas": str(cfg.transaction_state_log_min_isr),
    }
    try:
        ctx.cluster.create_topic(
            TRANSACTION_STATE_TOPIC, cfg.transaction_state_log_num_partitions, replication, configs
        )
    except TopicError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            _log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC, exc)
    ctx.refresh_cluster()


def coordinator_node(ctx: BrokerContext, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) of the coordinator of ``transactional_id`` in the cluster metadata."""
    topic = ctx.cluster.view.topics.get(TRANSACTION_STATE_TOPIC)
    if topic is None:
        ensure_state_topic(ctx)
        topic = ctx.cluster.view.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    index = ctx.txn_coordinator.partition_for(transactional_id)
    if index >= len(topic.partitions):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    leader = topic.partitions[index].leader
    broker = ctx.cluster.view.brokers.get(leader)
    if leader < 0 or broker is None or broker.fenced:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, leader, *ctx.endpoint_of(broker)


def answer_after_state_write(
    ctx: BrokerContext,
    body: Callable[[ErrorCode | None], dict[str, Any]],
    transactional_ids: Iterable[str] = (),
) -> Any:
    """The handler's answer: ``body(None)`` at once, or, in a cluster after the coordinator appended to
    ``__transaction_state``, a future of ``body(None)`` once those appends are replicated, else of
    ``body(NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE)``.

    ``transactional_ids``: the ids whose state the answer was read from. An answer that wrote nothing can still
    rest on a state record not yet replicated (the coordinator applies a record once the leader appended it; the
    request that wrote it may have been answered with an error when its replication failed, and a retry finds
    the partitions already added): it waits for that record too, so a client is never told what a new
    coordinator elected from the ISR would not know (Kafka's cache holds only replicated states:
    ``TransactionStateManager.appendTransactionToLog`` completes a transition in its replication callback)."""
    coordinator = ctx.txn_coordinator
    appended = coordinator.take_appended()
    for transactional_id in transactional_ids:
        end = coordinator.state_end(transactional_id)
        if end is None or end[0] in appended:
            continue
        replica = ctx.replicas.partition(TRANSACTION_STATE_TOPIC, end[0])
        if replica is not None and replica.log.high_watermark < end[1]:
            appended.add(end[0])
    return answer_after_replication(
        ctx, TRANSACTION_STATE_TOPIC, appended, REPLICATION_TIMEOUT_MS, body, "transaction state write"
    )


class ClusterTransactions:
    """A cluster's transaction-marker channel: each partition's marker through its leader, in the background."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        self._node_id = ctx.config.node_id
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, request: MarkerRequest, done: MarkerDone) -> None:
        """The coordinator's :data:`~broker_runtime.coordinator.transaction.MarkerSender` (see the module)."""
        task = self._ctx.loop.create_task(self._send(request, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _still_coordinator(self, state_partition: int, coordinator_epoch: int) -> bool:
        return self._ctx.txn_coordinator.owns(state_partition, coordinator_epoch)

    async def _send(self, request: MarkerRequest, done: MarkerDone) -> None:
        ctx = self._ctx
        transactional_id, producer_id, producer_epoch = (
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
        )
        coordinator_epoch, control_type, partitions = (
            request.coordinator_epoch,
            request.control_type,
            request.partitions,
        )
        state_partition = request.state_partition
        name = "COMMIT" if control_type == CONTROL_COMMIT else "ABORT"
        try:
            # 1. The Prepare record must be replicated before any marker: a successor must find the decision.
            while True:
                if not self._still_coordinator(state_partition, coordinator_epoch):
                    done(None)
                    return
                replica = ctx.replicas.partition(TRANSACTION_STATE_TOPIC, state_partition)
                if replica is None:
                    done(None)
                    return
                target = {
                    (TRANSACTION_STATE_TOPIC, state_partition): AppendResult(
                        ErrorCode.NONE, required_offset=replica.log.log_end_offset
                    )
                }
                final = await wait_replicated(ctx, REPLICATION_TIMEOUT_MS, target)
                if set(final.values()) == {ErrorCode.NONE}:
                    break
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            hold = ctx.config.test_transaction_markers_hold_file
            while hold and os.path.exists(hold):  # fault injection for tests: markers held back
                if not self._still_coordinator(state_partition, coordinator_epoch):
                    done(None)
                    return
                await asyncio.sleep(0.05)
            # 2. One marker per partition, through its current leader, until each is written.
            pending = set(partitions)
            results: dict[TopicPartition, ErrorCode] = {}
            last_errors: dict[TopicPartition, str] = {}
            warned = False
            rounds = 0
            while pending:
                if not self._still_coordinator(state_partition, coordinator_epoch):
                    done(None)
                    return
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in sorted(pending):
                    by_leader.setdefault(self._leader_of(tp), []).append(tp)
                for leader, tps in by_leader.items():
                    if leader < 0:
                        for tp in tps:
                            last_errors[tp] = "no leader"
                        continue
                    codes = await self._write(
                        leader, producer_id, producer_epoch, coordinator_epoch, control_type, tps
                    )
                    for tp, code in codes.items():
                        if code == ErrorCode.NONE or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            results[tp] = code
                            pending.discard(tp)
                        elif code in _STOP_MARKER_ERRORS:
                            _log.warning(
                                "transactional id %r: %s marker for %s-%d refused with %s (coordinator epoch %d "
                                "superseded); leaving the transaction to the current coordinator",
                                transactional_id,
                                name,
                                tp[0],
                                tp[1],
                                code.name,
                                coordinator_epoch,
                            )
                            done(None)
                            return
                        else:
                            last_errors[tp] = code.name
                if pending:
                    rounds += 1
                    if rounds >= 20 and not warned:  # about 2 s of retries: say so once, keep retrying
                        warned = True
                        _log.warning(
                            "transactional id %r: %s markers still pending for %s; retrying until written",
                            transactional_id,
                            name,
                            ", ".join(
                                f"{t}-{p} ({last_errors.get((t, p), '?')})" for t, p in sorted(pending)
                            ),
                        )
                    await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                    ctx.refresh_cluster()
            if warned:
                _log.warning("transactional id %r: %s markers written after retries", transactional_id, name)
            done(results)
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception(
                "transactional id %r: marker sender failed; the periodic check retries", transactional_id
            )
            done({tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in partitions})

    def _leader_of(self, tp: TopicPartition) -> int:
        view = self._ctx.cluster.view
        topic = view.topics.get(tp[0])
        if topic is None or tp[1] >= len(topic.partitions):
            return self._node_id  # unknown here: ask ourselves, which answers UNKNOWN_TOPIC_OR_PARTITION
        leader: int = topic.partitions[tp[1]].leader
        broker = view.brokers.get(leader)
        return -1 if broker is None or broker.fenced else leader

    async def _write(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        control_type: int,
        tps: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        ctx = self._ctx
        if leader == self._node_id:
            appended = {
                tp: ctx.replicas.write_txn_marker(
                    tp[0], tp[1], producer_id, producer_epoch, coordinator_epoch, control_type, acks=-1
                )
                for tp in tps
            }
            final = await wait_replicated(ctx, REPLICATION_TIMEOUT_MS, appended)
            complete_offsets_txn(ctx, producer_id, control_type, final)
            return final
        topics: dict[str, list[int]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append(index)
        body = {
            "Markers": [
                {
                    "ProducerId": producer_id,
                    "ProducerEpoch": producer_epoch,
                    "TransactionResult": control_type == CONTROL_COMMIT,
                    "Topics": [{"Name": t, "PartitionIndexes": ps} for t, ps in topics.items()],
                    "CoordinatorEpoch": coordinator_epoch,
                }
            ]
        }
        broker = ctx.cluster.view.brokers.get(leader)
        if broker is None:
            return dict.fromkeys(tps, ErrorCode.LEADER_NOT_AVAILABLE)
        try:
            answer = await asyncio.wait_for(
                self._round_trip(broker.host, broker.port, body), REQUEST_TIMEOUT_S
            )
        except (OSError, TimeoutError, PylogError) as exc:
            _log.info("WriteTxnMarkers to node %d at %s:%d failed: %s", leader, broker.host, broker.port, exc)
            return dict.fromkeys(tps, ErrorCode.LEADER_NOT_AVAILABLE)
        codes: dict[TopicPartition, ErrorCode] = dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR)
        for marker in answer["Markers"]:
            for topic in marker["Topics"]:
                for part in topic["Partitions"]:
                    codes[(topic["Name"], part["PartitionIndex"])] = ErrorCode(part["ErrorCode"])
        return codes

    async def _round_trip(self, host: str, port: int, body: dict[str, Any]) -> dict[str, Any]:
        """One WriteTxnMarkers request on a connection of its own."""
        security = self._ctx.config.inter_broker_security()
        reader, writer, _ = await open_connection(  # one request: the session lifetime does not matter
            host, port, security, client_id=f"pylog-txn-coordinator-{self._node_id}", timeout_s=30.0
        )
        try:
            state = ClientConnection(f"pylog-txn-coordinator-{self._node_id}")
            return await round_trip(
                reader,
                writer,
                state,
                ApiKey.WRITE_TXN_MARKERS,
                _WRITE_TXN_MARKERS_VERSION,
                body,
                address=f"{host}:{port}",
            )
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
