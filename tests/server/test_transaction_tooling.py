"""DescribeTransactions (65) and ListTransactions (66) against a real broker process: transactions driven by
confluent-kafka's transactional producer, the tooling requests sent as raw requests and read back through
kafka-python's independent message classes (confluent-kafka's AdminClient here has no transaction calls)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import (
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)

from broker_runtime.errors import ErrorCode
from broker_runtime.launch.process import broker_process
from broker_runtime.protocol.messages import ApiKey, decode_request, encode_request
from tests.server.rawclient import RawConnection
from tests.support.transactions import transactional_producer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with broker_process(Path(tmp_path_factory.mktemp("txn-tooling"))) as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics(
            [NewTopic("tooling", num_partitions=3, replication_factor=1)]
        ).values():
            future.result(30)
        yield bootstrap


def _call_kp(bootstrap: str, api_key: int, version: int, body: dict[str, Any], kp_response: Any) -> Any:
    """Send ``body``; decode the answer with kafka-python's class (not pylog's codec)."""
    with RawConnection(bootstrap, timeout_s=30) as conn:
        conn.send_raw(encode_request(api_key, version, 1, "tooling-test", body))
        frame = conn.read_frame()
    return kp_response.decode(frame, version=version, header=True)


def _describe(bootstrap: str, *ids: str) -> dict[str, Any]:
    answer = _call_kp(
        bootstrap,
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        {"TransactionalIds": list(ids)},
        DescribeTransactionsResponse,
    )
    return {s.transactional_id: s for s in answer.transaction_states}


def _list(bootstrap: str, version: int = 1, **filters: Any) -> tuple[Any, dict[str, tuple[int, str]]]:
    body = {"StateFilters": [], "ProducerIdFilters": [], "DurationFilter": -1}
    body.update(filters)
    answer = _call_kp(bootstrap, ApiKey.LIST_TRANSACTIONS, version, body, ListTransactionsResponse)
    return answer, {
        s.transactional_id: (s.producer_id, s.transaction_state) for s in answer.transaction_states
    }


def test_describe_and_list_follow_the_state_of_each_transaction(broker: str) -> None:
    committed = transactional_producer(broker, "tool-committed")
    committed.begin_transaction()
    committed.produce("tooling", b"c", partition=0)
    committed.commit_transaction(30)

    ongoing = transactional_producer(broker, "tool-ongoing")
    before_ms = int(time.time() * 1000)
    ongoing.begin_transaction()
    ongoing.produce("tooling", b"o1", partition=1)
    ongoing.produce("tooling", b"o2", partition=2)
    ongoing.flush(30)  # the partitions are added before the first batch is sent

    aborted = transactional_producer(broker, "tool-aborted")
    aborted.begin_transaction()
    aborted.produce("tooling", b"a", partition=0)
    aborted.flush(30)
    aborted.abort_transaction(30)
    transactional_producer(broker, "tool-empty")

    states = _describe(broker, "tool-committed", "tool-ongoing", "tool-aborted", "tool-empty", "tool-unknown")
    assert states["tool-committed"].error_code == ErrorCode.NONE
    assert states["tool-committed"].transaction_state == "CompleteCommit"
    assert states["tool-committed"].topics == []
    o = states["tool-ongoing"]
    assert (o.error_code, o.transaction_state, o.transaction_timeout_ms) == (0, "Ongoing", 60000)
    assert [(t.topic, sorted(t.partitions)) for t in o.topics] == [("tooling", [1, 2])]
    assert before_ms - 5000 <= o.transaction_start_time_ms <= int(time.time() * 1000)
    assert o.producer_id >= 0 and o.producer_epoch >= 0
    assert states["tool-aborted"].transaction_state == "CompleteAbort"
    assert states["tool-empty"].transaction_state == "Empty"
    assert states["tool-empty"].transaction_start_time_ms == -1
    assert states["tool-unknown"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    answer, everything = _list(broker)
    assert answer.error_code == 0 and answer.unknown_state_filters == []
    assert {k: v[1] for k, v in everything.items() if k.startswith("tool-")} == {
        "tool-committed": "CompleteCommit",
        "tool-ongoing": "Ongoing",
        "tool-aborted": "CompleteAbort",
        "tool-empty": "Empty",
    }
    assert everything["tool-ongoing"][0] == o.producer_id

    _, only_open = _list(broker, StateFilters=["Ongoing", "PrepareCommit"])
    assert set(only_open) == {"tool-ongoing"}
    _, by_pid = _list(broker, ProducerIdFilters=[o.producer_id])
    assert set(by_pid) == {"tool-ongoing"}
    _, both = _list(broker, StateFilters=["CompleteAbort"], ProducerIdFilters=[o.producer_id])
    assert both == {}
    answer, mixed = _list(broker, StateFilters=["Ongoing", "Bogus"])
    assert answer.unknown_state_filters == ["Bogus"] and set(mixed) == {"tool-ongoing"}
    answer, none = _list(broker, StateFilters=["Bogus"])
    assert answer.unknown_state_filters == ["Bogus"] and none == {}, "only unknown states match nothing"
    _, long_running = _list(broker, DurationFilter=3_600_000)
    assert long_running == {}
    _, running = _list(broker, DurationFilter=0)
    assert set(running) >= {"tool-ongoing"} and "tool-empty" not in running
    _, v0 = _list(broker, version=0)
    assert set(v0) >= {"tool-committed", "tool-ongoing", "tool-aborted", "tool-empty"}

    ongoing.commit_transaction(30)
    assert _describe(broker, "tool-ongoing")["tool-ongoing"].transaction_state == "CompleteCommit"


def test_the_tooling_apis_are_advertised(broker: str) -> None:
    with RawConnection(broker) as conn:
        versions = conn.call(
            ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
        )
    ranges = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in versions["ApiKeys"]}
    assert ranges[ApiKey.DESCRIBE_TRANSACTIONS] == (0, 0)
    assert ranges[ApiKey.LIST_TRANSACTIONS] == (0, 1)
    # our encoding of the request is what kafka-python would send, field for field
    header, body = decode_request(
        encode_request(
            ApiKey.LIST_TRANSACTIONS, 1, 3, "x", {"StateFilters": ["Ongoing"], "ProducerIdFilters": [7]}
        )[4:]
    )
    assert body == {"StateFilters": ["Ongoing"], "ProducerIdFilters": [7], "DurationFilter": -1}
