"""Transaction verification on produce (KIP-890 part 1, Kafka's ``ReplicaManager.handleProduceAppend`` and
``AddPartitionsToTxnManager``): a partition leader asks the transaction coordinator before it appends a
producer's first transactional batch to a partition, so a produce that arrives after its transaction ended (a
request delayed in the network, retried after the abort) cannot open a transaction nobody will end (a "hanging"
transaction, which would hold the partition's last stable offset, and every read_committed reader, until an
operator aborts it).

When (``transaction.partition.verification.enable``, default true as in Kafka): a Produce with a transactional id
whose partition's first batch is transactional, from a producer with no open transaction AT THE BATCH'S EPOCH on
that partition (its producer state, :meth:`~broker_runtime.server.replica_manager.ReplicaManager.
has_ongoing_transaction`, as Kafka's ``UnifiedLog.hasOngoingTransaction``: the previous transaction of a
transaction version 2 producer, whose markers may not have landed yet, is at the previous epoch, and the batch must
never join it). Batches of a producer already in a transaction there at that epoch, and non-transactional
produces, are appended as before, with no question asked. Authorization and the other checks of Produce come first: an unauthorized or malformed request
never costs a question to the coordinator.

How: the coordinator's :meth:`~broker_runtime.coordinator.transaction.TransactionCoordinator.verify_partitions`
answers. On this node (a single node, or the coordinator of the transactional id in a cluster) it is asked
directly and the batch is appended in the same step of the event loop. Otherwise, AddPartitionsToTxn v4 with
``VerifyOnly`` goes to the coordinator's node (the leader of the id's ``__transaction_state`` partition, on the
inter-broker listener's security, at most ``REQUEST_TIMEOUT_S``); meanwhile a
:class:`~broker_runtime.server.replica_manager.VerificationGuard` watches the partition, and a COMMIT/ABORT marker
of the producer written there before the answer arrives makes the append fail with INVALID_TXN_STATE (the
transaction the answer was about is over).

Order: a connection's requests are dispatched several at once, so two pipelined produces of one producer to one
partition could both be verifying, and append in the order their answers come (the later batch first: an
out-of-order sequence). Kafka handles one request of a channel at a time. Here the verifications of a (partition,
producer id) are chained: a request that finds one in flight for a key waits until that one's request appended
(or was refused), then looks again: a partition now in the producer's transaction is appended with no question
asked, any other is verified. So the appends keep the requests' order.

Connections (Kafka's ``AddPartitionsToTxnManager`` keeps one in-flight request per node): at most ONE outbound
connection per coordinator node, carrying one question at a time (the others queue for it), opened on demand
and closed when no verification waits for it; an error or a timeout mid-question closes it (the next question
opens a fresh one). The state (chains and connections) is per broker, kept with its
:class:`~broker_runtime.server.replica_manager.ReplicaManager`.

Answers, as Kafka maps the coordinator's (``AddPartitionsToTxnManager`` then ``handleProduceAppend``):

====================================================  ==================================================
coordinator                                           produce partition
====================================================  ==================================================
NONE (the partition is in the transaction)            appended
TRANSACTION_ABORTABLE (it is not)                     TRANSACTION_ABORTABLE from Produce v11 (the client
                                                      aborts), INVALID_TXN_STATE below
PRODUCER_FENCED                                       INVALID_PRODUCER_EPOCH
INVALID_PRODUCER_ID_MAPPING                           the same
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,           NOT_ENOUGH_REPLICAS (retriable, and no metadata
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, refresh), "Unable to verify ...: <error>"
no answer (NETWORK_EXCEPTION)
CLUSTER_AUTHORIZATION_FAILED (top level)              INVALID_TXN_STATE
====================================================  ==================================================

Transactional batches of more than one producer in one request: INVALID_PRODUCER_ID_MAPPING for the partitions to
verify (Kafka refuses such a request).

Transaction version 2 (KIP-890 part 2; Kafka's ``TransactionSupportedOperation`` ``addPartition``): a Produce v12+
or TxnOffsetCommit v5+ comes from a producer that never sends AddPartitionsToTxn, so the same question ADDS the
partition to the producer's transaction instead of verifying it (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_partitions` with client version 2 on this node, AddPartitionsToTxn v5 without
``VerifyOnly`` remotely). It is asked whatever ``transaction.partition.verification.enable`` says: without it the
partition would never reach the transaction and its markers. The answers map as above. Threading: event-loop thread only; the remote question is a task on it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC
from broker_runtime.errors import CorruptRecordError, ErrorCode, PylogError
from broker_runtime.protocol.batch_header import HEADER_SIZE, parse_header
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.security.async_client import open_connection, round_trip
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import AppendResult, ReplicaManager, VerificationGuard
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["REQUEST_TIMEOUT_S", "Candidate", "verify_partition_then", "verify_then"]

_log = logging.getLogger(__name__)

#: The longest a remote verification may take before the produce gets the retriable NOT_ENOUGH_REPLICAS (below a
#: producer's default request.timeout.ms of 30 s, so the client sees the error rather than its own timeout).
REQUEST_TIMEOUT_S = 15.0
#: The AddPartitionsToTxn version a partition leader verifies with (the first with ``VerifyOnly``), and the one it
#: adds a transaction version 2 producer's partitions with (the coordinator takes v5 as transaction version 2).
_VERIFY_VERSION = 4
_ADD_VERSION = 5
#: The first Produce version whose producers rely on the leader to add the partition (transaction version 2).
_ADD_SINCE = 12
#: The first Produce version whose clients handle TRANSACTION_ABORTABLE (KIP-890).
_ABORTABLE_SINCE = 11
_RETRIABLE = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)

#: A partition the handler is about to append: (topic, partition, its records).
Candidate = tuple[str, int, Any]


class _Link:
    """The one connection to a coordinator node (see the module docstring): one question at a time."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0
        self.stream: tuple[asyncio.StreamReader, asyncio.StreamWriter, ClientConnection] | None = None

    def close(self) -> None:
        if self.stream is not None:
            self.stream[1].close()
            self.stream = None


@dataclass
class _State:
    """One broker's verifications in flight: (partition, producer id) -> done when that request appended or was
    refused; (host, port) -> the link to that coordinator node."""

    pending: dict[tuple[TopicPartition, int], asyncio.Future[None]] = field(default_factory=dict)
    links: dict[tuple[str, int], _Link] = field(default_factory=dict)


_STATES: weakref.WeakKeyDictionary[ReplicaManager, _State] = weakref.WeakKeyDictionary()


def _state(ctx: BrokerContext) -> _State:
    state = _STATES.get(ctx.replicas)
    if state is None:
        state = _STATES[ctx.replicas] = _State()
    return state


def _to_verify(
    ctx: BrokerContext, candidates: list[Candidate]
) -> tuple[dict[TopicPartition, tuple[int, int]], bool]:
    """The partitions whose first batch needs verification -> (producer id, epoch); and whether they come from
    more than one producer."""
    out: dict[TopicPartition, tuple[int, int]] = {}
    for topic, partition, records in candidates:
        if records is None or len(records) < HEADER_SIZE:
            continue
        try:
            header = parse_header(memoryview(records))
        except (CorruptRecordError, PylogError):
            continue  # the append's validation answers it
        if not header.is_transactional or header.is_control or header.producer_id < 0:
            continue
        if (
            ctx.replicas.has_ongoing_transaction(topic, partition, header.producer_id, header.producer_epoch)
            is False
        ):
            out[(topic, partition)] = (header.producer_id, header.producer_epoch)
    return out, len(set(out.values())) > 1


def _answer(code: ErrorCode, abortable: bool) -> AppendResult:
    """The partition's answer for the coordinator's ``code`` (the module's table); ``abortable``: the request's
    version handles TRANSACTION_ABORTABLE."""
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        if abortable:
            return AppendResult(code, message="The partition was not added to the transaction")
        code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.INVALID_TXN_STATE:
        return AppendResult(code, message="Partition was not added to the transaction")
    if code == ErrorCode.PRODUCER_FENCED:
        return AppendResult(ErrorCode.INVALID_PRODUCER_EPOCH, message="the producer's epoch is fenced")
    if code in _RETRIABLE:
        return AppendResult(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            message=f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name}",
        )
    return AppendResult(code, message=f"transaction verification failed: {code.name}")


def verify_then(
    ctx: BrokerContext,
    produce_version: int,
    transactional_id: str | None,
    candidates: list[Candidate],
    append: Callable[[dict[TopicPartition, AppendResult]], Any],
) -> Any:
    """Produce: ``append(refused)`` once the partitions of ``candidates`` that need it are verified (``refused``:
    the answer of each that failed); at once when none needs it or the coordinator is this node, else a task
    whose result is ``append``'s (awaited when that is a future)."""
    add = produce_version >= _ADD_SINCE
    if transactional_id is None or not (add or ctx.config.transaction_partition_verification_enable):
        return append({})
    wanted, mixed = _to_verify(ctx, candidates)
    if not wanted:
        return append({})
    if mixed:
        refused = AppendResult(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            message="Transactional records contained more than one producer ID",
        )
        return append(dict.fromkeys(wanted, refused))
    producer_id, epoch = next(iter(wanted.values()))
    return _verify(
        ctx,
        transactional_id,
        producer_id,
        epoch,
        sorted(wanted),
        produce_version >= _ABORTABLE_SINCE,
        append,
        add,
    )


def verify_partition_then(
    ctx: BrokerContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partition: TopicPartition,
    abortable: bool,
    then: Callable[[AppendResult | None], Any],
    add: bool = False,
) -> Any:
    """TxnOffsetCommit (Kafka's group coordinator verifies its ``__consumer_offsets`` partition the same way):
    ``then(None)`` when ``partition`` needs no verification or passes it, else ``then(the refusal)``; at once or
    as a task, as :func:`verify_then`. ``add``: TxnOffsetCommit v5+, the partition is added (transaction
    version 2)."""
    ongoing = ctx.replicas.has_ongoing_transaction(partition[0], partition[1], producer_id, epoch)
    asked = add or ctx.config.transaction_partition_verification_enable
    # (an add also asks for a partition with no replica here: a single node's offsets partition)
    if not asked or ongoing or (ongoing is None and not add):
        return then(None)
    return _verify(
        ctx,
        transactional_id,
        producer_id,
        epoch,
        [partition],
        abortable,
        lambda refused: then(refused.get(partition)),
        add,
    )


def _verify(
    ctx: BrokerContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: list[TopicPartition],
    abortable: bool,
    then: Callable[[dict[TopicPartition, AppendResult]], Any],
    add: bool = False,
) -> Any:
    coordinator = ctx.txn_coordinator
    state = _state(ctx)
    earlier = {f for tp in partitions if (f := state.pending.get((tp, producer_id))) is not None}
    if not earlier and not add and coordinator.owner_error(transactional_id) == ErrorCode.NONE:
        codes = coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        return then(_refused(codes, abortable))
    # Otherwise in a task, chained (see "Order"): an add waits for its state write's replication.
    replicas = ctx.replicas
    guards = {tp: replicas.begin_verification(tp[0], tp[1], producer_id) for tp in partitions}
    done: asyncio.Future[None] = ctx.loop.create_future()
    for tp in partitions:
        state.pending[(tp, producer_id)] = done
    return ctx.loop.create_task(
        _verify_remotely(
            ctx, abortable, transactional_id, producer_id, epoch, guards, then, earlier, done, add
        )
    )


async def _ask_here(
    ctx: BrokerContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: list[TopicPartition],
    add: bool,
) -> dict[TopicPartition, ErrorCode]:
    """The answer of this node's coordinator: the partitions verified, or added (transaction version 2), once
    the state write and the id's state the answer read are replicated (at once on a single node), as an
    AddPartitionsToTxn is answered."""
    coordinator = ctx.txn_coordinator
    coordinator.take_appended()  # only this add's state write (and the id's state read) is waited for
    if not add:
        codes = coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
    elif [tp[0] for tp in partitions] == [
        CONSUMER_OFFSETS_TOPIC
    ]:  # TxnOffsetCommit: as AddOffsetsToTxn adds it
        code = coordinator.add_offsets(transactional_id, producer_id, epoch, partitions[0], client_version=2)
        codes = {partitions[0]: code}
    else:
        codes = coordinator.add_partitions(transactional_id, producer_id, epoch, partitions, client_version=2)
    answer = answer_after_state_write(ctx, lambda failed: {"failed": failed}, [transactional_id])
    if isinstance(answer, asyncio.Future):
        answer = await answer
    failed = answer["failed"]
    return dict.fromkeys(codes, failed) if failed else codes


def _refused(codes: dict[TopicPartition, ErrorCode], abortable: bool) -> dict[TopicPartition, AppendResult]:
    return {tp: _answer(code, abortable) for tp, code in codes.items() if code != ErrorCode.NONE}


async def _verify_remotely(
    ctx: BrokerContext,
    abortable: bool,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    guards: dict[TopicPartition, VerificationGuard],
    append: Callable[[dict[TopicPartition, AppendResult]], Any],
    earlier: set[asyncio.Future[None]],
    done: asyncio.Future[None],
    add: bool = False,
) -> Any:
    replicas = ctx.replicas
    try:
        if earlier:  # the chain: the same producer's earlier requests to these partitions append first
            await asyncio.wait(earlier)
        # (an add also asks for a partition with no replica here: the group's offsets partition of a single node)
        still = [
            tp
            for tp in sorted(guards)
            if not replicas.has_ongoing_transaction(tp[0], tp[1], producer_id, epoch)
            and (add or replicas.has_ongoing_transaction(tp[0], tp[1], producer_id, epoch) is False)
        ]
        codes: dict[TopicPartition, ErrorCode] = {}
        if still:
            coordinator = ctx.txn_coordinator
            if coordinator.owner_error(transactional_id) == ErrorCode.NONE:
                codes = await _ask_here(ctx, transactional_id, producer_id, epoch, still, add)
            else:
                codes = await _ask_coordinator(ctx, transactional_id, producer_id, epoch, still, add)
        refused = _refused(codes, abortable)
        for tp, guard in guards.items():
            if tp in refused or guard.alive:
                continue
            if replicas.has_ongoing_transaction(tp[0], tp[1], producer_id, epoch) is False:
                refused[tp] = AppendResult(
                    ErrorCode.INVALID_TXN_STATE,
                    message="a marker of the producer's transaction was written while the partition was verified",
                )
        result = append(refused)  # no await between the guards' check and the append
    finally:
        for tp, guard in guards.items():
            replicas.end_verification(tp[0], tp[1], producer_id, guard)
        pending = _state(ctx).pending
        for tp in guards:
            if pending.get((tp, producer_id)) is done:
                del pending[(tp, producer_id)]
        done.set_result(None)
    if isinstance(result, asyncio.Future):
        return await result
    return result


async def _ask_coordinator(
    ctx: BrokerContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: list[TopicPartition],
    add: bool = False,
) -> dict[TopicPartition, ErrorCode]:
    """The coordinator's answer per partition (AddPartitionsToTxn v4 with VerifyOnly, or v5 without it when
    ``add``), or the error that stood in for it (COORDINATOR_NOT_AVAILABLE: no coordinator known;
    NETWORK_EXCEPTION: no answer)."""
    node = _coordinator_node(ctx, transactional_id)
    if node is None:
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    host, port = node
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    body = {
        "Transactions": [
            {
                "TransactionalId": transactional_id,
                "ProducerId": producer_id,
                "ProducerEpoch": epoch,
                "VerifyOnly": not add,
                "Topics": [{"Name": t, "Partitions": ps} for t, ps in topics.items()],
            }
        ]
    }
    try:
        answer = await asyncio.wait_for(
            _round_trip(ctx, host, port, body, _ADD_VERSION if add else _VERIFY_VERSION), REQUEST_TIMEOUT_S
        )
    except (OSError, TimeoutError, PylogError) as exc:
        _log.warning(
            "transaction verification of %r with its coordinator at %s:%d failed: %s; the producer retries",
            transactional_id,
            host,
            port,
            exc,
        )
        return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
    top = ErrorCode(answer["ErrorCode"])
    if top != ErrorCode.NONE:
        _log.warning(
            "transaction verification of %r: the coordinator answered %s", transactional_id, top.name
        )
        if top == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:  # Kafka: never shown to the client
            top = ErrorCode.INVALID_TXN_STATE
        return dict.fromkeys(partitions, top)
    codes: dict[TopicPartition, ErrorCode] = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
    for result in answer["ResultsByTransaction"]:
        for topic in result["TopicResults"]:
            for part in topic["ResultsByPartition"]:
                tp = (topic["Name"], part["PartitionIndex"])
                if tp in codes:
                    codes[tp] = ErrorCode(part["PartitionErrorCode"])
    return codes


def _coordinator_node(ctx: BrokerContext, transactional_id: str) -> tuple[str, int] | None:
    """(host, port) of the leader of ``transactional_id``'s ``__transaction_state`` partition, None if none."""
    topic = ctx.cluster.view.topics.get(TRANSACTION_STATE_TOPIC)
    if topic is None:
        return None
    index = ctx.txn_coordinator.partition_for(transactional_id)
    if index >= len(topic.partitions):
        return None
    broker = ctx.cluster.view.brokers.get(topic.partitions[index].leader)
    if broker is None or broker.fenced:
        return None
    return broker.host, broker.port


async def _round_trip(
    ctx: BrokerContext, host: str, port: int, body: dict[str, Any], version: int
) -> dict[str, Any]:
    """One AddPartitionsToTxn request on the node's link (see the module docstring)."""
    links = _state(ctx).links
    link = links.get((host, port))
    if link is None:
        link = links[(host, port)] = _Link()
    link.users += 1
    try:
        async with link.lock:
            try:
                return await _ask_on(ctx, link, host, port, body, version)
            except BaseException:  # an error or a timeout mid-question: the stream's state is unknown
                link.close()
                raise
    finally:
        link.users -= 1
        if link.users == 0:
            link.close()
            if links.get((host, port)) is link:
                del links[(host, port)]


async def _ask_on(
    ctx: BrokerContext, link: _Link, host: str, port: int, body: dict[str, Any], version: int
) -> dict[str, Any]:
    if link.stream is None:
        node_id = ctx.config.node_id
        reader, writer, _ = await open_connection(
            host,
            port,
            ctx.config.inter_broker_security(),
            client_id=f"pylog-txn-verification-{node_id}",
            timeout_s=10.0,
        )
        link.stream = reader, writer, ClientConnection(f"pylog-txn-verification-{node_id}")
    reader, writer, state = link.stream
    return await round_trip(
        reader, writer, state, ApiKey.ADD_PARTITIONS_TO_TXN, version, body, address=f"{host}:{port}"
    )
