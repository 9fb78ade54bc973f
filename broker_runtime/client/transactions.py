"""The client's transaction calls, Kafka's producer's TransactionManager requests: InitProducerId,
AddPartitionsToTxn and EndTxn, one at a time or pipelined across many transactional ids.

:class:`TransactionClient` is a thin facade over its client's
:class:`~broker_runtime.client.router.ClientRouter` (``KafkaClient.transactions``); its only state is the
transaction coordinator found for each transactional id (FindCoordinator), kept until a request to it fails with
a coordinator error or a lost connection. Threading: as its client's, the thread that owns the client calls it;
the connector's driver commits its tasks' transactions from its own client (any process may end a transaction
with the producer's id and epoch).

Retries: what Kafka's producer retries (:data:`TXN_RETRY_ERRORS`: the coordinator moved, is loading or not
available, CONCURRENT_TRANSACTIONS while the previous transaction's markers are written) and lost connections,
within the client's retry budget (``retry_timeout_ms``, else ``retries`` attempts, ``retry_backoff_ms`` apart);
anything else (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...) raises ``KafkaError`` at once
naming the transactional id. Versions: AddPartitionsToTxn v0-3 and EndTxn v0-4 (the router caps them,
:data:`~broker_runtime.client.router.DEFAULT_MAX_VERSIONS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from broker_runtime.client.router import (
    COORDINATOR_ERRORS,
    ClientRouter,
    RetryBudget,
    by_topic,
    connection_failure,
)
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey, find_coordinator
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = ["TXN_RETRY_ERRORS", "TransactionClient"]


#: What Kafka's producer retries on AddPartitionsToTxn / EndTxn: the coordinator moved or is loading (find it
#: again), or the previous transaction's markers are still being written (CONCURRENT_TRANSACTIONS).
TXN_RETRY_ERRORS = COORDINATOR_ERRORS | {ErrorCode.CONCURRENT_TRANSACTIONS}


class TransactionClient:
    """The transaction requests of a :class:`~broker_runtime.client.KafkaClient` (``client.transactions``);
    see the module docstring."""

    def __init__(self, router: ClientRouter) -> None:
        self._router = router
        #: transactional id -> its coordinator's node id (FindCoordinator), until it answers NOT_COORDINATOR etc.
        self._txn_coordinators: dict[str, int] = {}

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
        budget = RetryBudget(self._router)
        while True:
            try:
                node = (
                    self._transaction_coordinator(transactional_id) if transactional_id is not None else None
                )
                _, body = self._router.connection(node).request(ApiKey.INIT_PRODUCER_ID, request)
                code = body["ErrorCode"]
            except KafkaError as exc:  # FindCoordinator's own answer
                if exc.code not in COORDINATOR_ERRORS:
                    raise
                code = exc.code
            if code == ErrorCode.NONE:
                return body["ProducerId"], body["ProducerEpoch"]
            if code in COORDINATOR_ERRORS and budget.another_attempt():
                self._router.backoff()
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
        (:data:`TXN_RETRY_ERRORS`, UNKNOWN_TOPIC_OR_PARTITION while a topic is being created, a lost
        connection) within the retry budget. Anything else (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
        INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, ...) raises ``KafkaError`` with that code, naming
        the transactional id and the partitions.
        """
        wanted = sorted(set(tps))
        if not wanted:
            return
        names = ", ".join(f"{t}-{p}" for t, p in wanted)
        self._txn_request(
            transactional_id,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            _add_partitions_request(transactional_id, producer_id, producer_epoch, wanted),
            _add_partitions_code,
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
            (tid, ApiKey.ADD_PARTITIONS_TO_TXN, _add_partitions_request(tid, pid, epoch, sorted(set(tps))))
            for tid, pid, epoch, tps in txns
        ]

        def one(i: int) -> None:
            self.add_partitions_to_txn(*txns[i])

        return self._txn_pipelined(
            calls, _add_partitions_code, one, lambda i: f"AddPartitionsToTxn for {txns[i][0]!r}"
        )

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
                conn = self._router.connection(node)
                corr, _ = conn.send(api_key, body)
                sent.setdefault(node, []).append((i, corr, conn.generation))
            except KafkaError as e:
                if not (connection_failure(e) or e.code in TXN_RETRY_ERRORS):
                    failed[tid] = KafkaError(e.code, f"{what(i)}: {e}")
                else:
                    redo.append(i)
        for node, pending in sent.items():
            for i, corr, generation in pending:
                tid = calls[i][0]
                try:
                    code = code_of(self._router.connection(node).receive(corr, generation))
                except KafkaError as e:
                    if connection_failure(e):
                        self._router.disconnect(node)
                    redo.append(i)
                    continue
                if code == ErrorCode.NONE:
                    continue
                if code in TXN_RETRY_ERRORS or code == ErrorCode.NETWORK_EXCEPTION:
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
        budget = RetryBudget(self._router)
        retriable = TXN_RETRY_ERRORS | retry_also
        while True:
            node: int | None = self._txn_coordinators.get(transactional_id)
            try:
                if node is None:
                    node = self._txn_coordinators[transactional_id] = self._transaction_coordinator(
                        transactional_id
                    )
                _, body = self._router.connection(node).request(api_key, request)
                code = code_of(body)
            except KafkaError as e:
                if not (connection_failure(e) or e.code in retriable):
                    raise
                if node is not None and connection_failure(e):
                    self._router.disconnect(node)
                code, body = int(e.code), {}
            if code == ErrorCode.NONE:
                return body
            if (
                code in COORDINATOR_ERRORS
                or code == ErrorCode.NETWORK_EXCEPTION
                or code == ErrorCode.BROKER_NOT_AVAILABLE
            ):
                self._txn_coordinators.pop(transactional_id, None)  # find it again
            if code not in retriable or not budget.another_attempt():
                raise KafkaError(
                    code, f"{what}, after {budget.attempts} attempt(s) in {budget.spent_ms()} ms"
                )
            self._router.backoff()

    def _transaction_coordinator(self, transactional_id: str) -> int:
        return self._router.find_coordinator(
            transactional_id, find_coordinator.KEY_TYPE_TRANSACTION, f"transactional id {transactional_id!r}"
        )


def _add_partitions_request(
    transactional_id: str, producer_id: int, producer_epoch: int, tps: Iterable[TopicPartition]
) -> dict[str, Any]:
    """An AddPartitionsToTxn v0-3 body: ``tps`` join the producer's open transaction."""
    return {
        "V3AndBelowTransactionalId": transactional_id,
        "V3AndBelowProducerId": producer_id,
        "V3AndBelowProducerEpoch": producer_epoch,
        "V3AndBelowTopics": [
            {"Name": topic, "Partitions": [p for p, _ in parts]}
            for topic, parts in by_topic((tp, None) for tp in tps).items()
        ],
    }


def _add_partitions_code(body: Mapping[str, Any]) -> int:
    """The code of an AddPartitionsToTxn answer: the first partition's error that is not only
    OPERATION_NOT_ATTEMPTED (which says another partition failed: report that one)."""
    worst = ErrorCode.NONE
    for t in body["ResultsByTopicV3AndBelow"]:
        for p in t["ResultsByPartition"]:
            code = p["PartitionErrorCode"]
            if code and (worst in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED)):
                worst = code
    return int(worst)
