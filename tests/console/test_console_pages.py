"""The console over plain HTTP: a secured broker (SASL/PLAIN, ACLs) read as a principal that may describe one topic
only (what it may not see is an error page naming the broker's error, never an empty page; its password never
appears), only GET served without --allow-writes, the security headers; with --allow-writes, delete records after
a confirmation, the cross-site request checks, and the broker's refusal of a principal without the right ACLs;
and the pure parts: the hanging-transaction rule, sensitive configs, byte rendering, times and the command
line's usage errors."""

from __future__ import annotations

import html
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.cli import main
from broker_runtime.client import ConfigEntry, KafkaClient
from broker_runtime.console import model, render
from broker_runtime.console.server import ConsoleServer, parse_time
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.security import ClientSecurity
from broker_runtime.security.acl import AclOperation, AclPermission, PatternType, ResourceType
from broker_runtime.tools.common import command_config_security
from tests.support.brokers import start_broker
from tests.support.console_forms import csrf_token, get, post

pytestmark = pytest.mark.timeout(60)

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE_PASSWORD = "alice-pw-do-not-show"
ADMIN_PASSWORD = "admin-pw-do-not-show"
KEYSTORE_PASSWORD = "keystore-pw-do-not-show"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_admin="{ADMIN_PASSWORD}" user_alice="{ALICE_PASSWORD}";'
)


def _security(user: str, password: str) -> ClientSecurity:
    return ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}";',
        }
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = start_broker(
        tmp_path_factory.mktemp("console-acl"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": STANDARD,
            "super.users": "User:admin;User:ANONYMOUS",
            "ssl.keystore.password": KEYSTORE_PASSWORD,
        },
    )
    bootstrap = broker.listener_bootstrap("SASL_PLAINTEXT")
    try:
        with KafkaClient(bootstrap, security=_security("admin", ADMIN_PASSWORD)) as admin:
            admin.admin.create_topics({"visible": (1, 1), "secret": (1, 1)})
            batch = RecordBatchBuilder()
            for i in range(5):
                batch.append(1_700_000_000_000 + i, None, f"v{i}".encode())
            admin.produce(
                admin.leader_for("visible", 0), {("visible", 0): batch.build()}, acks=-1, timeout_ms=10000
            )
            # alice may describe the topic "visible" and the group "alice-group" (not read or delete them)
            answer = admin.admin.acl_request(
                ApiKey.CREATE_ACLS,
                {
                    "Creations": [
                        {
                            "ResourceType": kind,
                            "ResourceName": name,
                            "ResourcePatternType": PatternType.LITERAL,
                            "Principal": "User:alice",
                            "Host": "*",
                            "Operation": AclOperation.DESCRIBE,
                            "PermissionType": AclPermission.ALLOW,
                        }
                        for kind, name in (
                            (ResourceType.TOPIC, "visible"),
                            (ResourceType.GROUP, "alice-group"),
                        )
                    ]
                },
            )
            assert all(r["ErrorCode"] == 0 for r in answer["Results"]), answer
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def alice_console(secured: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("alice") / "alice.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{ALICE_PASSWORD}";\n'
    )
    with ConsoleServer(secured, security=command_config_security(str(config))) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def admin_console(secured: str) -> Iterator[str]:
    with ConsoleServer(secured, security=_security("admin", ADMIN_PASSWORD)) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def admin_writes(secured: str) -> Iterator[str]:
    with ConsoleServer(secured, security=_security("admin", ADMIN_PASSWORD), allow_writes=True) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def alice_writes(secured: str) -> Iterator[str]:
    with ConsoleServer(secured, security=_security("alice", ALICE_PASSWORD), allow_writes=True) as server:
        yield server.url.rstrip("/")


_get = get


def test_a_principal_sees_what_it_may_describe_and_errors_for_the_rest(
    alice_console: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    pages = {}
    status, body, headers = _get(alice_console + "/topics")
    pages["topics"] = body
    assert status == 200 and ">visible<" in body and "secret" not in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, body, _ = _get(alice_console + "/topics/secret")
    pages["secret"] = body
    assert status == 403 and "TOPIC_AUTHORIZATION_FAILED" in body and 'id="error"' in body
    status, body, _ = _get(alice_console + "/topics/visible")
    pages["visible"] = body
    # The partitions are shown; the configs alice may not describe are an error, not an empty table.
    assert status == 200 and 'id="partitions"' in body
    assert 'id="configs-error"' in body and "TOPIC_AUTHORIZATION_FAILED" in body
    # DescribeLogDirs needs DESCRIBE on the cluster: the sizes are an error beside the partitions.
    assert 'id="sizes-error"' in body and "CLUSTER_AUTHORIZATION_FAILED" in body
    # DescribeCluster needs no ACL on Kafka's broker nor on pylog's: the cluster page is served to alice
    status, body, _ = _get(alice_console + "/")
    pages["cluster"] = body
    assert status == 200, body[-500:]
    status, body, _ = _get(alice_console + "/brokers/0")
    pages["broker"] = body
    assert status == 403 and "CLUSTER_AUTHORIZATION_FAILED" in body
    status, body, _ = _get(alice_console + "/groups/somebody-elses")
    pages["group"] = body
    assert status == 403 and "GROUP_AUTHORIZATION_FAILED" in body
    status, body, _ = _get(alice_console + "/transactions")
    pages["transactions"] = body
    assert (
        status == 200 and "describe producers of visible-0" in body and "TOPIC_AUTHORIZATION_FAILED" in body
    )
    for name, page in pages.items():
        assert ALICE_PASSWORD not in page, f"the password shows on the {name} page"
    assert ALICE_PASSWORD not in caplog.text


def test_secrets_never_appear_in_any_page(admin_console: str, caplog: pytest.LogCaptureFixture) -> None:
    """A super user reads every page, the broker's configs too: the keystore password and the JAAS config (its
    users' passwords) are configured on the broker, and DescribeConfigs marks them sensitive."""
    caplog.set_level(logging.DEBUG)
    status, cluster_page, _ = _get(admin_console + "/")
    assert status == 200 and "SASL_PLAINTEXT://127.0.0.1:" in cluster_page, cluster_page
    status, configs, _ = _get(admin_console + "/brokers/0")
    assert status == 200 and 'id="configs"' in configs
    for name in ("ssl.keystore.password", "listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        row = configs.split(f"<td>{name}</td>", 1)[1].split("</tr>", 1)[0]
        assert "[hidden: sensitive]" in row, (name, row)
    status, topic, _ = _get(admin_console + "/topics/visible")
    assert status == 200 and 'id="sizes-error"' not in topic
    status, missing, _ = _get(admin_console + "/brokers/7")
    assert status == 404 and "no broker 7" in missing
    pages = [cluster_page, configs, topic, missing]
    for path in ("/topics", "/topics/secret/0", "/groups", "/transactions"):
        status, body, _ = _get(admin_console + path)
        assert status == 200, (path, body)
        pages.append(body)
    for secret in (KEYSTORE_PASSWORD, ADMIN_PASSWORD, ALICE_PASSWORD):
        for page in pages:
            assert secret not in page
        assert secret not in caplog.text


def test_without_allow_writes_no_action_is_offered_and_every_post_is_refused(admin_console: str) -> None:
    status, page, _ = _get(admin_console + "/topics/visible")
    assert status == 200 and "delete-form" not in page and "csrf_token" not in page
    assert "Read-only: this console changes nothing" in page
    # a crafted POST (the action's own path and form, the console's origin) is a 403 naming the flag
    for path in ("/topics/visible/delete-records", "/groups/g/reset-offsets", "/topics"):
        status, body = post(admin_console + path, {"partition": 0, "before": 3, "confirm": "yes"})
        assert status == 403 and "--allow-writes" in body, (path, status)
    assert "<td>0</td>" in _partition_row(admin_console)  # log start offset unchanged
    for method in ("PUT", "DELETE"):
        status, _, _ = _get(admin_console + "/topics/visible", method)
        assert status == 405, method


def _partition_row(console: str) -> str:
    status, page, _ = _get(console + "/topics/visible")
    assert status == 200, page
    return page.split('id="partitions"', 1)[1].split("<tbody><tr>", 1)[1].split("</tr>", 1)[0]


def _log_start(console: str) -> int:
    cells = _partition_row(console).split("</td>")
    return int(cells[4].rsplit(">", 1)[1])


def test_delete_records_asks_for_confirmation_then_moves_the_log_start(
    admin_writes: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="broker_runtime.console")
    status, page, _ = _get(admin_writes + "/topics/visible")
    assert status == 200 and 'id="delete-form"' in page and 'id="writes-note"' in page
    token = csrf_token(page)
    url = admin_writes + "/topics/visible/delete-records"
    before = _log_start(admin_writes)
    status, confirm = post(url, {"csrf_token": token, "partition": 0, "before": before + 2})
    assert status == 200 and 'id="confirm-form"' in confirm, confirm[-600:]
    assert f"offsets {before} to {before + 1} (2 offsets)" in confirm
    assert _log_start(admin_writes) == before  # the first POST changed nothing
    assert 'name="confirm" value="yes"' in confirm and csrf_token(confirm) == token
    status, done = post(url, {"csrf_token": token, "partition": 0, "before": before + 2, "confirm": "yes"})
    assert status == 200 and f"is now {before + 2}" in done, done[-600:]
    assert _log_start(admin_writes) == before + 2
    audit = [r.getMessage() for r in caplog.records if "console action" in r.getMessage()]
    assert audit == [
        f"console action by User:admin (HTTP peer 127.0.0.1): delete records of visible-0 before {before + 2}: "
        f"done, log start offset {before + 2}"
    ], audit
    assert token not in caplog.text and ADMIN_PASSWORD not in caplog.text
    # past the high watermark: the confirmation warns, the broker refuses and its error is the page
    status, confirm = post(url, {"csrf_token": token, "partition": 0, "before": 99})
    assert status == 200 and 'id="delete-warning"' in confirm
    status, refused = post(url, {"csrf_token": token, "partition": 0, "before": 99, "confirm": "yes"})
    assert status == 502 and "OFFSET_OUT_OF_RANGE" in refused, refused[-600:]


def test_a_cross_site_post_is_refused(admin_writes: str) -> None:
    """The CSRF token (absent, wrong) and the origin (foreign, absent) are each checked before anything runs."""
    token = csrf_token(_get(admin_writes + "/topics/visible")[1])
    url = admin_writes + "/topics/visible/delete-records"
    before = _log_start(admin_writes)
    form = {"partition": 0, "before": before + 1, "confirm": "yes"}
    for fields, origin, why in (
        (form, "own", "no csrf_token"),
        ({**form, "csrf_token": token[:-2] + "xx"}, "own", "a wrong csrf_token"),
        ({**form, "csrf_token": token}, "http://evil.example", "origin 'http://evil.example'"),
        ({**form, "csrf_token": token}, "null", "origin 'null'"),
        ({**form, "csrf_token": token}, None, "no Origin nor Referer"),
    ):
        status, body = post(url, fields, origin=origin)
        assert status == 403 and why in html.unescape(body), (why, status, body[-400:])
        assert token not in body
    assert _log_start(admin_writes) == before


def test_the_brokers_authorization_decides(alice_writes: str) -> None:
    """alice may describe the topic and the group, not delete the records nor commit the group's offsets: the
    plans are shown, the broker refuses the actions and its error is the page."""
    page = _get(alice_writes + "/topics/visible")[1]
    token = csrf_token(page)
    url = alice_writes + "/topics/visible/delete-records"
    status, confirm = post(url, {"csrf_token": token, "partition": 0, "before": 3})
    assert status == 200 and 'id="confirm-form"' in confirm, confirm[-400:]
    status, refused = post(url, {"csrf_token": token, "partition": 0, "before": 3, "confirm": "yes"})
    assert status == 403 and "TOPIC_AUTHORIZATION_FAILED" in refused, refused[-400:]
    url = alice_writes + "/groups/alice-group/reset-offsets"
    status, confirm = post(url, {"csrf_token": token, "topic": "visible", "to": "earliest"})
    assert status == 200 and 'id="plan"' in confirm and "Dead" in confirm, confirm[-400:]
    fields = {"csrf_token": token, "topic": "visible", "to": "earliest", "plan": "0:0", "confirm": "yes"}
    status, refused = post(url, fields)
    assert status == 403 and "GROUP_AUTHORIZATION_FAILED" in refused, refused[-400:]
    assert ALICE_PASSWORD not in confirm + refused


def test_a_bad_query_is_a_400_naming_it(alice_console: str) -> None:
    status, body, _ = _get(alice_console + "/topics/visible/0?timestamp=yesterday")
    assert status == 400 and "timestamp=&#x27;yesterday&#x27;" in body
    # integers past int64, or past Python's digit limit, are a 400 too (never a 500 from int())
    for query, name in (
        ("?offset=" + "9" * 5000, "offset"),
        ("?timestamp=" + "9" * 5000, "timestamp"),
        ("?offset=9223372036854775808", "offset"),
        ("?max_bytes=-99999999999999999999", "max_bytes"),
    ):
        status, body, _ = _get(alice_console + "/topics/visible/0" + query)
        assert status == 400 and f"{name}=" in body, (query[:30], status)
    status, _, _ = _get(alice_console + "/topics/visible/99999999999999999999")
    assert status == 400


def test_a_request_for_another_host_name_is_refused(alice_console: str) -> None:
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 reaches the console with its own
    Host header; the console answers 421 before any Kafka call. Its own names (loopback) are served."""
    port = alice_console.rsplit(":", 1)[1].split("/")[0]
    status, body, _ = _get(alice_console + "/topics", host=f"evil.example:{port}")
    assert status == 421 and "visible" not in body
    assert _get(alice_console + "/topics", host=f"127.0.0.1:{port}")[0] == 200
    assert _get(alice_console + "/topics", host=f"localhost:{port}")[0] == 200
    assert _get(alice_console + "/topics", host="127.0.0.1:1")[0] == 421  # another port: another origin


@pytest.fixture(scope="module")
def wildcard_writes(secured: str) -> Iterator[str]:
    """A console on every address (0.0.0.0) with writes, reached as console.example: its URL on 127.0.0.1."""
    server = ConsoleServer(
        secured,
        security=_security("admin", ADMIN_PASSWORD),
        host="0.0.0.0",
        allow_writes=True,
        allowed_hosts=["Console.Example", "proxy.example:8443"],
    )
    with server:
        yield server.url.rstrip("/").replace("0.0.0.0", "127.0.0.1")


def test_a_wildcard_binding_serves_its_names_and_ip_literals_only(wildcard_writes: str) -> None:
    """DNS rebinding on 0.0.0.0: evil.example, pointed at this machine, neither reads the console (421) nor, with
    --allow-writes, posts to it as its own origin (Origin and Host both evil.example); the allowed names, the IP
    literal the connection arrived at and the loopback names (a loopback connection) are served."""
    port = wildcard_writes.rsplit(":", 1)[1]
    topics = wildcard_writes + "/topics/visible"
    status, body, _ = _get(topics, host=f"evil.example:{port}")
    assert status == 421 and "csrf_token" not in body and "--allowed-host" in html.unescape(body), status
    for host in (f"console.example:{port}", "proxy.example:8443", f"127.0.0.1:{port}", f"localhost:{port}"):
        assert _get(topics, host=host)[0] == 200, host
    for host in ("console.example:1", f"proxy.example:{port}", f"10.9.9.9:{port}", f"[fd00::5]:{port}"):
        assert _get(topics, host=host)[0] == 421, host  # another port; another machine's literal
    token = csrf_token(_get(topics)[1])
    before = _log_start(wildcard_writes)
    url = wildcard_writes + "/topics/visible/delete-records"
    form = {"csrf_token": token, "partition": 0, "before": before + 1, "confirm": "yes"}
    status, body = post(url, form, origin=f"http://evil.example:{port}", host=f"evil.example:{port}")
    assert status == 421, (status, body[-300:])
    assert _log_start(wildcard_writes) == before


def test_a_malformed_allowed_host_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("http://console.example", "console.example:http", "[not-ipv6]"):
        command = [
            "console",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--allowed-host",
            bad,
        ]
        assert main(command) == 2
        assert f"--allowed-host {bad!r}: expected a host name or IP literal" in capsys.readouterr().err


# --- the pure parts -------------------------------------------------------------------------------------------


def _txn(tid: str, partitions: list[tuple[str, int]], error: str | None = None) -> model.TxnRow:
    return model.TxnRow(tid, 7, 0, "Ongoing", 60000, 0, partitions, error)


def test_hanging_transactions_follow_kafkas_find_hanging_rule() -> None:
    now, limit = 10_000_000, 900_000
    old = {"ProducerId": 7, "LastTimestamp": now - limit - 1}
    young = {"ProducerId": 7, "LastTimestamp": now - limit}
    tp = ("t", 0)
    described = {"a": _txn("a", [("t", 0)])}
    assert not model.hanging((tp, young), now, limit, {}, {})  # not older than the bound: never a candidate
    assert model.hanging((tp, old), now, limit, {}, {})  # no transactional id lists the producer
    assert model.hanging((tp, old), now, limit, {7: "a"}, {})  # the coordinator does not know the id
    assert model.hanging((tp, old), now, limit, {7: "a"}, {"a": _txn("a", [], "TRANSACTIONAL_ID_NOT_FOUND")})
    assert not model.hanging((tp, old), now, limit, {7: "a"}, described)  # the coordinator includes it
    assert model.hanging((("t", 1), old), now, limit, {7: "a"}, described)  # ... but not this partition


def test_sensitive_configs_are_never_kept_nor_shown() -> None:
    leaked = ConfigEntry("ssl.key.password", "s3cret", 5, sensitive=True)
    row = model.config_row(leaked)
    assert row.value is None and row.sensitive
    page = render.topic_page(
        model.TopicDetail("t", [], [row, model.config_row(ConfigEntry("a", "1", 5))], None)
    )
    assert "s3cret" not in page and "[hidden: sensitive]" in page


def test_bytes_are_rendered_as_json_text_or_hex() -> None:
    assert model.render_bytes(None) == ("null", "null")
    assert model.render_bytes(b'{"a":1}') == ("json", '{\n  "a": 1\n}')
    assert model.render_bytes(b"plain words") == ("text", "plain words")
    assert model.render_bytes(b"\x00\x01") == ("hex", "00 01")
    assert model.render_bytes(b"\xff") == ("hex", "ff")
    assert model.render_bytes(b'{"a":1}', "hex") == ("hex", "7b 22 61 22 3a 31 7d")
    assert model.render_bytes(b"\xffx", "text") == ("text", "\ufffdx")


def test_times_are_ms_or_iso() -> None:
    assert parse_time("1700000000000") == 1700000000000
    assert parse_time("2023-11-14T22:13:20Z") == 1700000000000
    assert parse_time("2023-11-14T22:13:20") == 1700000000000  # UTC when no offset is named
    assert parse_time("2023-11-14T23:13:20+01:00") == 1700000000000


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["console", "--bootstrap-server", "127.0.0.1:1", "--listen", "nowhere"]) == 2
    assert "pylog-broker console: --listen 'nowhere': expected HOST:PORT" in capsys.readouterr().err
    # --allow-writes is an option of the command (the usage error is the address's, not an unknown argument)
    assert (
        main(["console", "--bootstrap-server", "127.0.0.1:1", "--listen", "nowhere", "--allow-writes"]) == 2
    )
    assert "expected HOST:PORT" in capsys.readouterr().err
    missing = tmp_path / "none.properties"
    assert main(["console", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(missing)]) == 2
    assert "cannot read --command-config" in capsys.readouterr().err


def test_a_write_whose_provenance_is_refused_commits_with_one_warning_and_a_count(
    secured: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice may not describe (nor create) ``__pylog_spark_writes``: the batch writer's commit returns normally,
    the driver logs ONE WARNING naming why and how to turn recording off, and every failure is counted;
    ``pylog.writeProvenance=false`` records nothing and counts nothing."""
    from spark_kafka_log.common import write_provenance
    from spark_kafka_log.common.commit_summary import PartitionStats, PylogCommitMessage
    from spark_kafka_log.common.writer_options import parse_writer_options
    from spark_kafka_log.write.writer import PylogBatchWriter

    monkeypatch.setattr(write_provenance, "_warned", False)
    caplog.set_level(logging.INFO, logger="spark_kafka_log.writer")
    given = {
        "kafka.bootstrap.servers": secured,
        "topic": "visible",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{ALICE_PASSWORD}";',
        "pylog.producerStateDir": str(tmp_path),
    }

    def commit(options: dict[str, str]) -> None:
        writer = PylogBatchWriter(parse_writer_options(options), None, secured)  # type: ignore[arg-type]
        stats = PartitionStats("visible", 0, records=3, bytes=120, first_offset=0, last_offset=2)
        message = PylogCommitMessage(writer.write_id, 0, 0, 3, 0, 120, 7, 0, 0.1, [stats])
        writer.commit([message])  # returns: the write committed whatever provenance does

    before = write_provenance.provenance_failures()
    commit(given)
    commit(given)
    assert write_provenance.provenance_failures() == before + 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "__pylog_spark_writes" in warnings[0] and "TOPIC_AUTHORIZATION_FAILED" in warnings[0], warnings
    assert "pylog.writeProvenance=false" in warnings[0] and ALICE_PASSWORD not in caplog.text
    commit({**given, "pylog.writeProvenance": "false"})
    assert write_provenance.provenance_failures() == before + 2
