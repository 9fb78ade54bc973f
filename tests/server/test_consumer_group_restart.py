"""A consumer group (KIP-848) survives a restart of the broker, over real sockets with the project's codec:
ConsumerGroupDescribe answers the same before and after, the member goes on heartbeating at its epoch, and
OffsetFetch v9 checks its member id and epoch as Kafka does. The record-level cases (mid-revocation, fencing after the restart, tombstones, unknown
record types) run on a manual clock in tests/coordinator/test_consumer_group_persistence.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)

OVERRIDES = {
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.session.timeout.ms": "30000",
    "offsets.topic.num.partitions": "1",
}


def _describe(conn: RawConnection) -> dict[str, Any]:
    body = {"GroupIds": ["g"], "IncludeAuthorizedOperations": False}
    return dict(conn.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)["Groups"][0])


def test_a_restart_keeps_the_consumer_group(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, OVERRIDES)
    try:
        with RawConnection(broker.bootstrap) as conn:
            conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("t", 3))
            joined = conn.call(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                1,
                {
                    "GroupId": "g",
                    "MemberId": "m1",
                    "MemberEpoch": 0,
                    "RebalanceTimeoutMs": 5000,
                    "SubscribedTopicNames": ["t"],
                    "ServerAssignor": "range",
                    "TopicPartitions": [],
                },
            )
            assert joined["ErrorCode"] == ErrorCode.NONE
            owned = joined["Assignment"]["TopicPartitions"]
            beat = {
                "GroupId": "g",
                "MemberId": "m1",
                "MemberEpoch": joined["MemberEpoch"],
                "TopicPartitions": owned,
            }
            assert conn.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, beat)["ErrorCode"] == ErrorCode.NONE
            before = _describe(conn)
            assert before["ErrorCode"] == ErrorCode.NONE and before["GroupEpoch"] == 1
    finally:
        broker.stop()

    broker = start_broker(tmp_path, OVERRIDES)
    try:
        with RawConnection(broker.bootstrap) as conn:
            after = _describe(conn)
            assert after == before
            again = conn.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, beat)
            assert (again["ErrorCode"], again["MemberEpoch"]) == (ErrorCode.NONE, joined["MemberEpoch"])
            assert _describe(conn) == before

            def fetch(member_id: str | None, epoch: int) -> Any:
                group = {"GroupId": "g", "MemberId": member_id, "MemberEpoch": epoch, "Topics": None}
                body = {"Groups": [group], "RequireStable": False}
                return conn.call(ApiKey.OFFSET_FETCH, 9, body)["Groups"][0]["ErrorCode"]

            epoch = joined["MemberEpoch"]
            assert fetch("m1", epoch) == ErrorCode.NONE
            assert fetch(None, -1) == ErrorCode.NONE  # an admin client
            assert fetch("m1", epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
            assert fetch("nobody", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        broker.stop()
