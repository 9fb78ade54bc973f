"""The API versions pylog advertises to match Apache Kafka 4's (``tests/support/api_parity.py``), each answered as
Kafka answers it, over a real socket to one broker shared by the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    instance = start_broker(tmp_path_factory.mktemp("kafka4-versions"))
    try:
        with RawConnection(instance.bootstrap) as conn:
            created = conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body("v4-topic", 2, 1, {}))
            assert created["Topics"][0]["ErrorCode"] == 0
        yield str(instance.bootstrap)
    finally:
        instance.stop()


@pytest.fixture
def conn(shared: str) -> Iterator[RawConnection]:
    with RawConnection(shared) as c:
        yield c


def test_metadata_v13_answers_the_top_level_error_code(conn: RawConnection) -> None:
    answer: dict[str, Any] = conn.call(ApiKey.METADATA, 13, {"Topics": [{"Name": "v4-topic"}]})
    assert answer["ErrorCode"] == ErrorCode.NONE
    (topic,) = answer["Topics"]
    assert (topic["Name"], topic["ErrorCode"], len(topic["Partitions"])) == ("v4-topic", 0, 2)
    assert answer["ClusterId"] and answer["Brokers"]


def _commit(conn: RawConnection, version: int, group: str, generation: int, member: str = "") -> int:
    body = {
        "GroupId": group,
        "GenerationIdOrMemberEpoch": generation,
        "MemberId": member,
        "GroupInstanceId": None,
        "Topics": [{"Name": "v4-topic", "Partitions": [{"PartitionIndex": 1, "CommittedOffset": 7}]}],
    }
    code: int = conn.call(ApiKey.OFFSET_COMMIT, version, body)["Topics"][0]["Partitions"][0]["ErrorCode"]
    return code


def test_offset_commit_v9_a_generation_of_an_unknown_group_is_group_id_not_found(conn: RawConnection) -> None:
    # Kafka's OffsetMetadataManager: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
    assert _commit(conn, 9, "no-such-group", 3, "m") == ErrorCode.GROUP_ID_NOT_FOUND
    assert _commit(conn, 8, "no-such-group", 3, "m") == ErrorCode.ILLEGAL_GENERATION
    assert _commit(conn, 9, "simple-v9", -1) == ErrorCode.NONE  # a simple commit creates the group


def test_offset_fetch_v9_reads_a_classic_group_whatever_its_member_fields(conn: RawConnection) -> None:
    assert _commit(conn, 9, "fetch-v9", -1) == ErrorCode.NONE
    group = {"GroupId": "fetch-v9", "MemberId": "someone", "MemberEpoch": 5, "Topics": None}
    answer = conn.call(ApiKey.OFFSET_FETCH, 9, {"Groups": [group], "RequireStable": False})
    (got,) = answer["Groups"]
    assert got["ErrorCode"] == ErrorCode.NONE
    assert [
        (t["Name"], p["PartitionIndex"], p["CommittedOffset"]) for t in got["Topics"] for p in t["Partitions"]
    ] == [("v4-topic", 1, 7)]


def test_describe_log_dirs_v5_no_directory_is_cordoned(conn: RawConnection) -> None:
    answer = conn.call(ApiKey.DESCRIBE_LOG_DIRS, 5, {"Topics": None})
    (result,) = answer["Results"]
    assert (answer["ErrorCode"], result["ErrorCode"], result["IsCordoned"]) == (0, 0, False)
    assert result["TotalBytes"] > 0 and {t["Name"] for t in result["Topics"]} >= {"v4-topic"}


def test_delete_groups_v3_answers_each_group_with_a_null_message(conn: RawConnection) -> None:
    assert _commit(conn, 9, "to-delete", -1) == ErrorCode.NONE
    answer = conn.call(ApiKey.DELETE_GROUPS, 3, {"GroupsNames": ["to-delete", "never-was"]})
    assert [(r["GroupId"], r["ErrorCode"], r["ErrorMessage"]) for r in answer["Results"]] == [
        ("to-delete", ErrorCode.NONE, None),
        ("never-was", ErrorCode.GROUP_ID_NOT_FOUND, None),
    ]


def test_transactional_offsets_at_the_versions_that_allow_transaction_abortable(conn: RawConnection) -> None:
    # FindCoordinator v5, InitProducerId v5, AddOffsetsToTxn v4, TxnOffsetCommit v4: the same bodies as one
    # version before (they only let a broker answer TRANSACTION_ABORTABLE, KIP-890)
    found = conn.call(ApiKey.FIND_COORDINATOR, 5, {"KeyType": 1, "CoordinatorKeys": ["txn-v4"]})
    assert [c["ErrorCode"] for c in found["Coordinators"]] == [0]
    init = conn.call(
        ApiKey.INIT_PRODUCER_ID,
        5,
        {"TransactionalId": "txn-v4", "TransactionTimeoutMs": 30000, "ProducerId": -1, "ProducerEpoch": -1},
    )
    assert init["ErrorCode"] == 0
    producer = {
        "TransactionalId": "txn-v4",
        "ProducerId": init["ProducerId"],
        "ProducerEpoch": init["ProducerEpoch"],
    }
    assert conn.call(ApiKey.ADD_OFFSETS_TO_TXN, 4, {**producer, "GroupId": "txn-group"})["ErrorCode"] == 0
    committed = conn.call(
        ApiKey.TXN_OFFSET_COMMIT,
        4,
        {
            **producer,
            "GroupId": "txn-group",
            "GenerationId": -1,
            "MemberId": "",
            "GroupInstanceId": None,
            "Topics": [{"Name": "v4-topic", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 11}]}],
        },
    )
    assert [p["ErrorCode"] for t in committed["Topics"] for p in t["Partitions"]] == [0]
    assert conn.call(ApiKey.END_TXN, 4, {**producer, "Committed": True})["ErrorCode"] == 0
    group = {"GroupId": "txn-group", "Topics": [{"Name": "v4-topic", "PartitionIndexes": [0]}]}
    answer = conn.call(ApiKey.OFFSET_FETCH, 9, {"Groups": [group], "RequireStable": True})
    partition = answer["Groups"][0]["Topics"][0]["Partitions"][0]
    assert (partition["ErrorCode"], partition["CommittedOffset"]) == (0, 11)
