"""pytest fixtures of the Apache Kafka peer (registered by the root conftest through ``pytest_plugins``).

* ``apache_kafka`` (session): ONE Apache Kafka node (broker and controller) shared by the whole test run;
  topics it auto-creates get 3 partitions (as the connector tests' pylog brokers), and its retention is off
  (tests write records with old timestamps). Tests use unique topic names and must not change the node.
* ``apache_kafka_cluster`` (module): three such nodes, every one a KRaft voter, started once per test module
  that asks for it.
* ``apache_kafka_tools`` (session): no node, only the release's jars and a Java to run them, for tests that run
  Kafka's tools or Java clients (:func:`~tests.support.apache_kafka.run_tool`) against another broker.
* ``apache_kafka_tool_runner`` (session): a :class:`~tests.support.apache_kafka.tool_runner.ToolRunner`, one
  JVM that runs many tools in turn (one JVM start per test process instead of one per tool run).

The first two yield a started :class:`~tests.support.apache_kafka.KafkaCluster` (``.bootstrap``, ``.nodes``).
When Java 17+, Maven or the fetch of the release is missing, each fixture FAILS with one line saying what and how
to fix it (see :class:`~tests.support.apache_kafka.PeerUnavailable`); it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apache_kafka import KafkaCluster, PeerUnavailable, ensure_fetched, find_java
from tests.support.apache_kafka.tool_runner import ToolRunner

#: Broker configs of the shared single node (Kafka's names).
SINGLE_NODE_PROPS = {"num.partitions": "3", "log.retention.ms": "-1"}


def _started(base: Path, size: int, props: dict[str, str]) -> KafkaCluster:
    try:
        return KafkaCluster(base, size, props).start()
    except PeerUnavailable as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)  # outside the except: the one line, without the exception chain


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _started(tmp_path_factory.mktemp("apache-kafka"), 1, SINGLE_NODE_PROPS)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def apache_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _started(tmp_path_factory.mktemp("apache-kafka-cluster"), 3, {"num.partitions": "3"})
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def apache_kafka_tools() -> Path:
    try:
        find_java()
        return ensure_fetched()
    except PeerUnavailable as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def apache_kafka_tool_runner() -> Iterator[ToolRunner]:
    try:
        runner = ToolRunner()
    except PeerUnavailable as e:
        problem = str(e)
    else:
        try:
            yield runner
        finally:
            runner.close()
        return
    pytest.fail(problem, pytrace=False)
