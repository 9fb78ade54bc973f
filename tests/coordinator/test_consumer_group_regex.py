"""Regular-expression subscriptions of consumer groups (KIP-848 ``SubscribedTopicRegex``) in the group
coordinator, on a manual clock over real ``__consumer_offsets`` partition logs: resolution by whole-name match,
a topic created later picked up once the refresh interval allows, topics the principal may not DESCRIBE left out,
RE2J's refusals named, nested repetitions matched in linear time, and the resolution kept across a restart
(Kafka's ``ConsumerGroupRegularExpression`` record) and tombstoned when its last member leaves. The same over real sockets is in
tests/server/test_consumer_group_protocol.py."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_runtime.coordinator.group import consumer as consumer_module
from broker_runtime.coordinator.group import consumer_records
from broker_runtime.coordinator.group import regex as regex_module
from broker_runtime.coordinator.group.consumer import HeartbeatRequest, HeartbeatResult
from broker_runtime.coordinator.group.regex import RegexError, check, resolve
from broker_runtime.errors import ErrorCode
from tests.coordinator.test_consumer_groups import REBALANCE_MS, TOPICS, Node, parts


class RegexNode(Node):
    """A coordinator whose topics (``self.topics``, name -> partition count) all have ids, so regexes see them."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            root,
            loop,
            lambda: {n: uuid.uuid5(uuid.NAMESPACE_DNS, n) for n in self.topics},
            {**TOPICS, "orders-eu": 2, "orders-us": 1, "payments": 1},
        )
        # Kafka's regex refresh intervals (10 s, 10 min) and sessions that outlast them: the clock jumps
        consumer = self.coordinator.consumer
        consumer.config = dataclasses.replace(consumer.config, session_timeout_ms=10**9)

    def join(
        self, member: str, regex: str, may_describe: Callable[[str], bool] = lambda _: True, **kw: object
    ) -> HeartbeatResult:
        req = HeartbeatRequest(
            "g",
            member,
            0,
            subscribed_topic_names=(),
            subscribed_topic_regex=regex,
            owned={},
            rebalance_timeout_ms=REBALANCE_MS,
            **kw,  # type: ignore[arg-type]
        )
        return self.coordinator.consumer_heartbeat(req, None, may_describe)

    def beat(
        self,
        member: str,
        epoch: int,
        owned: object = None,
        may_describe: Callable[[str], bool] = lambda _: True,
    ) -> HeartbeatResult:
        req = HeartbeatRequest("g", member, epoch, owned=owned)  # type: ignore[arg-type]
        return self.coordinator.consumer_heartbeat(req, None, may_describe)

    def regex_records(self) -> dict[str, bytes]:
        group = self.coordinator.group("g")
        assert group is not None and group.consumer is not None
        return {
            consumer_records.decode(k, v, {}).member_id or "": v
            for k, v in group.consumer.written.items()
            if consumer_records.record_type(k) == consumer_records.REGULAR_EXPRESSION
        }


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture
def node(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Iterator[RegexNode]:
    n = RegexNode(tmp_path, loop)
    yield n
    n.close()


def test_a_regex_matches_whole_names_and_a_topic_created_later_is_picked_up(node: RegexNode) -> None:
    # "orders" alone would be found inside the names; Kafka matches the whole name
    assert parts(node.join("a", "orders")) == set()
    a = node.join("b", "orders-.*")
    assert parts(a) == {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)}
    epoch = a.member_epoch
    node.topics["orders-asia"] = 1
    # within Kafka's 10 s between two resolutions of the group: not yet
    assert node.beat("b", epoch).assignment is None
    node.advance(10_001)
    b = node.beat("b", epoch)
    assert b.member_epoch == epoch + 1
    assert parts(b) == {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0), ("orders-asia", 0)}
    # a deleted topic leaves the assignment at the next heartbeat
    del node.topics["orders-us"]
    c = node.beat("b", b.member_epoch, owned=b.assignment)
    assert parts(c) == {("orders-eu", 0), ("orders-eu", 1), ("orders-asia", 0)}


def test_only_topics_the_principal_may_describe_are_resolved(node: RegexNode) -> None:
    r = node.join("a", "orders-.*|payments", may_describe=lambda t: t != "orders-us")
    assert parts(r) == {("orders-eu", 0), ("orders-eu", 1), ("payments", 0)}
    # the grant is picked up by the periodic refresh (group.consumer.regex.refresh.interval.ms), not before
    node.advance(11_000)
    assert node.beat("a", r.member_epoch).assignment is None
    node.advance(600_000)
    later = node.beat("a", r.member_epoch)
    assert ("orders-us", 0) in parts(later)


#: An expression RE2 compiles to more than regex.MAX_MEM bytes (Kafka would take it: under 32767 characters).
OVERSIZED = "[a-z]{1000}" * 100


@pytest.mark.parametrize(
    ("regex", "named"),
    [
        # RE2's reasons, as RE2J's (the same parser): Kafka's message ends with them
        ("(o)\\1", "invalid escape sequence: \\1"),
        ("orders(?=-eu)", "invalid perl operator: (?="),
        ("(?<!x)orders", "invalid perl operator: (?<!"),
        ("(?>orders)", "invalid perl operator: (?>"),
        ("orders-.*+", "bad repetition operator: *+"),
        ("(o)?(?(1)a|b)", "invalid perl operator: (?("),
        ("orders\\Z", "invalid escape sequence: \\Z"),
        ("orders-[", "missing ]: ["),
        ("orders-.{1001}", "invalid repetition size: {1001}"),
        # RE2 (C++) reads \C as any byte; RE2J refuses it, and so does pylog
        ("orders\\C", "invalid escape sequence: \\C"),
        pytest.param(OVERSIZED, "pattern too large - compile failed", id="oversized"),
    ],
)
def test_what_re2j_refuses_is_named(node: RegexNode, regex: str, named: str) -> None:
    r = node.join("a", regex)
    assert r.error == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert r.message is not None and r.message.endswith(f": {named}.") and f"`{regex}`" in r.message
    with pytest.raises(RegexError, match="SubscribedTopicRegex"):
        check(regex)
    group = node.coordinator.group("g")
    assert group is None or group.consumer is None or not group.consumer.members


@pytest.mark.parametrize("regex", ["(a|aa)+$", "(a+)+$"])
def test_a_regex_with_nested_repetition_is_matched_in_linear_time(node: RegexNode, regex: str) -> None:
    # Python's backtracking re takes exponential time on these against 36 a's and a mismatch (about 15 s for
    # the first, hours for the second); RE2 takes microseconds, as RE2J does on Kafka's coordinator
    node.topics["a" * 36 + "-x"] = 1
    node.topics["a" * 36] = 1
    start = time.monotonic()
    r = node.join("a", regex)
    assert time.monotonic() - start < 1.0
    assert r.error == ErrorCode.NONE
    assert parts(r) == {("a" * 36, 0)}


def test_re2j_syntax_topic_names_need_is_accepted() -> None:
    topics = ["orders-eu", "Orders-us", "payments", "p.x"]
    found = resolve(
        [
            "(?i)orders-(eu|us)",
            "pay[a-z]{4}s",
            "p\\.x",
            "(ab)+|orders-e.?",
            "\\p{L}+",
            "(?P<o>orders)-\\w\\w",
        ],
        topics,
        lambda _: True,
    )
    assert found == {
        "(?i)orders-(eu|us)": frozenset({"orders-eu", "Orders-us"}),
        "pay[a-z]{4}s": frozenset({"payments"}),
        "p\\.x": frozenset({"p.x"}),
        "(ab)+|orders-e.?": frozenset({"orders-eu"}),
        "\\p{L}+": frozenset({"payments"}),
        "(?P<o>orders)-\\w\\w": frozenset({"orders-eu"}),
    }
    # an alternation of a thousand topic names (30000 characters, near the protocol's 32767) fits regex.MAX_MEM
    names = [f"orders-region-{i:04d}-xxxxxxxxxx" for i in range(1000)]
    assert check("|".join(names)).fullmatch(names[-1]) is not None


def test_heartbeats_repeating_a_regex_neither_compile_it_nor_scan_the_topics(
    node: RegexNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka compiles a member's expression only when it changes: heartbeats repeating it are not checked again,
    and within the minimum refresh interval they do not read the topics either."""
    checks: list[str] = []
    scans: list[int] = []

    def counted_check(regex: str) -> object:
        checks.append(regex)
        return check(regex)

    topic_ids = node.coordinator.consumer._topic_ids

    def counted_topic_ids() -> object:
        scans.append(1)
        return topic_ids()

    monkeypatch.setattr(consumer_module, "check", counted_check)
    monkeypatch.setattr(node.coordinator.consumer, "_topic_ids", counted_topic_ids)
    r = node.join("a", "orders-e.")
    assert r.error == ErrorCode.NONE and (checks, len(scans)) == (["orders-e."], 1)
    epoch = r.member_epoch
    for _ in range(20):
        beat = node.coordinator.consumer_heartbeat(
            HeartbeatRequest("g", "a", epoch, subscribed_topic_regex="orders-e."), None, lambda _: True
        )
        assert beat.error == ErrorCode.NONE
        epoch = beat.member_epoch
    assert (checks, len(scans)) == (["orders-e."], 1)
    changed = node.coordinator.consumer_heartbeat(
        HeartbeatRequest("g", "a", epoch, subscribed_topic_regex="orders-u."), None, lambda _: True
    )
    assert changed.error == ErrorCode.NONE and checks == ["orders-e.", "orders-u."] and len(scans) == 2


def test_a_refused_regex_is_compiled_once_while_it_is_among_the_last_checked(
    node: RegexNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused expression never becomes the member's, so each of its heartbeats checks it: the refusal is
    remembered (bounded: CHECKED_MAX outcomes), so a 32 KB expression is compiled once, not per heartbeat."""
    compiled: list[str] = []
    compile_one = regex_module._compile

    def counted_compile(regex: str) -> object:
        compiled.append(regex)
        return compile_one(regex)

    monkeypatch.setattr(regex_module, "_compile", counted_compile)
    refused = f"orders(?=-eu){uuid.uuid4().hex}" + "x" * 32_000
    for _ in range(20):
        r = node.join("a", refused)
        assert r.error == ErrorCode.INVALID_REGULAR_EXPRESSION and r.message is not None
        assert r.message.endswith(": invalid perl operator: (?=.")
    assert compiled == [refused]
    for i in range(regex_module.CHECKED_MAX):  # as many other expressions push it out
        check(f"other-{uuid.uuid4().hex}-{i}")
    assert node.join("a", refused).error == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert compiled.count(refused) == 2


def test_the_resolution_survives_a_restart_and_goes_with_its_last_member(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    node = RegexNode(tmp_path, loop)
    a = node.join("a", "orders-.*")
    b = node.join("b", "orders-.*")
    assert set(node.regex_records()) == {"orders-.*"}
    node.close()
    node = RegexNode(tmp_path, loop)
    try:
        group = node.coordinator.group("g")
        assert group is not None and group.consumer is not None
        cg = group.consumer
        assert {m: cg.members[m].subscribed_regex for m in ("a", "b")} == {"a": "orders-.*", "b": "orders-.*"}
        assert cg.resolved_regexes["orders-.*"].topics == {"orders-eu", "orders-us"}
        epoch = cg.group_epoch
        # the members go on at their epochs; the topics did not change: no new group epoch
        assert node.beat("a", a.member_epoch).error == ErrorCode.NONE
        assert node.beat("b", b.member_epoch).error == ErrorCode.NONE
        assert cg.group_epoch == epoch
        node.beat("a", -1)
        assert set(node.regex_records()) == {"orders-.*"}
        node.beat("b", -1)
        assert node.regex_records() == {}
    finally:
        node.close()
    node = RegexNode(tmp_path, loop)
    try:
        group = node.coordinator.group("g")
        assert group is not None and group.consumer is not None and group.consumer.resolved_regexes == {}
    finally:
        node.close()
