"""Options parsing: Spark's Kafka names, defaults, case-insensitive keys, errors naming option and allowed values."""

from __future__ import annotations

import os

import pytest

from broker_runtime.errors import ConfigError
from spark_kafka_log.common.writer_options import parse_writer_options


def test_defaults_are_the_java_producer_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYLOG_DATA_DIR", raising=False)
    o = parse_writer_options({"topic": "t"})
    assert o.bootstrap_servers is None and o.embedded
    assert (o.acks, o.compression, o.batch_size, o.linger_ms) == (-1, 0, 1048576, 5)
    assert (o.max_request_size, o.request_timeout_ms, o.delivery_timeout_ms) == (1048576, 30000, 120000)
    assert (o.retries, o.retry_backoff_ms, o.max_in_flight, o.buffer_memory) == (2**31 - 1, 100, 5, 33554432)
    assert o.enable_idempotence is True and o.partitioner == "murmur2"
    assert o.data_dir == os.path.abspath("pylog-data")


def test_keys_are_case_insensitive_and_values_parsed() -> None:
    o = parse_writer_options(
        {
            "Kafka.Bootstrap.Servers": "h1:9092,h2:9093",
            "TOPIC": "events",
            "kafka.ACKS": "1",
            "kafka.compression.type": "LZ4",
            "kafka.batch.size": "65536",
            "kafka.linger.ms": "0",
            "kafka.max.in.flight.requests.per.connection": "3",
        }
    )
    assert o.bootstrap_servers == "h1:9092,h2:9093" and o.topic == "events"
    assert o.acks == 1 and o.compression == 3 and o.batch_size == 65536 and o.linger_ms == 0
    # acks=1 conflicts with the DEFAULT idempotence, which then yields (Java client 3.2+ behaviour).
    assert o.enable_idempotence is False and o.max_in_flight == 3


@pytest.mark.parametrize("acks, expected", [("all", -1), ("-1", -1), ("0", 0), ("1", 1)])
def test_acks_values(acks: str, expected: int) -> None:
    assert parse_writer_options({"kafka.acks": acks}).acks == expected


@pytest.mark.parametrize(
    "options, fragments",
    [
        ({"kafka.acks": "2"}, ["kafka.acks", "0, 1, -1, all"]),
        ({"kafka.compression.type": "brotli"}, ["kafka.compression.type", "gzip", "zstd"]),
        ({"kafka.batch.size": "big"}, ["kafka.batch.size", "not an integer"]),
        ({"kafka.batch.size": "0"}, ["kafka.batch.size", "out of range"]),
        ({"kafka.linger.ms": "-1"}, ["kafka.linger.ms", "out of range"]),
        ({"kafka.enable.idempotence": "yes"}, ["kafka.enable.idempotence", "true, false"]),
        ({"kafka.partitioner": "roundrobin"}, ["kafka.partitioner", "murmur2"]),
        ({"kafka.ack": "1"}, ["kafka.ack", "kafka.acks"]),
        ({"pylog.datadirectory": "x"}, ["pylog.datadirectory", "pylog.dataDir"]),
        ({"kafka.bootstrap.servers": "localhost"}, ["kafka.bootstrap.servers", "host:port"]),
        ({"topic": " "}, ["topic"]),
        (
            {"kafka.enable.idempotence": "true", "kafka.acks": "1"},
            ["kafka.enable.idempotence", "kafka.acks must be all"],
        ),
        (
            {"kafka.enable.idempotence": "true", "kafka.max.in.flight.requests.per.connection": "6"},
            ["kafka.enable.idempotence", "<= 5"],
        ),
    ],
)
def test_bad_values_name_the_option_and_the_allowed_values(
    options: dict[str, str], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_writer_options(options)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_data_dir_from_option_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    monkeypatch.setenv("PYLOG_DATA_DIR", str(tmp_path))
    assert parse_writer_options({}).data_dir == str(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert parse_writer_options({"pylog.dataDir": "rel"}).data_dir == os.path.join(str(tmp_path), "rel")


def test_idempotence_off_keeps_other_acks() -> None:
    o = parse_writer_options({"kafka.enable.idempotence": "false", "kafka.acks": "0"})
    assert o.enable_idempotence is False and o.acks == 0
