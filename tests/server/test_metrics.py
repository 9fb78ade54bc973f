"""The broker's Prometheus endpoint, scraped with a real HTTP GET and parsed by prometheus-client's own parser.

Counters move by exactly what a produce and a fetch carried (batch bytes and record counts known up front);
gauges match the log; the endpoint is off unless ``pylog.metrics.listener`` is set.
"""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_runtime.errors import ConfigError
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.node.broker import Broker
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, fetch_body, produce_body

pytestmark = pytest.mark.timeout(60)

PRODUCE, FETCH, CREATE = 0, 1, 19


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {"pylog.metrics.listener": "127.0.0.1:0"}


def scrape(broker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one GET /metrics, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def delta(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_counters_move_by_what_a_produce_and_a_fetch_carried(broker: Any) -> None:
    batches = [build_batch(7, value_size=50 + 10 * i) for i in range(3)]
    sizes = [len(b) for b in batches]
    with RawConnection(broker.bootstrap) as conn:
        assert conn.call(CREATE, 5, create_topic_body("m", 1, 1, {}))["Topics"][0]["ErrorCode"] == 0
        before = scrape(broker)
        for batch in batches:
            part = conn.call(PRODUCE, 9, produce_body("m", 0, batch, 1))["Responses"][0]
            assert part["PartitionResponses"][0]["ErrorCode"] == 0
        fetched = conn.call(FETCH, 12, fetch_body("m", 0, 0))
        assert len(fetched["Responses"][0]["Partitions"][0]["Records"]) == sum(sizes)
        after = scrape(broker)

    assert delta(before, after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m") == sum(sizes)
    assert delta(before, after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 21
    assert delta(before, after, "kafka_server_brokertopicmetrics_bytesout_total", topic="m") == sum(sizes)
    assert (
        delta(before, after, "kafka_network_requestmetrics_requests_total", request="Produce", version="9")
        == 3
    )
    assert (
        delta(before, after, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE")
        == 3
    )
    assert (
        delta(
            before,
            after,
            "kafka_network_requestmetrics_requests_total",
            request="FetchConsumer",
            version="12",
        )
        == 1
    )
    for histogram in (
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "responsequeuetimems",
        "totaltimems",
    ):
        name = f"kafka_network_requestmetrics_{histogram}_count"
        assert delta(before, after, name, request="Produce") == 3, histogram
    # Gauges, read from the log at scrape time.
    assert after[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", "m")))] == 21
    assert after[("kafka_log_log_logstartoffset", (("partition", "0"), ("topic", "m")))] == 0
    assert after[("kafka_log_log_size", (("partition", "0"), ("topic", "m")))] == sum(sizes)
    assert after[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert after[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] >= 1
    assert (
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        (("delayedOperation", "Produce"),),
    ) in after


def test_errors_are_counted_per_api_and_error_code(broker: Any) -> None:
    with RawConnection(broker.bootstrap) as conn:
        before = scrape(broker)
        part = conn.call(PRODUCE, 9, produce_body("nope", 0, build_batch(2), 1))["Responses"][0]
        assert part["PartitionResponses"][0]["ErrorCode"] != 0
        after = scrape(broker)
    assert (
        delta(
            before,
            after,
            "kafka_network_requestmetrics_errors_total",
            request="Produce",
            error="UNKNOWN_TOPIC_OR_PARTITION",
        )
        == 1
    )
    assert delta(before, after, "kafka_server_brokertopicmetrics_bytesin_total", topic="nope") == 0


def test_endpoint_is_off_by_default(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})
    assert config.metrics_listener is None
    with Broker(config) as broker:
        assert broker.metrics_address is None
        assert broker.ctx is not None and broker.ctx.metrics is None


def test_metrics_listener_values() -> None:
    assert BrokerConfig.from_properties({"pylog.metrics.listener": "9404"}).metrics_listener == (
        "127.0.0.1",
        9404,
    )
    assert BrokerConfig.from_properties({"pylog.metrics.listener": "0.0.0.0:1"}).metrics_listener == (
        "0.0.0.0",
        1,
    )
    with pytest.raises(ConfigError, match=r"pylog\.metrics\.listener='x:y'"):
        BrokerConfig.from_properties({"pylog.metrics.listener": "x:y"})


def test_recovery_cuts_are_counted(tmp_path: Path) -> None:
    from broker_runtime.storage.config import LogConfig
    from broker_runtime.storage.log_manager import LogManager

    logs = tmp_path / "logs"
    manager = LogManager([logs], LogConfig())
    manager.startup()
    manager.create_log("r", 0)
    manager.close_without_shutdown()  # a crash: the next start recovers the active segment
    with open(logs / "r-0" / f"{0:020d}.log", "ab") as f:
        f.write(b"\x00" * 30)
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(logs),
        "pylog.metrics.listener": "127.0.0.1:0",
    }
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        samples = scrape(broker)
    finally:
        broker.stop()
    assert samples[("pylog_log_recovery_truncations_total", ())] == 1
    assert samples[("pylog_log_recovery_dropped_bytes_total", ())] == 30


def test_the_record_walk_in_use_is_a_metric_and_the_numpy_walk_a_start_warning(
    tmp_path: Path, record_walk: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="broker_runtime.server.node.broker")
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "pylog.metrics.listener": "127.0.0.1:0",
    }
    with Broker(BrokerConfig.from_properties(props)) as broker:
        samples = scrape(broker)
    assert samples[("pylog_record_walk_compiled", ())] == (record_walk == "compiled")
    warnings = [r.getMessage() for r in caplog.records if "record walk" in r.getMessage()]
    if record_walk == "compiled":
        assert warnings == []
    else:
        assert len(warnings) == 1 and "numpy record walk" in warnings[0], warnings
        assert "pylog_record_walk_compiled" in warnings[0]
