"""Apache Kafka's command-line tools against a secured pylog broker (a child process): one SASL_SSL listener
(PLAIN users ``admin`` and ``alice`` from the JAAS entry, the SCRAM-SHA-512 user ``scram512`` in the salted
credentials file, SCRAM-SHA-256 enabled for the users kafka-configs adds), Kafka's StandardAuthorizer with
``User:admin`` the super user.

Each tool logs in through ``--command-config`` / ``--command-property`` files holding Kafka's client settings
(PEM trust store of the test CA); pylog's own client, built from the same settings, reads back what pylog holds.
The tools run in the shared tool-runner JVM (``tests/support/apache_kafka/tool_runner.py``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import broker_log_dir, broker_process
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from broker_runtime.security.client_security import ClientSecurity
from broker_runtime.security.scram_credentials import credentials_path, upsert_user
from tests.security.certs import make_pki
from tests.support.apache_kafka.tool_runner import ToolRunner
from tests.support.secured import PLAIN_JAAS, SCRAM_USERS

pytestmark = pytest.mark.timeout(180)

SCRAM_USER = "scram512"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass
class Secured:
    bootstrap: str
    #: Kafka client settings of the super user (PLAIN) and of the SCRAM-SHA-512 user, as properties files.
    admin: Path
    user: Path
    #: Every secret of the broker's configuration (none may be printed).
    secrets: tuple[str, ...]

    def client(self, properties: Path) -> KafkaClient:
        props = dict(line.split("=", 1) for line in properties.read_text().splitlines() if "=" in line)
        return KafkaClient(self.bootstrap, security=ClientSecurity.from_properties(props))


def _client_properties(path: Path, ca: Path, mechanism: str, jaas: str) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config={jaas}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca}\n"
    )
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("pylog-secured-for-kafka-tools")
    pki = make_pki(data / "pki")
    mechanism, password = SCRAM_USERS[SCRAM_USER]
    logs = broker_log_dir(data)
    logs.mkdir(parents=True)
    upsert_user(credentials_path([str(logs)], None), SCRAM_USER, mechanism, password, iterations=4096)
    props = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": pki.key_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
    }
    admin = _client_properties(
        data / "admin.properties",
        pki.ca,
        "PLAIN",
        f'{_PLAIN_MODULE} required username="admin" password="admin-secret";',
    )
    user = _client_properties(
        data / "user.properties",
        pki.ca,
        mechanism,
        f'{_SCRAM_MODULE} required username="{SCRAM_USER}" password="{password}";',
    )
    with broker_process(data, overrides=props) as bootstrap:
        yield Secured(bootstrap, admin, user, ("admin-secret", "alice-secret", pki.key_password))


@pytest.fixture
def tools(apache_kafka_tool_runner: ToolRunner) -> ToolRunner:
    return apache_kafka_tool_runner


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _bindings(text: str) -> set[tuple[str, str, str, str]]:
    """(principal, host, operation, permissionType) of each binding kafka-acls prints."""
    found = re.findall(r"\(principal=(\S+), host=(\S+), operation=(\w+), permissionType=(\w+)\)", text)
    return set(found)


@pytest.mark.compat(
    "kafka-tools", "kafka-acls: add, list, remove on an authorizer-enabled pylog (SASL_SSL, PLAIN)"
)
@pytest.mark.compat("kafka-tools", "kafka-topics over SASL_SSL (PLAIN)")
@pytest.mark.compat(
    "kafka-tools", "kafka-console-producer and kafka-console-consumer over SASL_SSL (SCRAM-SHA-512)"
)
def test_kafka_acls_grant_and_revoke_what_the_console_tools_may_do(
    secured: Secured, tools: ToolRunner
) -> None:
    """The super user creates topics with kafka-topics and grants a SCRAM user WRITE and READ on one topic and
    READ on one group with kafka-acls; kafka-acls --list prints the bindings pylog stores (DescribeAcls through
    pylog's client agrees); the user's console producer writes to that topic and is refused on another, its
    console consumer reads the records back in the group; after kafka-acls --remove the user is refused."""
    topic, other, group = _name("acl"), _name("closed"), _name("aclg")
    as_admin = ("--bootstrap-server", secured.bootstrap, "--command-config", str(secured.admin))
    for name in (topic, other):
        created = tools.run("kafka-topics", *as_admin, "--create", "--topic", name, "--partitions", "1")
        assert created.stdout.strip() == f"Created topic {name}."
    principal = ("--allow-principal", f"User:{SCRAM_USER}")
    on_topic = (*principal, "--operation", "Write", "--operation", "Read", "--topic", topic)
    tools.run("kafka-acls", *as_admin, "--add", *on_topic)
    tools.run("kafka-acls", *as_admin, "--add", *principal, "--operation", "Read", "--group", group)
    granted = {(f"User:{SCRAM_USER}", "*", "WRITE", "ALLOW"), (f"User:{SCRAM_USER}", "*", "READ", "ALLOW")}
    listed = tools.run("kafka-acls", *as_admin, "--list", "--topic", topic).stdout
    assert (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`"
        in listed
    )
    assert _bindings(listed) == granted
    with secured.client(secured.admin) as client:
        described = client.admin.acl_request(
            29,  # DescribeAcls
            {
                "ResourceTypeFilter": 2,  # TOPIC
                "ResourceNameFilter": topic,
                "PatternTypeFilter": 3,  # LITERAL
                "PrincipalFilter": None,
                "HostFilter": None,
                "Operation": 1,  # ANY
                "PermissionType": 1,  # ANY
            },
        )
    assert described["ErrorCode"] == 0
    ((resource,),) = [described["Resources"]]
    assert {(a["Principal"], a["Host"], a["Operation"], a["PermissionType"]) for a in resource["Acls"]} == {
        (f"User:{SCRAM_USER}", "*", 4, 3),  # WRITE, ALLOW
        (f"User:{SCRAM_USER}", "*", 3, 3),  # READ, ALLOW
    }

    as_user = ("--bootstrap-server", secured.bootstrap)
    user_config = ("--command-config", str(secured.user))
    lines = [f"line-{i}" for i in range(5)]
    tools.run(
        "kafka-console-producer", *as_user, *user_config, "--topic", topic, input="\n".join(lines) + "\n"
    )
    refused = tools.run(
        "kafka-console-producer", *as_user, *user_config, "--topic", other, input="nope\n", check=False
    )
    assert (
        "TopicAuthorizationException" in refused.stderr or "Not authorized to access topics" in refused.stderr
    )
    with secured.client(secured.admin) as client:
        ends = client.list_offsets({(topic, 0): LATEST_TIMESTAMP, (other, 0): LATEST_TIMESTAMP})
    assert (ends[(topic, 0)][0], ends[(other, 0)][0]) == (5, 0)
    consumed = tools.run(
        "kafka-console-consumer",
        *as_user,
        *user_config,
        *("--topic", topic, "--group", group, "--from-beginning"),
        *("--max-messages", "5", "--timeout-ms", "30000"),
    )
    assert consumed.stdout.split() == lines
    with secured.client(secured.admin) as client:
        assert client.groups.committed_offsets(group) == {(topic, 0): 5}

    removed = tools.run("kafka-acls", *as_admin, "--remove", "--force", *on_topic)
    assert removed.returncode == 0
    assert _bindings(tools.run("kafka-acls", *as_admin, "--list", "--topic", topic).stdout) == set()
    again = tools.run(
        "kafka-console-producer", *as_user, *user_config, "--topic", topic, input="late\n", check=False
    )
    assert "TopicAuthorizationException" in again.stderr or "Not authorized to access topics" in again.stderr
    with secured.client(secured.admin) as client:
        assert client.list_offsets({(topic, 0): LATEST_TIMESTAMP})[(topic, 0)][0] == 5


def _configs(text: str) -> dict[str, tuple[str, str, str]]:
    found = re.findall(r"^  (\S+?)=(.*) sensitive=(true|false) synonyms=\{(.*)\}$", text, flags=re.M)
    return {name: (value, sensitive, synonyms) for name, value, sensitive, synonyms in found}


@pytest.mark.compat(
    "kafka-tools", "kafka-configs: sensitive broker configs shown as Kafka shows them (SASL_SSL)"
)
def test_kafka_configs_shows_sensitive_broker_configs_as_null(secured: Secured, tools: ToolRunner) -> None:
    """kafka-configs --describe --all of the broker, as the super user over SASL_SSL: password-type configs
    (the JAAS entry with the PLAIN users' passwords, the key's password) print as Kafka prints them --
    ``name=null sensitive=true`` with null synonyms -- and no secret appears anywhere in the tool's output; a
    user without DESCRIBE_CONFIGS on the cluster is refused."""
    as_admin = ("--bootstrap-server", secured.bootstrap, "--command-config", str(secured.admin))
    broker = ("--entity-type", "brokers", "--entity-name", "0")
    described = tools.run("kafka-configs", *as_admin, "--describe", *broker, "--all")
    configs = _configs(described.stdout)
    jaas = "listener.name.sasl_ssl.plain.sasl.jaas.config"
    assert configs[jaas] == ("null", "true", f"STATIC_BROKER_CONFIG:{jaas}=null")
    assert configs["ssl.key.password"] == ("null", "true", "STATIC_BROKER_CONFIG:ssl.key.password=null")
    assert configs["super.users"] == (
        "User:admin",
        "false",
        "STATIC_BROKER_CONFIG:super.users=User:admin, DEFAULT_CONFIG:super.users=",
    )
    for secret in secured.secrets:
        assert secret not in described.stdout + described.stderr
    refused = tools.run(
        "kafka-configs",
        *("--bootstrap-server", secured.bootstrap, "--command-config", str(secured.user)),
        *("--describe", *broker),
        check=False,
    )
    assert refused.returncode != 0
    assert "ClusterAuthorizationException" in refused.stdout + refused.stderr


@pytest.mark.compat(
    "kafka-tools",
    "kafka-configs: SCRAM users added, changed, described and deleted (--entity-type users, SASL_SSL)",
)
def test_kafka_configs_manages_scram_users_that_log_in_at_once(
    secured: Secured, tools: ToolRunner, tmp_path: Path
) -> None:
    """kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' as the super user:
    the user logs in at once (kafka-topics with its SCRAM settings), a changed password replaces the old one
    (refused from then on), --describe --entity-type users lists mechanism and iterations only, an iteration
    count above Kafka's maximum and an alteration by a user without ALTER on the cluster are refused,
    --delete-config removes the credential (describe lists nothing; no login). No password is printed by any
    of these runs."""
    user, first, second = (
        _name("scram"),
        "first-Pw-" + uuid.uuid4().hex[:6],
        "second-Pw-" + uuid.uuid4().hex[:6],
    )
    as_admin = ("--bootstrap-server", secured.bootstrap, "--command-config", str(secured.admin))
    entity = ("--entity-type", "users", "--entity-name", user)
    outputs: list[str] = []
    admin_settings = dict(
        line.split("=", 1) for line in secured.admin.read_text().splitlines() if "=" in line
    )
    ca = Path(admin_settings["ssl.truststore.location"])

    def configs(*args: str, config: tuple[str, ...] = as_admin, check: bool = True) -> str:
        done = tools.run("kafka-configs", *config, *args, check=check)
        outputs.append(done.stdout + done.stderr)
        return done.stdout + done.stderr

    def logs_in(password: str) -> bool:
        props = _client_properties(
            tmp_path / f"{password}.properties",
            ca,
            "SCRAM-SHA-256",
            f'{_SCRAM_MODULE} required username="{user}" password="{password}";',
        )
        listed = tools.run(
            "kafka-topics",
            "--bootstrap-server",
            secured.bootstrap,
            "--command-config",
            str(props),
            "--list",
            check=False,
        )
        assert listed.returncode == 0 or "SaslAuthenticationException" in listed.stdout + listed.stderr, (
            listed
        )
        return listed.returncode == 0

    added = configs("--alter", "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={first}]", *entity)
    assert added.strip() == f"Completed updating config for user {user}."
    assert logs_in(first)
    described = configs("--describe", "--entity-type", "users")
    assert (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192" in described
    )
    assert (
        f"SCRAM credential configs for user-principal '{SCRAM_USER}' are SCRAM-SHA-512=iterations=4096"
        in (described)
    )
    configs("--alter", "--add-config", f"SCRAM-SHA-256=[password={second}]", *entity)  # kafka-configs: 4096
    assert logs_in(second) and not logs_in(first)
    assert "are SCRAM-SHA-256=iterations=4096" in configs("--describe", *entity)
    too_many = configs(
        "--alter", "--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]", *entity, check=False
    )
    assert "UnacceptableCredentialException" in too_many and "Too many iterations" in too_many, too_many
    as_user = ("--bootstrap-server", secured.bootstrap, "--command-config", str(secured.user))
    refused = configs(
        "--alter", "--add-config", "SCRAM-SHA-256=[password=x]", *entity, config=as_user, check=False
    )
    assert "ClusterAuthorizationException" in refused, refused
    assert logs_in(second)
    assert configs("--alter", "--delete-config", "SCRAM-SHA-256", *entity).strip() == (
        f"Completed updating config for user {user}."
    )
    assert configs("--describe", *entity) == ""  # Kafka's tool lists no user without credentials
    assert not logs_in(second)
    for text in outputs:
        assert first not in text and second not in text
