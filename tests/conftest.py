"""Shared fixtures: brokers started on a free port under ``tmp_path`` and always stopped.

* ``broker``: an in-process :class:`~broker_runtime.server.broker.Broker` (its event loop in a background
  thread) -- fast, and the test can look at its logs directly;
* ``bootstrap``: that broker's ``"127.0.0.1:PORT"``;
* ``child_broker``: a broker in a child process via :func:`broker_runtime.launch.broker_process` (the
  console-script code path), yielding its bootstrap address.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The Apache Kafka peer's fixtures (apache_kafka, apache_kafka_cluster): tests/support/apache_kafka/.
pytest_plugins = ["tests.support.apache_kafka.fixtures"]

# Every JVM the suite starts (its Spark session and the Spark drivers of their own that crash tests start and
# SIGKILL) lives for seconds to minutes on 2 cores: the client compiler alone and the serial collector start
# it about 25% faster (measured: 7 vs 9 s to a session) and leave the cores to the brokers and Python workers.
# spark-submit adds SPARK_SUBMIT_OPTS to the driver JVM's options; the benchmark suite does not set it.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def _start_broker(tmp_path: Path, overrides: dict[str, str] | None = None) -> Any:
    from broker_runtime.server.broker import Broker
    from broker_runtime.server.config import BrokerConfig

    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "kafka-logs")}
    props.update(overrides or {})
    return Broker(BrokerConfig.from_properties(props)).start()


def _start_node_brokers(tmp_path: Path, props: dict[str, str], nodes: int = 2) -> list[Any]:
    """``nodes`` brokers in this process with ``props`` (which name their shared ``pylog.cluster.dir``), node
    ``n`` keeping its logs in ``tmp_path / f"n{n}"``."""
    from broker_runtime.server.broker import Broker
    from broker_runtime.server.config import BrokerConfig

    return [
        Broker(
            BrokerConfig.from_properties({**props, "node.id": str(n), "log.dirs": str(tmp_path / f"n{n}")})
        ).start()
        for n in range(nodes)
    ]


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    """Override in a test module to configure the ``broker`` fixture."""
    return {}


@pytest.fixture
def broker(tmp_path: Path, broker_overrides: dict[str, str]) -> Iterator[Any]:
    instance = _start_broker(tmp_path, broker_overrides)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap)


@pytest.fixture
def child_broker(tmp_path: Path, broker_overrides: dict[str, str]) -> Iterator[str]:
    from broker_runtime.launch import broker_process

    with broker_process(tmp_path / "child", overrides=broker_overrides) as address:
        yield address


@pytest.fixture(params=["compiled", "numpy"])
def record_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with each record walk of ``arrow_records`` (the C extension, then numpy); the compiled
    run is skipped, with its reason, when the extension is not built (``test_recordwalk`` fails then)."""
    from broker_runtime.protocol import arrow_records

    if request.param == "numpy":
        monkeypatch.setattr(arrow_records, "_cwalk", None)
    elif arrow_records._cwalk is None:
        pytest.skip(f"compiled record walk not in use: {arrow_records.record_walk()[1]}")
    return str(request.param)
