"""Fixtures giving the connector's tests Apache Kafka's broker (they override those of the pylog modules' own
fixtures of the same names) and Kafka's judge (see the package docstring)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from jobs.bench.sink_chaos import ChaosOutcome, OrderKey, outcome
from tests.connector import (
    test_writer_transactional,
)
from tests.connector.on_apache_kafka.support import CONTROL_KEY, kafka_read_committed
from tests.support.apache_kafka import KafkaCluster

# --------------------------------------------------------------------------------------------- the brokers


@pytest.fixture(scope="module")
def broker(apache_kafka: KafkaCluster) -> str:
    return apache_kafka.bootstrap


@pytest.fixture(scope="module")
def rbroker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


@pytest.fixture(scope="module")
def sbroker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


@pytest.fixture(scope="module")
def txn_broker(apache_kafka: KafkaCluster) -> str:
    return apache_kafka.bootstrap


@pytest.fixture(scope="module")
def control_topic(broker: str, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A topic holding 30 committed records (a transactional write of the connector, key :data:`CONTROL_KEY`):
    Kafka's judge reads it beside the topic under test, so that "nothing visible" means the consumer did read
    and found nothing, not that it stopped before its first fetch."""
    topic = f"control-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 30, 1, 1).selectExpr(f"'{CONTROL_KEY}' as key", "cast(id as string) as value")
    test_writer_transactional._write(df, broker, topic, tmp_path_factory.mktemp("control"))
    return topic


@pytest.fixture(scope="module")
def read_committed(control_topic: str) -> Callable[[str, str], list[bytes]]:
    """test_writer_transactional's judge: Kafka's Java consumer with read_committed."""

    def read(bootstrap: str, topic: str) -> list[bytes]:
        records, control = kafka_read_committed(bootstrap, topic, control_topic)
        assert control == 30, f"Kafka's consumer returned {control} of the 30 control records"
        return [value.encode() for _, _, _, value in records]

    return read


@pytest.fixture(scope="module")
def chaos_judge(control_topic: str) -> Callable[..., ChaosOutcome]:
    """test_stream_exactly_once's judge: Kafka's Java consumer with read_committed."""

    def judge(
        bootstrap: str, topic: str, partitions: int, total: int, *, order_key: OrderKey
    ) -> ChaosOutcome:
        records, control = kafka_read_committed(bootstrap, topic, control_topic)
        assert control == 30, f"Kafka's consumer returned {control} of the 30 control records"
        per_partition: dict[int, list[tuple[int, bytes, int]]] = defaultdict(list)
        for partition, offset, key, value in records:
            assert partition < partitions
            per_partition[partition].append((offset, key.encode(), int(value)))
        return outcome(per_partition, total, order_key=order_key)

    return judge
