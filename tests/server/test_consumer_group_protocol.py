"""The consumer group protocol (KIP-848) over real sockets, requests built by the project's codec: ApiVersions
advertises ConsumerGroupHeartbeat and ConsumerGroupDescribe at Kafka 4.4's versions; a member joins, is described
(ConsumerGroupDescribe, ListGroups' type, DescribeGroups' "not a classic group"), is refused an invalid regex
and an unknown assignor, and leaves; a regex subscription picks up a topic created after it. The reconciliation rules themselves are driven on a manual clock in
tests/coordinator/test_consumer_groups.py."""

from __future__ import annotations

from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body

pytestmark = pytest.mark.timeout(60)

HB_V = 1


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {
        "group.consumer.heartbeat.interval.ms": "200",
        "group.consumer.session.timeout.ms": "15000",
        "pylog.group.consumer.regex.refresh.min.interval.ms": "0",
    }


def _join(conn: RawConnection, group: str, member: str, **kw: Any) -> dict[str, Any]:
    body = {
        "GroupId": group,
        "MemberId": member,
        "MemberEpoch": 0,
        "RebalanceTimeoutMs": 5000,
        "SubscribedTopicNames": ["t"],
        "TopicPartitions": [],
        **kw,
    }
    return conn.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, HB_V, body)


def test_a_member_joins_is_described_and_leaves(bootstrap: str, broker: Any) -> None:
    with RawConnection(bootstrap) as conn:
        conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("t", 3))
        versions = conn.call(
            ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
        )
        advertised = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in versions["ApiKeys"]}
        assert advertised[68] == advertised[69] == (0, 1)

        joined = _join(conn, "g", "m1")
        assert (joined["ErrorCode"], joined["MemberId"], joined["MemberEpoch"]) == (ErrorCode.NONE, "m1", 1)
        assert joined["HeartbeatIntervalMs"] == 200
        # every partition, named by the topic's id (KIP-516)
        topic_id = broker.ctx.cluster.view.topics["t"].topic_id
        assert topic_id is not None
        assert joined["Assignment"]["TopicPartitions"] == [{"TopicId": topic_id, "Partitions": [0, 1, 2]}]

        described = conn.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            {"GroupIds": ["g", "nope"], "IncludeAuthorizedOperations": False},
        )["Groups"]
        assert [g["ErrorCode"] for g in described] == [ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND]
        g = described[0]
        assert (g["GroupState"], g["GroupEpoch"], g["AssignmentEpoch"], g["AssignorName"]) == (
            "Stable",
            1,
            1,
            "uniform",
        )
        [m] = g["Members"]
        assert (m["MemberId"], m["MemberEpoch"], m["SubscribedTopicNames"], m["MemberType"]) == (
            "m1",
            1,
            ["t"],
            1,
        )
        assert m["ClientHost"].startswith("/127.0.0.1")

        listed = conn.call(ApiKey.LIST_GROUPS, 5, {"StatesFilter": [], "TypesFilter": ["consumer"]})["Groups"]
        assert [(x["GroupId"], x["GroupType"], x["GroupState"]) for x in listed] == [
            ("g", "consumer", "Stable")
        ]
        classic = conn.call(
            ApiKey.DESCRIBE_GROUPS, 5, {"Groups": ["g"], "IncludeAuthorizedOperations": False}
        )
        assert classic["Groups"][0]["GroupState"] == "Dead"

        regex = _join(conn, "g", "m2", SubscribedTopicRegex="(t", SubscribedTopicNames=None)
        assert (
            regex["ErrorCode"] == ErrorCode.INVALID_REGULAR_EXPRESSION
            and "SubscribedTopicRegex `(t`" in regex["ErrorMessage"]
        )
        assert _join(conn, "g", "m2", ServerAssignor="sticky")["ErrorCode"] == ErrorCode.UNSUPPORTED_ASSIGNOR
        stale = conn.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, HB_V, {"GroupId": "g", "MemberId": "m1", "MemberEpoch": 7}
        )
        assert stale["ErrorCode"] == ErrorCode.FENCED_MEMBER_EPOCH

        left = conn.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, HB_V, {"GroupId": "g", "MemberId": "m1", "MemberEpoch": -1}
        )
        assert (left["ErrorCode"], left["MemberEpoch"]) == (ErrorCode.NONE, -1)
        after = conn.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"GroupIds": ["g"], "IncludeAuthorizedOperations": False}
        )
        assert (after["Groups"][0]["GroupState"], after["Groups"][0]["Members"]) == ("Empty", [])


def test_a_regex_subscription_picks_up_a_topic_created_after_it(bootstrap: str, broker: Any) -> None:
    with RawConnection(bootstrap) as conn:
        conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("rx-a", 2))
        conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("other", 1))
        joined = _join(conn, "rg", "m1", SubscribedTopicNames=None, SubscribedTopicRegex="rx-.*")
        topics = broker.ctx.cluster.view.topics
        assert joined["ErrorCode"] == ErrorCode.NONE, joined
        assert joined["Assignment"]["TopicPartitions"] == [
            {"TopicId": topics["rx-a"].topic_id, "Partitions": [0, 1]}
        ]
        conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("rx-b", 1))
        hb = conn.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            HB_V,
            {
                "GroupId": "rg",
                "MemberId": "m1",
                "MemberEpoch": joined["MemberEpoch"],
                "TopicPartitions": None,
            },
        )
        assert hb["ErrorCode"] == ErrorCode.NONE and hb["MemberEpoch"] == joined["MemberEpoch"] + 1
        got = {(t["TopicId"], tuple(t["Partitions"])) for t in hb["Assignment"]["TopicPartitions"]}
        topics = broker.ctx.cluster.view.topics
        assert got == {(topics["rx-a"].topic_id, (0, 1)), (topics["rx-b"].topic_id, (0,))}
        [m] = conn.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"GroupIds": ["rg"], "IncludeAuthorizedOperations": False}
        )["Groups"][0]["Members"]
        assert (m["SubscribedTopicRegex"], m["SubscribedTopicNames"]) == ("rx-.*", [])
