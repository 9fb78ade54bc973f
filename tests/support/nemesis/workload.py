"""The clients a nemesis run keeps busy while faults happen, each a thread recording what the cluster told it.

=====================  =========================================================================================
:class:`Idempotent`    librdkafka's idempotent producer (``acks=all``, ``enable.idempotence``) writing the numbers
                       0, 1, 2, ... as values, number ``n`` to partition ``n % partitions``; every delivery report
                       is recorded: ``acked[n] = (partition, offset)`` or the error
:class:`Transactional` librdkafka's transactional producer: transaction ``t`` writes 1-4 records ``t:k`` to random
                       partitions, then commits (70 %) or aborts (30 %) as a seeded generator says; the outcome of
                       each transaction as the client learnt it: ``committed``, ``aborted`` or ``unknown`` (the
                       call never answered, or the producer died fatally)
:class:`GroupMember`   a consumer of the idempotent topic in a group of its own (one member, so it is the stable
                       member), committing its position after a batch it consumes (asynchronously, as librdkafka's
                       synchronous commit has no bound, and one at a time, so answers come in commit order);
                       every successful commit is recorded ``(partition, offset)`` in that order
=====================  =========================================================================================

Every error a client reports (an exception, a delivery report, librdkafka's ``error_cb``) is kept as a
:class:`ClientError` with librdkafka's classification (``fatal``, ``retriable``, ``txn_requires_abort``), so the
checkers (:mod:`.checkers`) can fail on what Kafka would not answer in the same situation: none of these clients
is ever fenced (one producer per transactional id, one member per group), so a fatal error is a failure, but
for one that Kafka gives this client too (:class:`AddsSeen`: an abort with no partition accepted, whose
AddPartitionsToTxn were answered CONCURRENT_TRANSACTIONS while the previous commit's markers waited for a
leaderless partition, or whose EndTxn went to a new coordinator elected before its AddPartitionsToTxn was
replicated), which the error names (``kafka_too``) and the checkers count apart. A fatal error's report says
what the producer saw of its transaction (:meth:`AddsSeen.story`).

Timings are the clients' own: ``message.timeout.ms`` 120 s (longer than any fault a schedule holds, so an
acknowledged-or-failed record is the broker's answer, not the client giving up), ``transaction.timeout.ms`` 30 s
with ``message.timeout.ms`` 20 s for the transactional producer (a record timing out makes the transaction
abortable; were the two equal, the coordinator could abort the transaction on its timeout first, bumping the
epoch, and the client's abort would be fenced -- fatal, with Kafka too), group ``session.timeout.ms`` 6 s.

Bootstrap: each client is made with the addresses the cluster has when it is made (``bootstrap()``): nodes come
back on new ports, so a producer made again late in a run would find none of the first ones listening.

Threading: each workload runs in its own thread; ``stop()`` asks it to finish its current operation, drain and
close its client; ``join`` waits. The recorded lists are read only after ``join``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

__all__ = ["AddsSeen", "ClientError", "GroupMember", "Idempotent", "Transactional"]

#: librdkafka's own log lines (a connection refused by every restarted node's old port, hundreds per run) go
#: to this logger, which pytest captures, instead of stderr.
LIBRDKAFKA_LOG = logging.getLogger("tests.nemesis.librdkafka")
LIBRDKAFKA_LOG.propagate = False
LIBRDKAFKA_LOG.setLevel(logging.DEBUG)
#: The last of those lines, printed by a failing run (:meth:`.runner.Report.summary`).
LIBRDKAFKA_TAIL: collections.deque[str] = collections.deque(maxlen=40)


class _Tail(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        LIBRDKAFKA_TAIL.append(f"{record.levelname} {record.getMessage()}")


LIBRDKAFKA_LOG.addHandler(_Tail(logging.DEBUG))

#: ``PYLOG_NEMESIS_DEBUG``: librdkafka's ``debug`` contexts for every workload's client (e.g. ``eos,cgrp,protocol``),
#: to see what it sent and was answered when a run fails.
DEBUG = os.environ.get("PYLOG_NEMESIS_DEBUG", "")

#: How long a stopping producer may take to get every outstanding record answered.
DRAIN_S = 60.0
#: How long one commit or abort call is retried on retriable errors before its outcome counts as unknown.
FINISH_S = 60.0


@dataclass(frozen=True)
class ClientError:
    client: str
    where: str
    name: str
    fatal: bool
    retriable: bool
    txn_requires_abort: bool
    text: str
    #: why Apache Kafka would fail this client the same way (empty: it would not); only
    #: :meth:`Transactional._finish` sets it, for the one case :class:`AddsSeen` proves
    kafka_too: str = ""
    #: what the client saw before the error (:meth:`AddsSeen.story`, for a transactional producer's fatal
    #: error), printed under a failure the error causes
    seen: str = ""

    @classmethod
    def of(cls, client: str, where: str, err: KafkaError, kafka_too: str = "", seen: str = "") -> ClientError:
        return cls(
            client,
            where,
            err.name(),
            err.fatal(),
            err.retriable(),
            err.txn_requires_abort(),
            err.str(),
            kafka_too,
            seen,
        )

    def __str__(self) -> str:
        kind = "FATAL " if self.fatal else ""
        also = f" [as with Kafka: {self.kafka_too}]" if self.kafka_too else ""
        return f"{self.client} {self.where}: {kind}{self.name} ({self.text}){also}"


class AddsSeen(logging.Filter):
    """What the transactional producer saw of its current transaction, read from librdkafka's ``eos`` debug lines
    (the producer's ``logger``; the lines are dropped here unless ``PYLOG_NEMESIS_DEBUG`` asks for them).

    librdkafka's log lines come in the order it made them, so a transaction's lines are those after its
    ``-> InTransaction`` state change: ``concurrent`` counts the answers CONCURRENT_TRANSACTIONS
    (``rd_kafka_txn_handle_AddPartitionsToTxn``), ``registered`` the partitions the coordinator accepted
    (``rd_kafka_txn_partition_registered``). :meth:`story` tells the transaction for a failure report, without
    ``PYLOG_NEMESIS_DEBUG``: the AddPartitionsToTxn sent and to which coordinator, their answers by error, the
    partitions registered, the coordinator changes, and the last :data:`STORY_LINES` of its eos lines."""

    #: How many eos lines of one transaction :meth:`story` keeps (the last ones).
    STORY_LINES = 30
    #: The eos lines kept for the story (librdkafka's facility names); the others (coordinator queries, partitions
    #: marked for registration) would crowd them out.
    _KEPT = ("ADDPARTS", "ENDTXN", "TXNABORT", "TXNCOMMIT", "TXNERR", "FATAL", "TXNSTATE")
    _NOISE = ("Marked ", "Not registering partitions")

    def __init__(self) -> None:
        super().__init__()
        self.concurrent = 0
        self.registered = 0
        #: the node id of the transaction coordinator librdkafka uses now (None: none known)
        self.coordinator: str | None = None
        self._new_transaction()

    def _new_transaction(self) -> None:
        self.concurrent = self.registered = 0
        #: the coordinator (librdkafka's broker name) each AddPartitionsToTxn was sent to, in order
        self.sent: list[str] = []
        #: AddPartitionsToTxn answers with an error, by librdkafka's text of the error
        self.answers: collections.Counter[str] = collections.Counter()
        self.partitions: list[str] = []
        #: "old -> new: why" of every coordinator change, in order
        self.moves: list[str] = []
        #: a coordinator change (to another node, or through none back to the same one) after an AddPartitionsToTxn
        #: of this transaction was sent: its fate is unknown to the client
        self.moved_after_add = False
        self.lines: collections.deque[str] = collections.deque(maxlen=self.STORY_LINES)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        fac, _, rest = text.partition(" ")
        line = rest.partition("]: ")[2] or rest  # past "[rdkafka#producer-N] [thrd:x]"
        if "Transaction state change" in line and line.rstrip().endswith("-> InTransaction"):
            self._new_transaction()
        elif "Registering partitions with transaction" in line:
            self.sent.append(line.partition(": ")[0])  # e.g. "TxnCoordinator/2"
        elif "AddPartitionsToTxn response: partition" in line or "Failed to add partition" in line:
            self.answers[line.rsplit(": ", 1)[-1]] += 1
            self.concurrent += "concurrent operation" in line
        elif "] registered with transaction" in line:
            self.registered += 1
            self.partitions.append(line.partition(" registered")[0])
        elif line.startswith("Transaction coordinator changed from "):
            self.moves.append(line.removeprefix("Transaction coordinator changed from "))
            self.moved_after_add = self.moved_after_add or bool(self.sent)
            to = line.partition(" -> ")[2].partition(": ")[0]  # e.g. "10.0.0.3:9092/2" or "(none)"
            self.coordinator = _node(to)
        if (fac in self._KEPT or line.startswith("Transaction coordinator changed")) and not line.startswith(
            self._NOISE
        ):
            at = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
            self.lines.append(f"{at} {fac} {line}")
        if record.levelno > logging.DEBUG:
            return True
        return bool(DEBUG)  # the eos lines reach the run's librdkafka log only when asked for

    def story(self) -> str:
        """The current transaction as the producer saw it (see the class docstring), several lines."""
        answers = ", ".join(f"{n} x {text}" for text, n in self.answers.items()) or "none"
        return "\n".join(
            [
                f"AddPartitionsToTxn sent {len(self.sent)} time(s), to {sorted(set(self.sent)) or '-'}; "
                f"answered with errors: {answers}; partitions registered: {self.partitions or 'none'}",
                f"coordinator changes: {'; '.join(self.moves) or 'none'}; the last AddPartitionsToTxn went to "
                f"node {_node(self.sent[-1]) if self.sent else '-'}, the coordinator now is node "
                f"{self.coordinator or '-'}",
                f"its eos lines (the last {self.STORY_LINES}):",
                *(f"  {line}" for line in self.lines),
            ]
        )

    def kafka_too(self, err: KafkaError) -> str:
        """Why Kafka would answer this abort's EndTxn INVALID_TXN_STATE too, or "". Two cases, both with no
        partition of the transaction accepted (no AddPartitionsToTxn answered NONE), so the abort's EndTxn met no
        Ongoing transaction. librdkafka still sends it: it counts each AddPartitionsToTxn it sent as one the
        coordinator may have applied (``txn_req_cnt``, rdkafka_txnmgr.c ``rd_kafka_txn_register_partitions`` and
        ``rd_kafka_txn_handle_AddPartitionsToTxn``; ``rd_kafka_txn_op_abort_transaction`` skips EndTxn only when
        it is 0). Kafka's transaction version 1 ``TransactionCoordinator.handleEndTransaction`` answers an abort
        with no transaction Ongoing (PrepareCommit, CompleteCommit, Empty) INVALID_TXN_STATE, which
        ``rd_kafka_txn_handle_EndTxn`` makes FATAL.

        * Its AddPartitionsToTxn were answered CONCURRENT_TRANSACTIONS (the previous transaction's markers were
          still being written): tests/replication/test_txn_abort_race.py sees Kafka 4.4.0 do it,
          tests/server/test_txn_abort_in_prepare.py holds the sequence on pylog.
        * The coordinator changed after an AddPartitionsToTxn was sent (to another node, or through none back to
          the same node: a node that restarted and was elected again is a new coordinator, and a connection lost
          leaves the request's fate unknown), and none was answered NONE: either the request never reached a
          coordinator (librdkafka issue 4849's race) or its Ongoing record was not replicated when the coordinator
          that answers the EndTxn was elected (from the ISR; Kafka's ``TransactionStateManager`` loads a partition
          from the new leader's log and completes a transition in its cache only once the record is replicated,
          ``appendTransactionToLog``). pylog answers an AddPartitionsToTxn NONE only once its state is replicated
          (tests/replication/test_txn_unreplicated_state.py), so a partition registered means the coordinator has
          the transaction and this case does not apply; a replicated state lost by a failover would also fail the
          replica checkers. Seen in the soak: seed 997525811 (EndTxn at another node) and seed 1458012765 (node 2
          killed with the AddPartitionsToTxn in flight, elected again 36 s later from its own log, in which the
          previous transaction was still PrepareCommit: Kafka answers CONCURRENT_TRANSACTIONS while those markers
          are written and INVALID_TXN_STATE after, pylog the latter at once)."""
        if err.code() != KafkaError.INVALID_TXN_STATE or not err.fatal() or self.registered:
            return ""
        if self.concurrent:
            return (
                f"no partition of this transaction was accepted ({self.concurrent} AddPartitionsToTxn answered "
                "CONCURRENT_TRANSACTIONS), so the abort met no Ongoing transaction"
            )
        added_at = _node(self.sent[-1]) if self.sent else None
        if added_at is not None and self.moved_after_add:
            return (
                f"no partition of this transaction was accepted and the coordinator changed after its "
                f"AddPartitionsToTxn to node {added_at} ({'; '.join(self.moves)}), so the EndTxn at node "
                f"{self.coordinator or '-'} met no Ongoing transaction"
            )
        return ""


def _node(broker: str) -> str | None:
    """The node id in librdkafka's name of a broker (``TxnCoordinator/2``, ``10.0.0.3:9092/2``), None for
    ``(none)``."""
    head, slash, node = broker.rpartition("/")
    return node if slash and head and node.isdigit() else None


class _Workload(threading.Thread):
    name_prefix = "workload"

    def __init__(self, bootstrap: Callable[[], str], topic: str, partitions: int) -> None:
        super().__init__(name=f"nemesis-{self.name_prefix}", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.errors: list[ClientError] = []
        self.crashed: BaseException | None = None
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def _error_cb(self, err: KafkaError) -> None:
        self.errors.append(ClientError.of(self.name_prefix, "error_cb", err))

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the checkers: a workload that died tested nothing after
            self.crashed = exc

    def work(self) -> None:
        raise NotImplementedError


class Idempotent(_Workload):
    name_prefix = "idempotent"

    def __init__(
        self, bootstrap: Callable[[], str], topic: str, partitions: int, rate_per_s: float = 200
    ) -> None:
        super().__init__(bootstrap, topic, partitions)
        self.interval_s = 1 / rate_per_s
        self.acked: dict[int, tuple[int, int]] = {}
        self.sent = 0
        self.undrained = 0

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(ClientError.of(self.name_prefix, f"delivery of {msg.value().decode()}", err))
        else:
            self.acked[int(msg.value())] = (msg.partition(), msg.offset())

    def work(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                **({"debug": DEBUG} if DEBUG else {}),
                "error_cb": self._error_cb,
                "logger": LIBRDKAFKA_LOG,
            }
        )
        while not self._stop_event.is_set():
            try:
                producer.produce(
                    self.topic,
                    value=str(self.sent).encode(),
                    partition=self.sent % self.partitions,
                    on_delivery=self._delivered,
                )
            except BufferError:
                producer.poll(0.1)
                continue
            self.sent += 1
            producer.poll(0)
            time.sleep(self.interval_s)
        self.undrained = producer.flush(DRAIN_S)


class _Fatal(Exception):
    pass


class Transactional(_Workload):
    name_prefix = "transactional"

    def __init__(
        self, bootstrap: Callable[[], str], topic: str, partitions: int, seed: int, transactional_id: str
    ) -> None:
        super().__init__(bootstrap, topic, partitions)
        self.rng = random.Random(seed)
        self.transactional_id = transactional_id
        #: transaction number -> (its records as (partition, value), outcome)
        self.transactions: dict[int, tuple[list[tuple[int, bytes]], str]] = {}
        self.producers = 0
        self.adds = AddsSeen()

    def _producer(self) -> Producer:
        self.adds = AddsSeen()
        logger = LIBRDKAFKA_LOG.getChild(f"{self.transactional_id}.{self.producers}")
        logger.addFilter(self.adds)
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap(),
                "transactional.id": self.transactional_id,
                # eos: what AddsSeen reads (to tell the one fatal error Kafka gives this client too)
                "debug": ",".join(sorted({"eos", *filter(None, DEBUG.split(","))})),
                "transaction.timeout.ms": 30000,
                # under the transaction timeout (librdkafka wants no more) with a margin: a record that times out
                # must leave the transaction abortable, not already aborted and fenced by the coordinator
                "message.timeout.ms": 20000,
                "error_cb": self._error_cb,
                "logger": logger,
            }
        )
        self.producers += 1
        deadline = time.monotonic() + FINISH_S
        while True:
            try:
                producer.init_transactions(10)
                return producer
            except KafkaException as exc:
                err = exc.args[0]
                self.errors.append(ClientError.of(self.name_prefix, "init_transactions", err))
                if err.fatal() or not err.retriable() or time.monotonic() > deadline:
                    raise

    def _finish(self, producer: Producer, commit: bool, txn: int) -> str:
        """Commit or abort, retrying what librdkafka says may be retried; the outcome the client learnt."""
        deadline = time.monotonic() + FINISH_S
        call, outcome = (
            (producer.commit_transaction, "committed") if commit else (producer.abort_transaction, "aborted")
        )
        while True:
            try:
                call(10)
                return outcome
            except KafkaException as exc:
                err = exc.args[0]
                with contextlib.suppress(KafkaException):  # poll raises a fatal error again
                    producer.poll(0)  # librdkafka's log lines of this transaction, for AddsSeen
                kafka_too = "" if commit else self.adds.kafka_too(err)
                seen = self.adds.story() if err.fatal() else ""
                self.errors.append(
                    ClientError.of(
                        self.name_prefix, f"{outcome[:-2]} of transaction {txn}", err, kafka_too, seen
                    )
                )
                if err.fatal():
                    raise _Fatal from exc
                if err.txn_requires_abort() and commit:
                    return self._finish(producer, False, txn)
                if not err.retriable() or time.monotonic() > deadline:
                    return "unknown"

    def _one(self, producer: Producer, txn: int, records: list[tuple[int, bytes]], commit: bool) -> str:
        """Run transaction ``txn``; its outcome as the client learnt it (``unknown`` after a fatal error)."""
        try:
            try:
                producer.begin_transaction()
                for partition, value in records:
                    producer.produce(self.topic, value=value, partition=partition)
                producer.poll(0)
            except KafkaException as exc:  # begin or produce in a failed state
                err = exc.args[0]
                self.errors.append(ClientError.of(self.name_prefix, f"transaction {txn}", err))
                if err.fatal():
                    return "unknown"
                return self._finish(producer, False, txn)
            return self._finish(producer, commit, txn)
        except _Fatal:
            return "unknown"

    def work(self) -> None:
        producer = self._producer()
        txn = 0
        try:
            while not self._stop_event.is_set():
                txn += 1
                count = self.rng.randint(1, 4)
                records = [(self.rng.randrange(self.partitions), f"{txn}:{k}".encode()) for k in range(count)]
                commit = self.rng.random() < 0.7
                self.transactions[txn] = (records, "unknown")
                outcome = self._one(producer, txn, records, commit)
                self.transactions[txn] = (records, outcome)
                if outcome == "unknown":  # a new producer fences the old one and ends what it left open
                    with contextlib.suppress(KafkaException):  # a fatally failed one raises its error again
                        producer.flush(0)
                    producer = self._producer()
        finally:
            with contextlib.suppress(KafkaException):  # a fatally failed producer raises its error again
                producer.flush(5)


class GroupMember(_Workload):
    name_prefix = "group"

    def __init__(self, bootstrap: Callable[[], str], topic: str, partitions: int, group: str) -> None:
        super().__init__(bootstrap, topic, partitions)
        self.group = group
        #: every successful commit in order: (partition, offset)
        self.commits: list[tuple[int, int]] = []
        self.consumed = 0
        self.rebalances: list[str] = []
        self._answered = True  # no commit of this member awaits its answer

    def _committed(self, err: KafkaError | None, parts: list[TopicPartition]) -> None:
        """librdkafka's answer to a commit (served by ``consume``): the offsets the coordinator accepted."""
        self._answered = True
        if err is not None:
            self.errors.append(ClientError.of(self.name_prefix, "commit", err))
            return
        for part in parts:
            if part.error is None and part.offset >= 0:
                self.commits.append((part.partition, part.offset))
            elif part.error is not None:
                self.errors.append(
                    ClientError.of(self.name_prefix, f"commit of {part.partition}", part.error)
                )

    def work(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap(),
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "on_commit": self._committed,
                "error_cb": self._error_cb,
                "logger": LIBRDKAFKA_LOG,
                **({"debug": DEBUG} if DEBUG else {}),
            }
        )

        def note(kind: str) -> Any:
            return lambda _consumer, parts: self.rebalances.append(
                f"{kind} {sorted(p.partition for p in parts)}"
            )

        consumer.subscribe(
            [self.topic], on_assign=note("assign"), on_revoke=note("revoke"), on_lost=note("lost")
        )
        try:
            while not self._stop_event.is_set():
                messages = consumer.consume(200, 0.2)
                consumed = sum(1 for m in messages if m.error() is None)
                self.consumed += consumed
                if consumed and self._answered:
                    # asynchronous (a synchronous commit waits without a bound while the coordinator is away),
                    # one at a time: librdkafka retries a commit cut off by a coordinator change, so a later one
                    # could be answered (and written) first; its answer comes through on_commit, served by consume
                    try:
                        consumer.commit(asynchronous=True)
                        self._answered = False
                    except KafkaException:  # nothing to commit (e.g. just revoked)
                        pass
            consumer.consume(0, 1.0)  # the last commits' answers
        finally:
            consumer.close()
