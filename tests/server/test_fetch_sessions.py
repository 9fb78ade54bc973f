"""Incremental fetch sessions (KIP-227) over real sockets on one broker with an authorizer and SASL/PLAIN users:
a full fetch makes a session, incremental fetches answer only what changed and drop forgotten partitions, the
session errors Kafka answers (unknown id, wrong epoch, topic ids switched), a session usable only by the
principal that made it, READ re-checked on every fetch, and the cache's slot limit with Kafka's eviction rules
(first on the cache itself with a hand-moved clock, then over the wire)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.acl import AclOperation, AclPermission, PatternType, ResourceType
from broker_runtime.server.fetch_sessions import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    next_epoch,
)
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, plain_login, produce_body
from tests.support.cluster import wait_for

pytestmark = pytest.mark.timeout(60)

FETCH = ApiKey.FETCH
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-pw" '
    'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)
SLOTS = 2


# -- the cache's rules, on the cache itself -----------------------------------------------------------------


def _parts(n: int) -> dict[Any, CachedPartition]:
    return {("t", i): CachedPartition(None, 0, 100, -1, -1) for i in range(n)}


def test_eviction_rules() -> None:
    """Kafka's tryEvict: a full cache takes a new session only by evicting a stale one (unused > 2 min), else a
    less valuable evictable one -- fewer partitions, or a consumer's for a follower's -- never on a tie; a
    consumer's session is evictable by a consumer only once older than the eviction time."""
    now = [0]
    cache = FetchSessionCache(2, lambda: now[0])
    a = cache.maybe_create("User:a", False, False, _parts(1))
    b = cache.maybe_create("User:b", False, False, _parts(2))
    assert a and b and len(cache) == 2 and cache.partitions_cached == 3
    # Young sessions are evictable only by a follower's (privileged) session.
    assert cache.maybe_create("User:c", False, False, _parts(5)) == INVALID_SESSION_ID
    now[0] = EVICTION_MS + 1
    for sid, who in ((a, "User:a"), (b, "User:b")):  # used now: old enough to be evicted, not stale
        session = cache.get(sid, who)
        assert session is not None
        cache.touch(session, now[0])
    assert cache.maybe_create("User:c", False, False, _parts(1)) == INVALID_SESSION_ID  # ties lose
    c = cache.maybe_create("User:c", False, False, _parts(2 + 1))
    assert c and cache.get(a, "User:a") is None and cache.evictions == 1  # the smallest went
    f = cache.maybe_create("User:f", True, False, _parts(1))  # a follower's beats a young consumer's
    assert f and cache.get(b, "User:b") is None and cache.evictions == 2
    assert cache.get(c, "User:c") is not None and cache.partitions_cached == 3 + 1
    # A consumer's session cannot evict a young follower's nor the young c; once both are stale, it can.
    assert cache.maybe_create("User:d", False, False, _parts(9)) == INVALID_SESSION_ID
    now[0] += EVICTION_MS + 1
    d = cache.maybe_create("User:d", False, False, _parts(1))
    assert d and len(cache) == 2 and cache.evictions == 3
    assert cache.get(d, "User:other") is None  # another principal never sees it
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1 and next_epoch(0) == 1
    assert (
        FetchSessionCache(0, lambda: 0).maybe_create("User:a", True, False, _parts(1)) == INVALID_SESSION_ID
    )


# -- one broker ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sess_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "log.dirs": str(Path(tmp_path_factory.mktemp("fetchsess")) / "logs"),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "max.incremental.fetch.session.cache.slots": str(SLOTS),
    }
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        with _login(broker, "admin") as admin:
            for name in ("fs-a", "fs-b", "fs-c"):
                created = admin.call(ApiKey.CREATE_TOPICS, 7, create_topic_body(name, 3))["Topics"][0]
                assert created["ErrorCode"] == ErrorCode.NONE, created
            _acl(admin, ApiKey.CREATE_ACLS, "fs-", "User:alice", prefixed=True)
            _acl(admin, ApiKey.CREATE_ACLS, "fs-", "User:bob", prefixed=True)
        yield broker
    finally:
        broker.stop()


def _login(broker: Any, user: str) -> RawConnection:
    return plain_login(RawConnection(broker.listener_bootstrap("SASL_PLAINTEXT")), user, f"{user}-pw")


def _acl(conn: RawConnection, key: ApiKey, name: str, principal: str, *, prefixed: bool = False) -> None:
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    binding = {
        "ResourceType": ResourceType.TOPIC,
        "PatternType": pattern,
        "ResourcePatternType": pattern,
        "Principal": principal,
        "Host": "*",
        "Operation": AclOperation.READ,
        "PermissionType": AclPermission.ALLOW,
    }
    if key == ApiKey.CREATE_ACLS:
        answer = conn.call(key, 3, {"Creations": [{**binding, "ResourceName": name}]})
        assert answer["Results"][0]["ErrorCode"] == ErrorCode.NONE, answer
    else:
        flt = {
            "ResourceTypeFilter": ResourceType.TOPIC,
            "ResourceNameFilter": name,
            "PatternTypeFilter": pattern,
            "PrincipalFilter": principal,
            "HostFilter": "*",
            "Operation": AclOperation.READ,
            "PermissionType": AclPermission.ALLOW,
        }
        answer = conn.call(key, 3, {"Filters": [flt]})
        assert answer["FilterResults"][0]["ErrorCode"] == ErrorCode.NONE, answer


def _produce(conn: RawConnection, topic: str, partition: int, count: int = 2) -> None:
    answer = conn.call(ApiKey.PRODUCE, 9, produce_body(topic, partition, build_batch(count)))
    assert answer["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE, answer


def _fetch(
    conn: RawConnection, session_id: int, epoch: int, offsets: dict[tuple[Any, int], int], **kw: Any
) -> Any:
    """A Fetch of ``offsets`` ((topic name, or id from v13, partition) -> fetch offset), answering at once."""
    return conn.call(FETCH, kw.get("version", 12), _body(session_id, epoch, offsets, **kw))


def _body(
    session_id: int,
    epoch: int,
    offsets: dict[tuple[Any, int], int],
    *,
    version: int = 12,
    forgotten: dict[Any, list[int]] | None = None,
    replica_id: int = -1,
    max_bytes: int = 1 << 22,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
) -> dict[str, Any]:
    topics: dict[Any, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "Partition": index,
                "CurrentLeaderEpoch": -1,
                "FetchOffset": offset,
                "LastFetchedEpoch": -1,
                "LogStartOffset": -1,
                "PartitionMaxBytes": 1 << 20,
            }
        )
    by = "TopicId" if version >= 13 else "Topic"
    body = {
        "ReplicaId": replica_id,
        "MaxWaitMs": max_wait_ms,
        "MinBytes": min_bytes,
        "MaxBytes": max_bytes,
        "IsolationLevel": 0,
        "SessionId": session_id,
        "SessionEpoch": epoch,
        "Topics": [{by: t, "Partitions": p} for t, p in topics.items()],
        "ForgottenTopicsData": [{by: t, "Partitions": p} for t, p in (forgotten or {}).items()],
        "RackId": "",
    }
    return body


def _answered(answer: dict[str, Any]) -> dict[tuple[Any, int], tuple[int, int]]:
    """(topic, partition) -> (error, record bytes) of every partition in ``answer``."""
    return {
        (t.get("Topic") or t.get("TopicId"), p["PartitionIndex"]): (p["ErrorCode"], len(p["Records"] or b""))
        for t in answer["Responses"]
        for p in t["Partitions"]
    }


def _close(conn: RawConnection, session_id: int) -> None:
    answer = _fetch(conn, session_id, -1, {})
    assert answer["ErrorCode"] == ErrorCode.NONE and answer["SessionId"] == INVALID_SESSION_ID


def test_incremental_fetches_answer_only_what_changed(sess_broker: Any) -> None:
    """Full fetch -> a session answering every partition; incremental fetches answer only partitions with new
    records (from the cached fetch offsets), nothing when nothing changed, never a forgotten partition; a wrong
    epoch is INVALID_FETCH_SESSION_EPOCH, a closed session FETCH_SESSION_ID_NOT_FOUND."""
    cache = sess_broker.ctx.fetch_sessions
    incremental_before = cache.incremental_fetches
    with _login(sess_broker, "admin") as admin, _login(sess_broker, "alice") as alice:
        for p in range(3):
            _produce(admin, "fs-b", p)
        full = _fetch(alice, 0, 0, {("fs-b", p): 0 for p in range(3)})
        sid = full["SessionId"]
        assert full["ErrorCode"] == ErrorCode.NONE and sid != INVALID_SESSION_ID
        assert all(size > 0 for _, size in _answered(full).values()) and len(_answered(full)) == 3
        assert len(cache) >= 1 and cache.partitions_cached >= 3
        # The fetcher's positions moved to 2: sent once, then cached; no new data, nothing answered.
        quiet = _fetch(alice, sid, 1, {("fs-b", p): 2 for p in range(3)})
        assert quiet["ErrorCode"] == ErrorCode.NONE and quiet["SessionId"] == sid
        assert _answered(quiet) == {}
        _produce(admin, "fs-b", 1, 3)
        one = _fetch(alice, sid, 2, {})
        assert _answered(one) == {("fs-b", 1): (ErrorCode.NONE, _answered(one)[("fs-b", 1)][1])}
        assert _answered(one)[("fs-b", 1)][1] > 0
        forgot = _fetch(alice, sid, 3, {("fs-b", 1): 5}, forgotten={"fs-b": [0]})
        _produce(admin, "fs-b", 0)
        after = _fetch(alice, sid, 4, {})
        assert ("fs-b", 0) not in _answered(forgot) | _answered(after)
        assert _fetch(alice, sid, 4, {})["ErrorCode"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert _fetch(alice, sid, 9, {})["ErrorCode"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert cache.incremental_fetches - incremental_before == 4
        _close(alice, sid)
        gone = _fetch(alice, sid, 5, {})
        assert gone["ErrorCode"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and gone["SessionId"] == 0
        assert gone["Responses"] == []


def test_a_partition_left_unread_by_max_bytes_is_not_answered_as_changed(sess_broker: Any) -> None:
    """A fetch whose MaxBytes the first partition uses up answers the others without reading them -- with their
    real log start offset, so an incremental fetch does not answer an unchanged partition as changed."""
    with _login(sess_broker, "admin") as admin, _login(sess_broker, "alice") as alice:
        _produce(admin, "fs-c", 0, 3)
        _produce(admin, "fs-c", 0, 3)
        full = _fetch(alice, 0, 0, {("fs-c", 0): 6, ("fs-c", 1): 0})  # p0 at its end, p1 empty
        sid = full["SessionId"]
        assert sid != INVALID_SESSION_ID and _answered(full) == {("fs-c", 0): (0, 0), ("fs-c", 1): (0, 0)}
        first_batch = _fetch(alice, sid, 1, {("fs-c", 0): 0}, max_bytes=1)  # one batch, then nothing left
        assert list(_answered(first_batch)) == [("fs-c", 0)] and _answered(first_batch)[("fs-c", 0)][1] > 0
        _close(alice, sid)


def test_a_parked_fetch_overtaken_by_its_sessions_next_answers_invalid_epoch(sess_broker: Any) -> None:
    """Two fetches of one session sent back to back: the first waits in the purgatory (MinBytes not there), the
    second (the next epoch) is answered at once; when the first completes its session has moved on, so it answers
    INVALID_FETCH_SESSION_EPOCH with the session's id (Kafka's duplicate-request check), the second as usual."""
    with _login(sess_broker, "alice") as alice:
        sid = _fetch(alice, 0, 0, {("fs-c", 2): 0})["SessionId"]
        assert sid != INVALID_SESSION_ID
        alice.send_raw(alice.encode(FETCH, 12, _body(sid, 1, {}, max_wait_ms=300, min_bytes=1 << 20)))
        alice.send_raw(alice.encode(FETCH, 12, _body(sid, 2, {})))
        (_, first), (_, second) = alice.read_response(FETCH, 12), alice.read_response(FETCH, 12)
        assert (first["ErrorCode"], first["SessionId"]) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid)
        assert (second["ErrorCode"], second["SessionId"]) == (ErrorCode.NONE, sid)
        _close(alice, sid)


def test_a_parked_full_fetch_completed_by_another_principals_produce_is_the_fetchers(
    sess_broker: Any,
) -> None:
    """A full fetch parked in the purgatory (MinBytes not there) and completed by admin's Produce -- which runs
    the completion on admin's connection -- makes its session under alice, the principal that sent the fetch:
    alice's next incremental fetch uses it, admin's cannot."""
    purgatory = sess_broker.ctx.fetch_purgatory
    with _login(sess_broker, "admin") as admin, _login(sess_broker, "alice") as alice:
        end = _fetch(alice, 0, -1, {("fs-a", 2): 0})["Responses"][0]["Partitions"][0]["HighWatermark"]
        parked_before = purgatory.delayed
        alice.send_raw(alice.encode(FETCH, 12, _body(0, 0, {("fs-a", 2): end}, max_wait_ms=5000)))
        wait_for(lambda: purgatory.delayed > parked_before, 5, "alice's full fetch parked in the purgatory")
        _produce(admin, "fs-a", 2)
        _, full = alice.read_response(FETCH, 12)
        sid = full["SessionId"]
        assert full["ErrorCode"] == ErrorCode.NONE and sid != INVALID_SESSION_ID
        assert _answered(full)[("fs-a", 2)][1] > 0
        assert _fetch(admin, sid, 1, {})["ErrorCode"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert _fetch(alice, sid, 1, {})["ErrorCode"] == ErrorCode.NONE
        _close(alice, sid)


def test_a_session_never_holds_more_partitions_than_the_cluster(sess_broker: Any) -> None:
    """A full fetch naming more partitions than the cluster has makes no session; an incremental fetch growing a
    session past that closes it (counted) and is answered sessionless, its partitions read."""
    cache = sess_broker.ctx.fetch_sessions
    bound = sum(len(t.partitions) for t in sess_broker.ctx.cluster.view.topics.values())
    made_up = {("fs-none", i): 0 for i in range(bound + 1)}
    with _login(sess_broker, "alice") as alice:
        too_many = _fetch(alice, 0, 0, made_up)
        assert too_many["SessionId"] == INVALID_SESSION_ID and len(_answered(too_many)) == bound + 1
        sid = _fetch(alice, 0, 0, {("fs-a", 0): 0})["SessionId"]
        assert sid != INVALID_SESSION_ID
        closed_before = cache.oversize_closed
        grown = _fetch(alice, sid, 1, made_up)
        assert grown["ErrorCode"] == ErrorCode.NONE and grown["SessionId"] == INVALID_SESSION_ID
        assert len(_answered(grown)) == bound + 1 and cache.oversize_closed == closed_before + 1
        assert _fetch(alice, sid, 2, {})["ErrorCode"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_session_is_its_principals_and_read_is_checked_on_every_fetch(sess_broker: Any) -> None:
    """Another principal naming alice's session is answered FETCH_SESSION_ID_NOT_FOUND and cannot close it;
    once alice's READ is removed, her next incremental fetch answers TOPIC_AUTHORIZATION_FAILED for the
    session's partitions she did not name again (no records), and again once records arrive."""
    with (
        _login(sess_broker, "admin") as admin,
        _login(sess_broker, "alice") as alice,
        _login(sess_broker, "bob") as bob,
    ):
        _produce(admin, "fs-a", 0)
        sid = _fetch(alice, 0, 0, {("fs-a", 0): 0, ("fs-a", 1): 0})["SessionId"]
        assert sid != INVALID_SESSION_ID
        stolen = _fetch(bob, sid, 1, {})
        assert stolen["ErrorCode"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and stolen["Responses"] == []
        assert _fetch(bob, sid, -1, {})["ErrorCode"] == ErrorCode.NONE  # names it: closes nothing of alice's
        assert _fetch(alice, sid, 1, {})["ErrorCode"] == ErrorCode.NONE
        _acl(admin, ApiKey.CREATE_ACLS, "fs-a", "User:alice")
        try:
            _acl(admin, ApiKey.DELETE_ACLS, "fs-", "User:alice", prefixed=True)
            _acl(admin, ApiKey.DELETE_ACLS, "fs-a", "User:alice")
            _produce(admin, "fs-a", 0)
            denied = _fetch(alice, sid, 2, {})
            assert denied["ErrorCode"] == ErrorCode.NONE
            assert _answered(denied) == {
                ("fs-a", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0),
                ("fs-a", 1): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0),
            }
        finally:
            _acl(admin, ApiKey.CREATE_ACLS, "fs-", "User:alice", prefixed=True)
        again = _fetch(alice, sid, 3, {})
        assert _answered(again)[("fs-a", 0)][0] == ErrorCode.NONE and _answered(again)[("fs-a", 0)][1] > 0
        _close(alice, sid)


def test_topic_id_sessions_and_eviction_under_the_slot_limit(sess_broker: Any) -> None:
    """A v13 session (topic ids) used at v12 is FETCH_SESSION_TOPIC_ID_ERROR. With the cache full (2 slots) of
    young consumer sessions, a consumer's full fetch of more partitions gets no session, nor does one posing as a
    follower without CLUSTER_ACTION; a follower's evicts the smallest (counted), whose next incremental fetch is FETCH_SESSION_ID_NOT_FOUND; its full fetch then is
    served without a session (it is worth less than what the cache holds)."""
    cache = sess_broker.ctx.fetch_sessions
    assert len(cache) == 0, "an earlier test left a session open"
    topic_id: uuid.UUID = sess_broker.ctx.cluster.view.topics["fs-a"].topic_id
    with _login(sess_broker, "alice") as alice:
        small = _fetch(alice, 0, 0, {(topic_id, 0): 0}, version=13)["SessionId"]
        assert small != INVALID_SESSION_ID
        assert _fetch(alice, small, 1, {})["ErrorCode"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        assert _fetch(alice, small, 1, {}, version=13)["ErrorCode"] == ErrorCode.NONE
        middle = _fetch(alice, 0, 0, {("fs-a", 0): 0, ("fs-a", 1): 0})["SessionId"]
        assert middle != INVALID_SESSION_ID and len(cache) == SLOTS
        # Young consumer sessions are evictable only by a follower's (privileged) session, whatever its size.
        assert _fetch(alice, 0, 0, {("fs-b", p): 0 for p in range(3)})["SessionId"] == INVALID_SESSION_ID
        evictions = cache.evictions
        with _login(sess_broker, "bob") as bob:  # posing as a follower without CLUSTER_ACTION: not privileged
            posing = _fetch(bob, 0, 0, {("fs-b", 0): 0}, replica_id=1)
            assert posing["SessionId"] == INVALID_SESSION_ID and cache.evictions == evictions
        with _login(sess_broker, "admin") as admin:  # a super user: may fetch as a follower (CLUSTER_ACTION)
            follower = _fetch(admin, 0, 0, {("fs-b", 0): 0}, replica_id=1)["SessionId"]
            assert follower != INVALID_SESSION_ID and cache.evictions == evictions + 1
            lost = _fetch(alice, small, 2, {}, version=13)
            assert lost["ErrorCode"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            again = _fetch(alice, 0, 0, {(topic_id, 0): 0}, version=13)
            assert again["ErrorCode"] == ErrorCode.NONE and again["SessionId"] == INVALID_SESSION_ID
            assert _answered(again)[(topic_id, 0)][0] == ErrorCode.NONE
            assert _fetch(alice, middle, 1, {})["ErrorCode"] == ErrorCode.NONE  # the larger one stayed
            _close(admin, follower)
        _close(alice, middle)
    assert len(cache) == 0 and cache.partitions_cached == 0
