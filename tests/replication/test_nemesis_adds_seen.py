"""What the nemesis's transactional workload reads from librdkafka's ``eos`` lines
(:class:`~tests.support.nemesis.workload.AddsSeen`): which fatal INVALID_TXN_STATE of an abort it names an error
Kafka gives the client too, and the story a failure report prints. The lines are librdkafka 2.16's, as its logger
callback delivers them (recorded from a nemesis run with ``PYLOG_NEMESIS_DEBUG=eos``)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError

from tests.support.nemesis.workload import AddsSeen

_PREFIX = "[rdkafka#producer-2] [thrd:main]: "
#: An abort of a transaction whose AddPartitionsToTxn was in flight at coordinator node 2 when node 2 was fenced:
#: the EndTxn goes to node 0, which was elected before the Ongoing record reached it (seed 997525811's sequence).
MOVED = [
    ("TXNSTATE", "Transaction state change Ready -> InTransaction"),
    ("ADDPARTS", "Marked soak-0-transactional [1] as part of transaction: scheduling registration"),
    ("ADDPARTS", "TxnCoordinator/2: Registering partitions with transaction"),
    ("TXNSTATE", "Transaction state change InTransaction -> BeginAbort"),
    (
        "TXNCOORD",
        "Transaction coordinator changed from 10.110.38.3:9092/2 -> (none): EndTxn failed: Local: Broker transport failure",
    ),
    (
        "TXNCOORD",
        "Transaction coordinator changed from (none) -> 10.110.38.1:9092/0: FindCoordinator response",
    ),
    ("TXNSTATE", "Transaction state change BeginAbort -> AbortingTransaction"),
    ("ENDTXN", "EndTxn returned INVALID_TXN_STATE in state AbortingTransaction (may_retry=true)"),
]


def _seen(lines: list[tuple[str, str]]) -> AddsSeen:
    adds = AddsSeen()
    for fac, text in lines:
        record = logging.LogRecord(
            "librdkafka", logging.DEBUG, __file__, 0, f"{fac} {_PREFIX}{text}", None, None
        )
        adds.filter(record)
    return adds


def _fatal_invalid_txn_state() -> KafkaError:
    return KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)


def test_an_abort_whose_end_txn_went_to_a_new_coordinator_with_nothing_registered_is_named_as_kafka_would() -> (
    None
):
    adds = _seen(MOVED)
    why = adds.kafka_too(_fatal_invalid_txn_state())
    assert "coordinator changed after its AddPartitionsToTxn to node 2" in why and "at node 0" in why, why
    story = adds.story()
    assert "AddPartitionsToTxn sent 1 time(s), to ['TxnCoordinator/2']" in story, story
    assert "partitions registered: none" in story and "-> 10.110.38.1:9092/0" in story, story
    assert "the last AddPartitionsToTxn went to node 2, the coordinator now is node 0" in story, story


def test_a_registered_partition_or_an_unchanged_coordinator_is_not_named_as_kafka_would() -> None:
    registered = _seen(
        [*MOVED[:3], ("ADDPARTS", "soak-0-transactional [1] registered with transaction"), *MOVED[3:]]
    )
    assert registered.kafka_too(_fatal_invalid_txn_state()) == ""  # the new coordinator has the transaction
    back = _seen(
        [
            *MOVED[:5],
            ("TXNCOORD", "Transaction coordinator changed from (none) -> 10.110.38.3:9092/2: x"),
            *MOVED[6:],
        ]
    )
    # the same node again after it was lost (seed 1458012765: killed with the AddPartitionsToTxn in flight, elected
    # again from its own log): a new coordinator too
    assert "at node 2" in back.kafka_too(_fatal_invalid_txn_state())
    stayed = _seen(
        [*MOVED[:4], *MOVED[6:]]
    )  # no coordinator change: the EndTxn met the one that had the request
    assert stayed.kafka_too(_fatal_invalid_txn_state()) == ""
    early = _seen([MOVED[0], *MOVED[4:6], *MOVED[1:4], *MOVED[6:]])  # a change before the request was sent
    assert early.kafka_too(_fatal_invalid_txn_state()) == ""
    moved = _seen(MOVED)
    assert moved.kafka_too(KafkaError(KafkaError.INVALID_TXN_STATE, "not fatal")) == ""
