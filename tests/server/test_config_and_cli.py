"""BrokerConfig parsing, the CLI (``python -m broker_runtime start``) and the embedded child-process start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker_runtime.errors import ConfigError, ErrorCode, KafkaError
from broker_runtime.launch import broker_process, create_topic
from broker_runtime.server.config import BrokerConfig, read_properties
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "b.properties"
    f.write_text(
        "# comment\nnode.id = 3\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=a,b\n"
        "num.partitions: 4\nmystery.key=1\nlog.segment.bytes=1048576\nmessage.max.bytes=\\\n 2000\n"
    )
    cfg = BrokerConfig.from_file(f, ["num.partitions=6", "auto.create.topics.enable=false"])
    assert (cfg.node_id, cfg.listener.port, cfg.log_dirs, cfg.num_partitions) == (3, 0, ("a", "b"), 6)
    assert cfg.auto_create_topics_enable is False and cfg.log.max_message_bytes == 2000
    assert cfg.warnings == ("unknown config key 'mystery.key' is ignored",)
    assert read_properties(f)["log.segment.bytes"] == "1048576"


def test_a_kafka_key_pylog_does_not_act_on_is_named_when_set_away_from_its_default() -> None:
    """Accepted so that a Kafka server.properties loads, but never silent: a value other than the default (which
    pylog would ignore) draws a start-up warning; the default itself, or the key left out, draws none."""
    quiet = BrokerConfig.from_properties(
        {"num.recovery.threads.per.data.dir": "2", "log.message.format.version": "3.0-IV1"}
    )
    assert quiet.warnings == ()
    loud = BrokerConfig.from_properties(
        {"num.recovery.threads.per.data.dir": "8", "log.initial.task.delay.ms": "0"}
    )
    assert loud.warnings == (
        "config key 'log.initial.task.delay.ms' is set but has no effect in pylog: "
        "pylog's storage tasks start at their first interval",
        "config key 'num.recovery.threads.per.data.dir' is set but has no effect in pylog: "
        "pylog recovers on one thread",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("node.id", "x"),
        ("num.partitions", "0"),
        ("listeners", "SSL://h:1"),
        ("listeners", "PLAINTEXT://h:99999"),
        ("auto.create.topics.enable", "yes"),
        ("compression.type", "brotli"),
        ("group.consumer.heartbeat.interval.ms", "45000"),  # not below group.consumer.session.timeout.ms
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig.from_properties({key: value})


def test_cli_start_prints_listening_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    conf = tmp_path / "b.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\nstrange.key=1\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker_runtime",
            "start",
            "--config",
            str(conf),
            "--override",
            "num.partitions=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        assert port > 0
        create_topic(f"127.0.0.1:{port}", "cli", 2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "unknown config key 'strange.key'" in err
    assert (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "logs" / "cli-1").is_dir()


def test_cli_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "b.properties"
    conf.write_text("num.partitions=many\n")
    proc = subprocess.run(
        [sys.executable, "-m", "broker_runtime", "start", "--config", str(conf)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "num.partitions" in proc.stderr and proc.stdout == ""


def test_embedded_broker_restarts_with_its_data(tmp_path: Path) -> None:
    with broker_process(tmp_path) as bootstrap:
        create_topic(bootstrap, "keep", 3, {"retention.ms": "60000"})
    with broker_process(tmp_path) as bootstrap:
        with pytest.raises(KafkaError) as info:
            create_topic(bootstrap, "keep", 3)
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        create_topic(bootstrap, "keep", 3, exist_ok=True)
    assert not any(p.name.startswith("broker") and p.suffix == ".pid" for p in tmp_path.iterdir())
    assert os.path.isdir(tmp_path / "logs" / "keep-2")


def test_cli_recover_all_validates_a_cleanly_stopped_log(tmp_path: Path) -> None:
    """``--recover-all`` recovers every segment even after a clean shutdown, and says so at WARNING."""
    logs = tmp_path / "logs"
    conf = tmp_path / "b.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={logs}\n")
    manager = LogManager([logs], LogConfig())
    manager.startup()
    manager.create_log("r", 0)
    manager.shutdown()  # clean: the marker is written
    segment = logs / "r-0" / f"{0:020d}.log"
    with open(segment, "ab") as f:
        f.write(b"\x00" * 30)  # trailing garbage a clean start would never look at
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_runtime", "start", "--config", str(conf), "--recover-all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("listening on 127.0.0.1:")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "full recovery requested" in err
    assert (
        "r-0: recovery truncated segment 00000000000000000000.log at byte 0, offset 0: 30 byte(s) dropped"
        in err
    )
    assert segment.stat().st_size == 0
