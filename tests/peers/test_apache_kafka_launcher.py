"""The Apache Kafka peer's launcher (tests/support/apache_kafka): its failures are one clear line, and a 3-node
KRaft cluster starts, serves and stops cleanly.

The failure tests put fake ``java`` and ``mvn`` programs (shell scripts) first on PATH and point the cache at an
empty directory; they start no JVM.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient, NewTopic
from tests.support import apache_kafka
from tests.support.apache_kafka import KafkaCluster, PeerUnavailable, ensure_fetched, find_java


def _program(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A PATH holding only ``tmp_path/bin`` (the fake programs run /bin/sh by its path), no JAVA_HOME, and an
    empty cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv(apache_kafka.CACHE_ENV, str(tmp_path / "cache"))
    apache_kafka._checked_java.cache_clear()
    yield bin_dir
    apache_kafka._checked_java.cache_clear()


def _one_line(e: pytest.ExceptionInfo[PeerUnavailable]) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


def test_no_java_is_one_line_naming_the_fix(bare: Path) -> None:
    with pytest.raises(PeerUnavailable) as e:
        find_java()
    message = _one_line(e)
    assert "needs Java 17 or newer: no 'java' on PATH" in message
    assert "install a JDK 17+" in message and "JAVA_HOME" in message


def test_java_home_without_java(bare: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(PeerUnavailable) as e:
        find_java()
    assert f"JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java" in _one_line(e)


def test_java_older_than_17_is_refused(bare: Path) -> None:
    _program(bare, "java", "echo 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    with pytest.raises(PeerUnavailable) as e:
        find_java()
    message = _one_line(e)
    assert "needs Java 17 or newer" in message and "is Java '11.0.22'" in message


def test_java_8_style_version_is_refused(bare: Path) -> None:
    _program(bare, "java", "echo 'java version \"1.8.0_402\"' >&2\n")
    with pytest.raises(PeerUnavailable) as e:
        find_java()
    assert "is Java '1.8.0_402'" in _one_line(e)


def test_no_maven_with_an_empty_cache(bare: Path) -> None:
    with pytest.raises(PeerUnavailable) as e:
        ensure_fetched()
    message = _one_line(e)
    assert f"Apache Kafka {apache_kafka.kafka_version()} is not in" in message
    assert "no 'mvn' on PATH" in message and "apt-get install maven" in message


def test_a_failed_fetch_names_mavens_error_and_fetches_again_next_time(bare: Path, tmp_path: Path) -> None:
    _program(
        bare,
        "mvn",
        'echo "[INFO] Scanning for projects..."\n'
        'echo "[ERROR] Failed to execute goal on project apache-kafka-peer: Could not resolve dependencies"\n'
        'echo "[ERROR] -> [Help 1]"\nexit 1\n',
    )
    with pytest.raises(PeerUnavailable) as e:
        ensure_fetched()
    message = _one_line(e)
    assert "with Maven failed (exit 1): Failed to execute goal on project apache-kafka-peer" in message
    assert str(tmp_path / "cache" / "fetch.log") in message
    assert not (tmp_path / "cache" / "fetched").exists()
    # A Maven that succeeds (copies one jar) next time: the cache is complete and not fetched a third time.
    _program(bare, "mvn", f'/bin/mkdir -p "{tmp_path}/cache/libs" && : > "{tmp_path}/cache/libs/kafka.jar"\n')
    assert ensure_fetched() == tmp_path / "cache" / "libs"
    _program(bare, "mvn", "exit 1\n")
    assert ensure_fetched() == tmp_path / "cache" / "libs"


def test_a_fetch_cut_short_is_fetched_again(bare: Path, tmp_path: Path) -> None:
    """Jars without the ``fetched`` stamp (Maven killed mid-copy) are not trusted."""
    libs = tmp_path / "cache" / "libs"
    libs.mkdir(parents=True)
    (libs / "half.jar").touch()
    _program(bare, "mvn", 'echo "[ERROR] network is unreachable"\nexit 1\n')
    with pytest.raises(PeerUnavailable, match="network is unreachable"):
        ensure_fetched()
    assert not (libs / "half.jar").exists()


def test_the_cache_lives_outside_the_tree_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(apache_kafka.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    version = apache_kafka.kafka_version()
    assert version.startswith("4.")
    assert apache_kafka.cache_dir() == tmp_path / "xdg" / "pylog" / f"apache-kafka-{version}"


def test_a_three_node_cluster_serves_replicated_topics_and_stops(apache_kafka_cluster: KafkaCluster) -> None:
    """Three voters serve a topic replicated on all of them. Stopped one by one: a node stopping while the others
    keep the quorum ends cleanly on SIGTERM (exit 143, after Kafka's controlled shutdown ran in its shutdown
    hook); the last one, alone with no quorum, can never finish its controlled shutdown, so the cluster's stop
    kills it after QUORUM_LOST_GRACE_S, saying why, instead of waiting the whole STOP_TIMEOUT_S."""
    with KafkaClient(apache_kafka_cluster.bootstrap) as client:
        assert sorted(client.metadata().brokers) == [1, 2, 3]
        client.admin.create_topics([NewTopic("replicated", 3, 3)])
        assert client.partitions_for("replicated") == [0, 1, 2]  # the brokers learn of it a moment later
        partitions = client.metadata(["replicated"]).topics["replicated"].partitions
    assert {p: sorted(m.replicas) for p, m in partitions.items()} == {p: [1, 2, 3] for p in range(3)}
    assert len({m.leader for m in partitions.values()}) == 3  # Kafka spreads the leaders over the nodes
    first, second, last = apache_kafka_cluster.nodes
    pids = [node.pid for node in apache_kafka_cluster.nodes]
    first.stop()
    second.stop()
    assert [(n.killed, n.exit_code) for n in (first, second)] == [(False, 143)] * 2, (
        first.log_path,
        second.log_path,
    )
    started = time.monotonic()
    apache_kafka_cluster.stop()  # only the last node is left; the fixture's own stop then has nothing to do
    took = time.monotonic() - started
    assert last.killed and "2 of the 3 voters had stopped: no quorum left" in (last.killed_why or "")
    assert apache_kafka.QUORUM_LOST_GRACE_S <= took < apache_kafka.STOP_TIMEOUT_S, took
    for node, pid in zip(apache_kafka_cluster.nodes, pids, strict=True):
        assert pid is not None and not node.running and not os.path.exists(f"/proc/{pid}")
