"""SCRAM users over the wire (DescribeUserScramCredentials 50, AlterUserScramCredentials 51) on a cluster of two
brokers in this process sharing one cluster directory, with Kafka's StandardAuthorizer: ``User:admin`` (PLAIN)
and the brokers' ``User:ANONYMOUS`` (PLAINTEXT, also the inter-broker listener) are super users, ``User:alice``
(PLAIN) holds nothing.

Checked: a credential set through node 0 logs in on node 1 at once (no restart), a new password replaces the
old one (the old is refused), a deleted user cannot log in; a principal without ALTER / DESCRIBE on the cluster
is refused and changes nothing; Kafka's per-user validation (iterations out of 4096-16384, unknown mechanism,
empty name, one user altered twice, deleting what is not stored, describing a user twice or an unknown one);
no password, salted password or key appears in the broker's logs (DEBUG) or answers; DescribeClientQuotas
answers no quotas while none is set and validates its filter; ``pylog-broker configs --entity-type users`` in kafka-configs'
shape. The stored keys match what ``scramp`` derives from the password.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scramp

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.client_security import ClientSecurity
from broker_runtime.security.scram_credentials import (
    CREDENTIALS_FILE,
    credential_from_salted_password,
    salted_password,
)
from tests.support.brokers import start_node_brokers
from tests.support.cluster import FAST

pytestmark = pytest.mark.timeout(90)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
E = ErrorCode


class Cluster:
    def __init__(self, brokers: list[Any], cluster_dir: Path) -> None:
        self.brokers = brokers
        self.credentials = cluster_dir / CREDENTIALS_FILE

    def sasl(self, node: int) -> str:
        return str(self.brokers[node].listener_bootstrap("SASL_PLAINTEXT"))

    def client(self, node: int, mechanism: str, user: str, password: str) -> KafkaClient:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else SCRAM_MODULE
        )
        security = ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.jaas.config": f'{module} required username="{user}" password="{password}";',
            }
        )
        return KafkaClient(self.sasl(node), security=security, retries=0, request_timeout_ms=10000)

    def admin(self, node: int = 0) -> KafkaClient:
        return self.client(node, "PLAIN", "admin", "admin-secret")

    def logs_in(self, node: int, mechanism: str, user: str, password: str) -> bool:
        """True when a SCRAM login as ``user`` succeeds on ``node`` (a Metadata round trip after it)."""
        try:
            with self.client(node, mechanism, user, password) as client:
                client.metadata()
        except KafkaError as exc:
            assert exc.code == E.SASL_AUTHENTICATION_FAILED, exc
            return False
        return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("scram-admin")
    cluster_dir = base / "cluster"
    props = {
        **FAST,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "pylog.cluster.dir": str(cluster_dir),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    brokers = start_node_brokers(base, props)
    try:
        yield Cluster(brokers, cluster_dir)
    finally:
        for broker in brokers:
            broker.stop()


def _alter(client: KafkaClient, body: dict[str, Any]) -> dict[str, int]:
    """A raw AlterUserScramCredentials: user -> error code."""
    _, answer = client.any_connection().request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
    return {r["User"]: r["ErrorCode"] for r in answer["Results"]}


def _upsertion(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> dict[str, Any]:
    salt = b"0123456789abcdef"
    hashed = salted_password("SCRAM-SHA-256" if mechanism != 2 else "SCRAM-SHA-512", password, salt, 4096)
    return {
        "Name": name,
        "Mechanism": mechanism,
        "Iterations": iterations,
        "Salt": salt,
        "SaltedPassword": hashed,
    }


def _stored(cluster: Cluster) -> dict[str, Any]:
    if not cluster.credentials.exists():
        return {}
    users: dict[str, Any] = json.loads(cluster.credentials.read_text())["users"]
    return users


def test_set_through_one_node_logs_in_on_the_other_at_once(cluster: Cluster) -> None:
    """kafka-configs' sequence: add a credential, log in with it on the OTHER node (the cluster's one file, no
    restart), change the password (the old one is refused), describe (mechanism and iterations only), delete it
    (no login any more, describe RESOURCE_NOT_FOUND)."""
    with cluster.admin(0) as admin:
        assert admin.admin.alter_user_scram_credentials([("carol", "SCRAM-SHA-256", 8192, "first-pw")]) == {
            "carol": None
        }
    assert cluster.logs_in(1, "SCRAM-SHA-256", "carol", "first-pw")
    with cluster.admin(1) as admin:
        assert admin.admin.alter_user_scram_credentials([("carol", "SCRAM-SHA-256", 4096, "second-pw")]) == {
            "carol": None
        }
        assert admin.admin.describe_user_scram_credentials(["carol"]) == {"carol": {"SCRAM-SHA-256": 4096}}
    assert cluster.logs_in(0, "SCRAM-SHA-256", "carol", "second-pw")
    assert not cluster.logs_in(1, "SCRAM-SHA-256", "carol", "first-pw")
    assert not cluster.logs_in(0, "SCRAM-SHA-512", "carol", "second-pw")  # no credential of that mechanism
    with cluster.admin(0) as admin:
        assert admin.admin.alter_user_scram_credentials(deletions=[("carol", "SCRAM-SHA-256")]) == {
            "carol": None
        }
        gone = admin.admin.describe_user_scram_credentials(["carol"])["carol"]
    assert isinstance(gone, KafkaError) and gone.code == E.RESOURCE_NOT_FOUND
    assert "carol" not in _stored(cluster)
    assert not cluster.logs_in(1, "SCRAM-SHA-256", "carol", "second-pw")


def test_stored_keys_are_those_of_the_password(cluster: Cluster) -> None:
    """What the broker derives from the client's salted password is RFC 5802's StoredKey and ServerKey of the
    password, as scramp (the login's side) derives them; neither the password nor the salted password is kept."""
    salt = b"some-salt-bytes!"
    salted = salted_password("SCRAM-SHA-512", "keys-pw", salt, 4096)
    with cluster.admin() as admin:
        body = {"Upsertions": [{**_upsertion("dave", 2), "Salt": salt, "SaltedPassword": salted}]}
        assert _alter(admin, body) == {"dave": 0}
    entry = _stored(cluster)["dave"]["SCRAM-SHA-512"]
    _, stored_key, server_key, _ = scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
        "keys-pw", iteration_count=4096, salt=salt
    )
    assert entry == {
        "salt": base64.b64encode(salt).decode(),
        "stored_key": base64.b64encode(stored_key).decode(),
        "server_key": base64.b64encode(server_key).decode(),
        "iterations": 4096,
    }
    assert credential_from_salted_password("SCRAM-SHA-512", salt, salted, 4096).stored_key == stored_key
    text = cluster.credentials.read_text()
    assert "keys-pw" not in text and base64.b64encode(salted).decode() not in text


def test_a_principal_without_cluster_acls_is_refused_and_changes_nothing(cluster: Cluster) -> None:
    """User:alice holds no ACL: AlterUserScramCredentials answers CLUSTER_AUTHORIZATION_FAILED for every user of
    the request and stores nothing; DescribeUserScramCredentials and DescribeClientQuotas refuse the request."""
    with cluster.client(0, "PLAIN", "alice", "alice-secret") as alice:
        body = {"Upsertions": [_upsertion("mallory")], "Deletions": [{"Name": "dave", "Mechanism": 2}]}
        assert _alter(alice, body) == {
            "dave": E.CLUSTER_AUTHORIZATION_FAILED,
            "mallory": E.CLUSTER_AUTHORIZATION_FAILED,
        }
        with pytest.raises(KafkaError) as refused:
            alice.admin.describe_user_scram_credentials()
        assert refused.value.code == E.CLUSTER_AUTHORIZATION_FAILED
        _, quotas = alice.any_connection().request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"Components": []})
        assert quotas["ErrorCode"] == E.CLUSTER_AUTHORIZATION_FAILED
    assert "mallory" not in _stored(cluster)
    assert not cluster.logs_in(1, "SCRAM-SHA-256", "mallory", "pw")


def test_kafka_validation_per_user(cluster: Cluster) -> None:
    """ScramControlManager's rules, each failing only its user: the valid user of the same request is stored."""
    with cluster.admin() as admin:
        answer = _alter(
            admin,
            {
                "Upsertions": [
                    _upsertion("few", iterations=4095),
                    _upsertion("many", iterations=16385),
                    _upsertion("unknown-mech", mechanism=7),
                    _upsertion(""),
                    _upsertion("twice", 1),
                    _upsertion("twice", 2),  # a second mechanism of the same user in one request, as Kafka
                    _upsertion("caf\u00e9"),
                    _upsertion("erin", iterations=16384),
                ],
                "Deletions": [{"Name": "nobody", "Mechanism": 1}],
            },
        )
        assert answer == {
            "few": E.UNACCEPTABLE_CREDENTIAL,
            "many": E.UNACCEPTABLE_CREDENTIAL,
            "unknown-mech": E.UNSUPPORTED_SASL_MECHANISM,
            "": E.UNACCEPTABLE_CREDENTIAL,
            "twice": E.DUPLICATE_RESOURCE,
            "caf\u00e9": E.UNACCEPTABLE_CREDENTIAL,
            "erin": E.NONE,
            "nobody": E.RESOURCE_NOT_FOUND,
        }
        described = admin.admin.describe_user_scram_credentials(["erin", "few", "twice"])
        assert described["erin"] == {"SCRAM-SHA-256": 16384}
        assert all(isinstance(described[u], KafkaError) for u in ("few", "twice"))
        _, dup = admin.any_connection().request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"Users": [{"Name": "erin"}, {"Name": "erin"}]}
        )
        assert [(r["User"], r["ErrorCode"], r["CredentialInfos"]) for r in dup["Results"]] == [
            ("erin", E.DUPLICATE_RESOURCE, [])
        ]
    assert set(_stored(cluster)) >= {"erin"} and not set(_stored(cluster)) & {"few", "many", "twice", ""}


def test_no_secret_in_logs_or_answers(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """Everything the brokers log at DEBUG while a credential is set, described, used and refused names the
    user and mechanism, never the password, the salted password, the salt or the keys; the change is logged once
    at INFO with the principal that made it."""
    caplog.set_level(logging.DEBUG)
    password = "very-secret-pw-0451"
    with cluster.admin() as admin:
        answer = admin.admin.alter_user_scram_credentials([("frank", "SCRAM-SHA-512", 4096, password)])
        described = admin.admin.describe_user_scram_credentials()
    assert answer == {"frank": None} and described["frank"] == {"SCRAM-SHA-512": 4096}
    assert cluster.logs_in(1, "SCRAM-SHA-512", "frank", password)
    assert not cluster.logs_in(0, "SCRAM-SHA-512", "frank", password + "-wrong")
    entry = _stored(cluster)["frank"]["SCRAM-SHA-512"]
    salt = base64.b64decode(entry["salt"])
    salted = salted_password("SCRAM-SHA-512", password, salt, 4096)
    text = caplog.text + repr(described)
    keys = [base64.b64decode(entry[k]) for k in ("stored_key", "server_key")]
    # as bytes' repr, hex or base64: whichever way a log line would show them
    for raw in (salted, salt, *keys):
        for shown in (repr(raw)[2:-1], raw.hex(), base64.b64encode(raw).decode()):
            assert shown not in text, shown
    assert password not in text
    assert (
        "SCRAM credentials changed by User:admin: set frank (SCRAM-SHA-512, 4096 iterations)" in caplog.text
    )


def test_describe_client_quotas_answers_none_and_checks_the_filter(cluster: Cluster) -> None:
    """With no client quota set, a valid filter matches nothing; a filter Kafka refuses is refused."""
    with cluster.admin() as admin:
        conn = admin.any_connection()

        def ask(*components: tuple[str, int, str | None]) -> tuple[int, Any]:
            body = {"Components": [{"EntityType": t, "MatchType": m, "Match": n} for t, m, n in components]}
            _, answer = conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body)
            return answer["ErrorCode"], answer["Entries"]

        assert ask(("user", 0, "alice")) == (0, [])
        assert ask(("user", 2, None), ("client-id", 1, None)) == (0, [])
        assert ask(("user", 0, None))[0] == E.INVALID_REQUEST
        assert ask(("user", 1, "x"))[0] == E.INVALID_REQUEST
        assert ask(("user", 2, None), ("user", 1, None))[0] == E.INVALID_REQUEST
        assert ask(("ip", 2, None), ("user", 2, None))[0] == E.INVALID_REQUEST
        assert ask(("group", 2, None))[0] == E.UNSUPPORTED_VERSION


def _configs_tool(cluster: Cluster, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    from broker_runtime.cli import main

    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret";\n'
    )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(
                ["configs", "--bootstrap-server", cluster.sasl(0), "--command-config", str(props), *args]
            )
        except SystemExit as exc:
            status = int(exc.code or 0)
    return status, out.getvalue(), err.getvalue()


def test_pylog_configs_tool_manages_users(cluster: Cluster, tmp_path: Path) -> None:
    """``pylog-broker configs --entity-type users`` as kafka-configs: add, describe, login, delete; an iteration
    count below Kafka's minimum is refused before anything is sent, one above its maximum by the broker."""
    user = ("--entity-type", "users", "--entity-name", "gina")
    add = ("--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=gina-pw]")
    assert _configs_tool(cluster, tmp_path, *user, *add) == (
        0,
        "Completed updating config for user gina.\n",
        "",
    )
    status, out, _ = _configs_tool(cluster, tmp_path, "--entity-type", "users", "--describe")
    assert status == 0
    assert "SCRAM credential configs for user-principal 'gina' are SCRAM-SHA-256=iterations=8192\n" in out
    assert cluster.logs_in(1, "SCRAM-SHA-256", "gina", "gina-pw")
    status, _, err = _configs_tool(
        cluster, tmp_path, *user, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]"
    )
    assert (status, err) == (
        2,
        "pylog-broker configs: Iterations 1000 is less than the minimum 4096 required for SCRAM-SHA-256\n",
    )
    status, _, err = _configs_tool(
        cluster, tmp_path, *user, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]"
    )
    assert status == 1 and "UNACCEPTABLE_CREDENTIAL (93): Too many iterations: 20000 > 16384" in err, err
    assert cluster.logs_in(0, "SCRAM-SHA-256", "gina", "gina-pw")  # unchanged
    deleted = _configs_tool(cluster, tmp_path, *user, "--alter", "--delete-config", "SCRAM-SHA-256")
    assert deleted == (0, "Completed updating config for user gina.\n", "")
    assert _configs_tool(cluster, tmp_path, *user, "--describe") == (0, "", "")  # as kafka-configs
