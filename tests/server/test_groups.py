"""The group coordinator's protocol rules over real sockets (requests built by the project's codec, answers
checked field by field): the JoinGroup v4+ member-id handshake, generations and the fencing of stale members,
protocol selection, static membership (KIP-345), simple commits, OffsetFetch answers, bad session timeouts.
Real clients in groups are in tests/interop/test_groups.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from broker_runtime.coordinator.group import GroupState
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body

pytestmark = pytest.mark.timeout(60)

JOIN_V = 7
SYNC_V = 5


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}


def _join_body(
    group: str, member_id: str = "", protocols: tuple[str, ...] = ("range",), instance: str | None = None
) -> dict[str, Any]:
    return {
        "GroupId": group,
        "SessionTimeoutMs": 10_000,
        "RebalanceTimeoutMs": 5_000,
        "MemberId": member_id,
        "GroupInstanceId": instance,
        "ProtocolType": "consumer",
        "Protocols": [{"Name": p, "Metadata": p.encode()} for p in protocols],
    }


def _join(conn: RawConnection, group: str, **kw: Any) -> dict[str, Any]:
    """Join (answering MEMBER_ID_REQUIRED) and wait for the join phase to complete."""
    answer = conn.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body(group, **kw))
    if answer["ErrorCode"] == ErrorCode.MEMBER_ID_REQUIRED:
        kw["member_id"] = answer["MemberId"]
        answer = conn.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body(group, **kw))
    return answer


def _sync(
    conn: RawConnection, group: str, join: dict[str, Any], assignments: dict[str, bytes]
) -> dict[str, Any]:
    return conn.call(
        ApiKey.SYNC_GROUP,
        SYNC_V,
        {
            "GroupId": group,
            "GenerationId": join["GenerationId"],
            "MemberId": join["MemberId"],
            "Assignments": [{"MemberId": m, "Assignment": a} for m, a in assignments.items()],
        },
    )


def _commit(conn: RawConnection, group: str, generation: int, member: str, offset: int, **kw: Any) -> int:
    answer = conn.call(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "GroupId": group,
            "GenerationIdOrMemberEpoch": generation,
            "MemberId": member,
            "GroupInstanceId": kw.get("instance"),
            "Topics": [
                {
                    "Name": kw.get("topic", "t"),
                    "Partitions": [
                        {"PartitionIndex": 0, "CommittedOffset": offset, "CommittedMetadata": "m"}
                    ],
                }
            ],
        },
    )
    return int(answer["Topics"][0]["Partitions"][0]["ErrorCode"])


def _heartbeat(
    conn: RawConnection, group: str, generation: int, member: str, instance: str | None = None
) -> int:
    return int(
        conn.call(
            ApiKey.HEARTBEAT,
            4,
            {"GroupId": group, "GenerationId": generation, "MemberId": member, "GroupInstanceId": instance},
        )["ErrorCode"]
    )


def _wait_rebalancing(broker: Any, group: str) -> None:
    """Until the coordinator has seen the join sent on another connection (requests of two connections race)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = broker.ctx.group_coordinator.group(group)
        if found is not None and found.state == GroupState.PREPARING_REBALANCE:
            return
        time.sleep(0.01)
    raise AssertionError(f"group {group} did not start a rebalance")


@pytest.fixture
def topic(bootstrap: str) -> str:
    with RawConnection(bootstrap) as conn:
        conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("t", 2))
    return "t"


def test_find_coordinator_answers_this_broker_for_groups(bootstrap: str, broker: Any) -> None:
    with RawConnection(bootstrap) as conn:
        answer = conn.call(ApiKey.FIND_COORDINATOR, 4, {"KeyType": 0, "CoordinatorKeys": ["a", "b"]})
    assert [(c["Key"], c["ErrorCode"], c["Port"]) for c in answer["Coordinators"]] == [
        ("a", 0, broker.ctx.advertised_port),
        ("b", 0, broker.ctx.advertised_port),
    ]


def test_member_id_required_then_generation_and_stale_member_fenced(
    bootstrap: str, broker: Any, topic: str
) -> None:
    with RawConnection(bootstrap) as a, RawConnection(bootstrap) as b:
        first = a.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body("g"))
        assert first["ErrorCode"] == ErrorCode.MEMBER_ID_REQUIRED and first["MemberId"]
        ja = _join(a, "g")
        assert ja["ErrorCode"] == 0 and ja["GenerationId"] == 1 and ja["Leader"] == ja["MemberId"]
        assert [m["MemberId"] for m in ja["Members"]] == [ja["MemberId"]]
        assert _sync(a, "g", ja, {ja["MemberId"]: b"all"})["Assignment"] == b"all"
        assert _commit(a, "g", 1, ja["MemberId"], 5) == ErrorCode.NONE
        # b joins: a learns of the rebalance by its heartbeat and rejoins; generation 2
        b.send_raw(b.encode(ApiKey.JOIN_GROUP, JOIN_V, _join_body("g", member_id="")))
        _, required = b.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        b.send_raw(b.encode(ApiKey.JOIN_GROUP, JOIN_V, _join_body("g", member_id=required["MemberId"])))
        _wait_rebalancing(broker, "g")
        assert _heartbeat(a, "g", 1, ja["MemberId"]) == ErrorCode.REBALANCE_IN_PROGRESS
        ja2 = a.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body("g", member_id=ja["MemberId"]))
        _, jb = b.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        assert ja2["GenerationId"] == jb["GenerationId"] == 2
        assert ja2["Leader"] == ja["MemberId"] and len(ja2["Members"]) == 2 and jb["Members"] == []
        # a commit or heartbeat of generation 1 is fenced; an unknown member too
        assert _commit(a, "g", 1, ja["MemberId"], 9) == ErrorCode.ILLEGAL_GENERATION
        assert _heartbeat(a, "g", 1, ja["MemberId"]) == ErrorCode.ILLEGAL_GENERATION
        assert _commit(a, "g", 2, "nobody", 9) == ErrorCode.UNKNOWN_MEMBER_ID
        # during CompletingRebalance a commit is refused; after the leader's sync it is accepted
        assert _commit(b, "g", 2, jb["MemberId"], 9) == ErrorCode.REBALANCE_IN_PROGRESS
        b.send_raw(
            b.encode(
                ApiKey.SYNC_GROUP, SYNC_V, {"GroupId": "g", "GenerationId": 2, "MemberId": jb["MemberId"]}
            )
        )
        assigned = {ja["MemberId"]: b"p0", jb["MemberId"]: b"p1"}
        assert _sync(a, "g", ja2, assigned)["Assignment"] == b"p0"
        _, sb = b.read_response(ApiKey.SYNC_GROUP, SYNC_V)
        assert sb["ErrorCode"] == 0 and sb["Assignment"] == b"p1"
        assert _commit(b, "g", 2, jb["MemberId"], 9) == ErrorCode.NONE
        # a simple commit (no generation) into a group with members is refused
        assert _commit(a, "g", -1, "", 11) == ErrorCode.ILLEGAL_GENERATION
        fetched = a.call(ApiKey.OFFSET_FETCH, 7, {"GroupId": "g", "Topics": None})
        assert fetched["ErrorCode"] == 0
        assert [
            (t["Name"], [(p["PartitionIndex"], p["CommittedOffset"]) for p in t["Partitions"]])
            for t in fetched["Topics"]
        ] == [("t", [(0, 9)])]


def test_protocol_selection_and_inconsistent_protocols(bootstrap: str, broker: Any) -> None:
    with RawConnection(bootstrap) as a, RawConnection(bootstrap) as b, RawConnection(bootstrap) as c:
        ja = _join(a, "sel", protocols=("roundrobin", "range"))
        assert ja["ProtocolName"] == "roundrobin"
        b.send_raw(b.encode(ApiKey.JOIN_GROUP, 4, _join_body("sel", "", ("range", "roundrobin"))))
        _, required = b.read_response(ApiKey.JOIN_GROUP, 4)
        assert required["ErrorCode"] == ErrorCode.MEMBER_ID_REQUIRED
        b.send_raw(b.encode(ApiKey.JOIN_GROUP, 4, _join_body("sel", required["MemberId"], ("range",))))
        _wait_rebalancing(broker, "sel")
        a.send_raw(
            a.encode(ApiKey.JOIN_GROUP, JOIN_V, _join_body("sel", ja["MemberId"], ("roundrobin", "range")))
        )
        _, ja2 = a.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        _, jb = b.read_response(ApiKey.JOIN_GROUP, 4)
        assert ja2["ProtocolName"] == jb["ProtocolName"] == "range"  # the only protocol both support
        bad = c.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body("sel", "", ("sticky",)))
        assert bad["ErrorCode"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        too_short = _join_body("sel")
        too_short["SessionTimeoutMs"] = 100
        assert c.call(ApiKey.JOIN_GROUP, JOIN_V, too_short)["ErrorCode"] == ErrorCode.INVALID_SESSION_TIMEOUT


def test_static_member_rejoins_without_rebalance_and_fences_its_old_id(bootstrap: str, topic: str) -> None:
    with RawConnection(bootstrap) as a, RawConnection(bootstrap) as a2:
        ja = _join(a, "static", instance="host-1")
        assert ja["ErrorCode"] == 0 and ja["GenerationId"] == 1  # no MEMBER_ID_REQUIRED for static members
        _sync(a, "static", ja, {ja["MemberId"]: b"mine"})
        # a second static member makes host-1 a follower: join both (the leader stays host-1)
        # the same instance restarts with no member id: it gets a new id, the same generation and assignment
        again = a2.call(ApiKey.JOIN_GROUP, JOIN_V, _join_body("static", instance="host-1"))
        assert again["ErrorCode"] == 0 and again["MemberId"] != ja["MemberId"]
        assert again["GenerationId"] in (1, 2)
        # the old member id of host-1 is fenced
        assert (
            _heartbeat(a, "static", again["GenerationId"], ja["MemberId"], "host-1")
            == ErrorCode.FENCED_INSTANCE_ID
        )
        assert _commit(a, "static", again["GenerationId"], ja["MemberId"], 3, instance="host-1") == (
            ErrorCode.FENCED_INSTANCE_ID
        )
        leave = a2.call(
            ApiKey.LEAVE_GROUP,
            4,
            {"GroupId": "static", "Members": [{"MemberId": "", "GroupInstanceId": "host-1"}]},
        )
        assert leave["ErrorCode"] == 0 and [m["ErrorCode"] for m in leave["Members"]] == [0]
        assert (
            _heartbeat(a2, "static", again["GenerationId"], again["MemberId"]) == ErrorCode.UNKNOWN_MEMBER_ID
        )


def test_simple_commit_and_offset_fetch_of_several_groups(bootstrap: str, topic: str) -> None:
    with RawConnection(bootstrap) as conn:
        assert _commit(conn, "assign-only", -1, "", 42) == ErrorCode.NONE
        assert (
            _commit(conn, "assign-only", -1, "", 1, topic="missing") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        answer = conn.call(
            ApiKey.OFFSET_FETCH,
            8,
            {
                "Groups": [
                    {"GroupId": "assign-only", "Topics": [{"Name": "t", "PartitionIndexes": [0, 1]}]},
                    {"GroupId": "never-seen", "Topics": None},
                ]
            },
        )
        first, second = answer["Groups"]
        assert [
            (p["PartitionIndex"], p["CommittedOffset"], p["Metadata"])
            for p in first["Topics"][0]["Partitions"]
        ] == [
            (0, 42, "m"),
            (1, -1, ""),
        ]
        assert second == {"GroupId": "never-seen", "Topics": [], "ErrorCode": 0}


def test_member_that_does_not_rejoin_is_removed_after_the_rebalance_timeout(
    bootstrap: str, broker: Any
) -> None:
    def body(member_id: str) -> dict[str, Any]:
        b = _join_body("slow", member_id)
        b["SessionTimeoutMs"], b["RebalanceTimeoutMs"] = 30_000, 1_000  # the session outlives the test
        return b

    with RawConnection(bootstrap) as a, RawConnection(bootstrap) as b, RawConnection(bootstrap) as c:
        ja = a.call(ApiKey.JOIN_GROUP, JOIN_V, body(a.call(ApiKey.JOIN_GROUP, JOIN_V, body(""))["MemberId"]))
        b.send_raw(
            b.encode(ApiKey.JOIN_GROUP, JOIN_V, body(b.call(ApiKey.JOIN_GROUP, JOIN_V, body(""))["MemberId"]))
        )
        _wait_rebalancing(broker, "slow")
        a.send_raw(a.encode(ApiKey.JOIN_GROUP, JOIN_V, body(ja["MemberId"])))
        _, ja2 = a.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        _, jb = b.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        assert ja2["GenerationId"] == jb["GenerationId"] == 2
        # c joins; a rejoins, b (still heartbeating) never does: after b's rebalance timeout, a and c alone
        c.send_raw(
            c.encode(ApiKey.JOIN_GROUP, JOIN_V, body(c.call(ApiKey.JOIN_GROUP, JOIN_V, body(""))["MemberId"]))
        )
        _wait_rebalancing(broker, "slow")
        started = time.monotonic()
        a.send_raw(a.encode(ApiKey.JOIN_GROUP, JOIN_V, body(ja["MemberId"])))
        assert _heartbeat(b, "slow", 2, jb["MemberId"]) == ErrorCode.REBALANCE_IN_PROGRESS
        _, ja3 = a.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        _, jc = c.read_response(ApiKey.JOIN_GROUP, JOIN_V)
        waited = time.monotonic() - started
        assert ja3["GenerationId"] == jc["GenerationId"] == 3
        assert sorted(m["MemberId"] for m in ja3["Members"]) == sorted([ja["MemberId"], jc["MemberId"]])
        assert 0.8 <= waited <= 5, waited
        assert _heartbeat(b, "slow", 3, jb["MemberId"]) == ErrorCode.UNKNOWN_MEMBER_ID
