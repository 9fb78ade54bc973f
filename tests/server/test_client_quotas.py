"""Client quotas, the store: AlterClientQuotas checks and writes as Kafka's ``ClientQuotaControlManager``,
DescribeClientQuotas matches as Kafka's ``ClientQuotasImage``, the quota of a (user, client id) is the most
specific entity's (Kafka's ``DefaultQuotaCallback`` order), the quotas survive a restart, and ``pylog-broker
configs --entity-type users|clients`` sets, shows and removes them. One broker for the module (a second one on
the same log directory for the restart)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.server.client_quotas import entity_of, resolve
from broker_runtime.server.quota_manager import MAX_THROTTLE_MS, ClientQuotas, QuotaSensors
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)

E = ErrorCode


def test_the_most_specific_entity_sets_the_quota() -> None:
    """Kafka's precedence: user+client > user+default client > user > default user+client > default user+default
    client > default user > client > default client; the tags say which pair shares the rate."""
    quotas: dict[Any, dict[str, float]] = {}

    def add(value: float, **names: str | None) -> None:
        quotas[entity_of((k.replace("_", "-"), v) for k, v in names.items())] = {"producer_byte_rate": value}

    def limit(user: str, client: str) -> Any:
        return resolve(quotas, "producer_byte_rate", user, client)

    assert limit("alice", "app") is None
    add(8, client_id=None)
    assert limit("alice", "app") == (("", "app"), 8)
    add(7, client_id="app")
    assert limit("alice", "app") == (("", "app"), 7)
    add(6, user=None)
    assert limit("alice", "app") == (("alice", ""), 6)
    add(5, user=None, client_id=None)
    assert limit("alice", "app") == (("alice", "app"), 5)
    add(4, user=None, client_id="app")
    assert limit("alice", "app") == (("alice", "app"), 4)
    add(3, user="alice")
    assert limit("alice", "app") == (("alice", ""), 3)
    assert limit("bob", "app") == (("bob", "app"), 4)
    add(2, user="alice", client_id=None)
    assert limit("alice", "app") == (("alice", "app"), 2)
    add(1, user="alice", client_id="app")
    assert limit("alice", "app") == (("alice", "app"), 1)
    assert limit("alice", "other") == (("alice", "other"), 2)
    assert resolve(quotas, "consumer_byte_rate", "alice", "app") is None


def test_rates_kept_are_bounded_and_throttle_as_kafka_computes() -> None:
    """Client ids are the client's choice: at most ``max_sensors`` rates per quota, the least recently used
    dropped (and counted); a rate over its quota throttles for (rate - quota) / quota * window ms."""
    sensors = QuotaSensors("producer_byte_rate", samples=2, window_s=1, max_sensors=3)
    sensors.update({entity_of([("client-id", None)]): {"producer_byte_rate": 1000.0}})
    for i in range(10):
        assert sensors.record("", f"client-{i}", 500, now_ms=0.0) == 0  # 500 B over a 1 s window: within
    assert len(sensors.snapshot(0.0)) == 3 and sensors.evicted == 7
    # 500 + 1500 = 2000 B over 1 s: twice the quota -> (2000 - 1000) / 1000 * 1000 ms
    assert sensors.record("", "client-9", 1500, now_ms=0.0) == 1000
    # 102000 B over 1 s: a byte rate's throttle is not capped (Kafka's ClientQuotaManager.throttleTime)
    assert sensors.record("", "client-9", 100_000, now_ms=0.0) == 101_000


def test_byte_rate_throttles_are_uncapped_request_and_connection_ones_capped_at_one_window() -> None:
    """Kafka caps only ``request_percentage`` and ``connection_creation_rate`` throttles, at one window
    (``maxThrottleTimeMs = quota.window.size.seconds * 1000``); the byte rates' are as long as the formula says,
    else a greedy client gets far more than its quota through. A quota of 0 throttles by the most the wire's
    int32 ``ThrottleTimeMs`` can say, or by the cap."""
    quotas = ClientQuotas(samples=11, window_s=1, clock_ms=lambda: 0.0)
    default_client = entity_of([("client-id", None)])
    quotas.update(
        {
            default_client: {
                "producer_byte_rate": 1000.0,
                "consumer_byte_rate": 0.0,
                "request_percentage": 1.0,
            },
            entity_of([("ip", None)]): {"connection_creation_rate": 1.0},
        }
    )
    # 1 MB over the 10 s a new rate is judged on: 100 kB/s, 99 x the quota -> 990 s (was capped at 11 s)
    assert quotas.produce.record("", "greedy", 1_000_000, now_ms=0.0) == 990_000
    assert quotas.fetch.record("", "greedy", 1, now_ms=0.0) == MAX_THROTTLE_MS == 2**31 - 1
    # 100 % of a request thread for 10 s against 1 %: the formula says 990 s, Kafka caps it at one window
    assert quotas.request.record("", "greedy", 1000.0, now_ms=0.0) == 1000
    # 1001 connections in the 10 s against 1/s: capped at one window, which bounds a refused socket's hold
    for _ in range(1000):
        quotas.connections.record("", "127.0.0.1", 1, now_ms=0.0)
    assert quotas.connection_throttle_ms("127.0.0.1") == 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started = start_broker(tmp_path_factory.mktemp("quota-store"))
    yield started
    started.stop()


@pytest.fixture
def client(broker: Any) -> Iterator[KafkaClient]:
    with KafkaClient(broker.bootstrap) as c:
        everything = c.admin.describe_client_quotas()
        c.admin.alter_client_quotas([(dict(e), dict.fromkeys(v)) for e, v in everything])
        yield c


def _codes(errors: list[KafkaError | None]) -> list[int]:
    return [0 if e is None else e.code for e in errors]


def test_alter_then_describe_with_each_filter(client: KafkaClient) -> None:
    admin = client.admin
    assert _codes(
        admin.alter_client_quotas(
            [
                ({"user": "alice"}, {"producer_byte_rate": 1024, "request_percentage": 12.5}),
                ({"user": None}, {"consumer_byte_rate": 2048}),
                ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 512}),
                ({"client-id": None}, {"producer_byte_rate": 4096}),
                ({"ip": "127.0.0.1"}, {"connection_creation_rate": 50}),
            ]
        )
    ) == [0, 0, 0, 0, 0]
    every = admin.describe_client_quotas()
    assert len(every) == 5
    assert ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}) in every
    assert admin.describe_client_quotas([("user", 0, "alice")], strict=True) == [
        ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5})
    ]
    # not strict: alice's user+client-id entity matches too
    assert len(admin.describe_client_quotas([("user", 0, "alice")])) == 2
    assert admin.describe_client_quotas([("user", 1, None)]) == [
        ({"user": None}, {"consumer_byte_rate": 2048.0})
    ]
    # MATCH_SPECIFIED: any name, the default included; strict leaves out the two-type entity
    assert {str(e) for e, _ in admin.describe_client_quotas([("user", 2, None)], strict=True)} == {
        str({"user": None}),
        str({"user": "alice"}),
    }
    assert admin.describe_client_quotas([("user", 2, None), ("client-id", 0, "app")], strict=True) == [
        ({"client-id": "app", "user": "alice"}, {"producer_byte_rate": 512.0})
    ]
    assert admin.describe_client_quotas([("ip", 2, None)]) == [
        ({"ip": "127.0.0.1"}, {"connection_creation_rate": 50.0})
    ]
    assert admin.describe_client_quotas(strict=True) == []
    # removal: one key, then the last key removes the entity
    assert _codes(admin.alter_client_quotas([({"user": "alice"}, {"request_percentage": None})])) == [0]
    assert admin.describe_client_quotas([("user", 0, "alice")], strict=True) == [
        ({"user": "alice"}, {"producer_byte_rate": 1024.0})
    ]
    assert _codes(admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": None})])) == [0]
    assert admin.describe_client_quotas([("user", 0, "alice")], strict=True) == []


def test_validate_only_and_refusals(client: KafkaClient) -> None:
    admin = client.admin
    assert _codes(
        admin.alter_client_quotas([({"client-id": "x"}, {"producer_byte_rate": 10})], validate_only=True)
    ) == [0]
    assert admin.describe_client_quotas() == []
    refused = admin.alter_client_quotas(
        [
            ({"client-id": "a"}, {"producer_byte_rate": 1.5}),  # must be a Long
            ({"client-id": "b"}, {"connection_creation_rate": 5}),  # an ip key
            ({"ip": "127.0.0.1"}, {"producer_byte_rate": 5}),  # a client key
            ({"ip": "not-an-ip"}, {"connection_creation_rate": 5}),
            ({"ip": "127.0.0.1", "user": "u"}, {"connection_creation_rate": 5}),
            ({"user": ""}, {"producer_byte_rate": 5}),
            ({"group": "g"}, {"producer_byte_rate": 5}),
            ({}, {"producer_byte_rate": 5}),
            ({"client-id": "c"}, {"controller_mutation_rate": 5}),  # not enforced: refused, never kept
            ({"client-id": "d"}, {"consumer_byte_rate": -1}),
            ({"client-id": "e"}, {"producer_byte_rate": float("inf")}),  # round(inf) raised: connection lost
            ({"client-id": "f"}, {"request_percentage": float("inf")}),  # was kept, written as "Infinity"
            ({"client-id": "g"}, {"request_percentage": float("nan")}),
            ({"ip": "127.0.0.1"}, {"connection_creation_rate": float("-inf")}),
            # Kafka 4 refuses a quota of 0 or less (ClientQuotaControlManager.validateQuotaKeyValue)
            ({"client-id": "h"}, {"producer_byte_rate": 0}),
            ({"user": None}, {"request_percentage": 0.0}),
            ({"ip": None}, {"connection_creation_rate": 0}),
            ({"client-id": "ok"}, {"consumer_byte_rate": 100}),
        ]
    )
    assert _codes(refused) == [E.INVALID_REQUEST] * 17 + [0]
    assert "Quota producer_byte_rate must be a finite number, not inf" in str(refused[10])
    assert str(refused[9]).endswith("Quota consumer_byte_rate must be greater than 0"), str(refused[9])
    assert str(refused[13]).endswith("Quota connection_creation_rate must be greater than 0"), str(
        refused[13]
    )
    assert str(refused[14]).endswith("Quota producer_byte_rate must be greater than 0"), str(refused[14])
    assert str(refused[15]).endswith("Quota request_percentage must be greater than 0"), str(refused[15])
    assert str(refused[16]).endswith("Quota connection_creation_rate must be greater than 0"), str(
        refused[16]
    )
    assert "must be a Long value" in str(refused[0])
    assert "Invalid configuration key connection_creation_rate" in str(refused[1])
    assert "not enforced by pylog" in str(refused[8])
    # the valid entry applied, the refused ones changed nothing
    assert client.admin.describe_client_quotas() == [({"client-id": "ok"}, {"consumer_byte_rate": 100.0})]


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    first = start_broker(tmp_path)
    try:
        with KafkaClient(first.bootstrap) as c:
            assert _codes(
                c.admin.alter_client_quotas([({"user": "carol"}, {"producer_byte_rate": 300})])
            ) == [0]
    finally:
        first.stop()
    second = start_broker(tmp_path)
    try:
        with KafkaClient(second.bootstrap) as c:
            assert c.admin.describe_client_quotas() == [({"user": "carol"}, {"producer_byte_rate": 300.0})]
    finally:
        second.stop()


def test_configs_tool_sets_shows_and_removes_quotas(
    client: KafkaClient, broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker_runtime.cli import main

    def tool(*args: str) -> tuple[int, str]:
        code = main(["configs", "--bootstrap-server", broker.bootstrap, *args])
        out = capsys.readouterr()
        return code, out.out + out.err

    assert tool(
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--alter",
        "--add-config",
        "producer_byte_rate=204800",
    ) == (0, "Completed updating config for client app.\n")
    assert (
        tool(
            "--entity-type", "users", "--entity-default", "--alter", "--add-config", "consumer_byte_rate=1e7"
        )[0]
        == 0
    )
    assert tool("--entity-type", "clients", "--describe") == (
        0,
        "Quota configs for client-id 'app' are producer_byte_rate=204800.0\n",
    )
    assert tool("--entity-type", "users", "--entity-default", "--describe") == (
        0,
        "Quota configs for the default user-principal are consumer_byte_rate=1.0E7\n",
    )
    code, text = tool(
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--alter",
        "--add-config",
        "producer_byte_rate=0.5",
    )
    assert code == 1 and "must be a Long value" in text
    code, text = tool(
        "--entity-type", "clients", "--entity-name", "app", "--alter", "--add-config", "producer_byte_rate=0"
    )
    assert code == 1 and "Quota producer_byte_rate must be greater than 0" in text, text
    assert (
        tool(
            "--entity-type",
            "clients",
            "--entity-name",
            "app",
            "--alter",
            "--delete-config",
            "producer_byte_rate",
        )[0]
        == 0
    )
    assert tool("--entity-type", "clients", "--describe") == (0, "")


def test_configs_tool_sets_and_shows_the_quotas_of_a_user_for_a_client_id(
    client: KafkaClient, broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-configs' syntax for a (user, client id) pair: two ``--entity-type`` and their names or defaults,
    paired by position."""
    from broker_runtime.cli import main

    def tool(*args: str) -> tuple[int, str]:
        code = main(["configs", "--bootstrap-server", broker.bootstrap, *args])
        out = capsys.readouterr()
        return code, out.out + out.err

    alice_app = (
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
    )
    assert tool(*alice_app, "--alter", "--add-config", "producer_byte_rate=1024") == (
        0,
        "Completed updating config for user alice.\n",
    )
    # clients first, the default client id: the names follow the types' order
    default_client_of_alice = (
        *("--entity-type", "clients", "--entity-default", "--entity-type", "users", "--entity-name", "alice"),
    )
    assert tool(*default_client_of_alice, "--alter", "--add-config", "consumer_byte_rate=2048") == (
        0,
        "Completed updating default config for clients in the cluster.\n",
    )
    assert client.admin.describe_client_quotas(
        [("user", 0, "alice"), ("client-id", 1, None)], strict=True
    ) == [({"user": "alice", "client-id": None}, {"consumer_byte_rate": 2048.0})]
    assert tool(*alice_app, "--describe") == (
        0,
        "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0\n",
    )
    # a type without a name: every entity of it
    code, text = tool(
        "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--describe"
    )
    assert code == 0 and sorted(text.splitlines()) == [
        "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0",
        "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=2048.0",
    ]
    # alone, each type shows only its own entities
    assert tool("--entity-type", "users", "--entity-name", "alice", "--describe") == (0, "")

    code, text = tool("--entity-type", "users", "--entity-type", "topics", "--describe")
    assert code == 2 and "Only 'users' and 'clients' entity types may be specified together" in text
    code, text = tool(
        "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--alter"
    )
    assert code == 2 and "must be specified with each --entity-type for --alter" in text
    code, text = tool(*alice_app, "--alter", "--add-config", "SCRAM-SHA-256=[password=x]")
    assert code == 2 and "Only quota configs" in text and "SCRAM-SHA-256" in text
    assert tool(*alice_app, "--alter", "--delete-config", "producer_byte_rate")[0] == 0
    assert tool(*alice_app, "--describe") == (0, "")


def test_a_quota_set_on_one_broker_reaches_the_others(tmp_path: Path) -> None:
    """In a cluster the quotas live in the cluster metadata: set through node 0, node 1 describes and enforces
    them once it sees the change."""
    from tests.support.brokers import start_node_brokers
    from tests.support.cluster import FAST, wait_for

    props = {
        **FAST,
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "pylog.cluster.dir": str(tmp_path / "cluster"),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    brokers = start_node_brokers(tmp_path, props)
    try:
        with KafkaClient(brokers[0].bootstrap) as c:
            assert c.admin.alter_client_quotas([({"user": None}, {"producer_byte_rate": 5000})]) == [None]
        wait_for(lambda: brokers[1].ctx.client_quotas.produce.enabled, what="node 1 enforcing the quota")
        assert brokers[1].ctx.client_quotas.produce.limit("anyone", "app") == (("anyone", ""), 5000.0)
        with KafkaClient(brokers[1].bootstrap) as c:
            assert c.admin.describe_client_quotas() == [({"user": None}, {"producer_byte_rate": 5000.0})]
    finally:
        for broker in brokers:
            broker.stop()
