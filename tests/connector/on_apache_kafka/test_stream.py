"""The streaming source against Apache Kafka (tests of test_stream_reader)."""

from __future__ import annotations

import pytest

from broker_runtime.client import KafkaClient
from tests.connector import (
    test_reader,
    test_stream_reader,
)
from tests.connector.on_apache_kafka.support import peer
from tests.support.apache_kafka import KafkaCluster

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------------- streaming source

test_concurrent_producers_every_record_once_in_order_and_rate_limited = peer(
    test_stream_reader.test_concurrent_producers_every_record_once_in_order_and_rate_limited,
    "streaming read: every record once, in order, maxOffsetsPerTrigger",
)
test_min_offsets_per_trigger_waits_for_enough_data_or_max_trigger_delay = peer(
    test_stream_reader.test_min_offsets_per_trigger_waits_for_enough_data_or_max_trigger_delay,
    "streaming read: minOffsetsPerTrigger and maxTriggerDelay",
)
test_available_now_stops_at_the_offsets_latest_at_start_while_data_arrives = peer(
    test_stream_reader.test_available_now_stops_at_the_offsets_latest_at_start_while_data_arrives,
    "streaming read: Trigger.AvailableNow",
)
test_restart_from_checkpoint_continues_exactly_and_trigger_once = peer(
    test_stream_reader.test_restart_from_checkpoint_continues_exactly_and_trigger_once,
    "streaming read: restart from the checkpoint, Trigger.Once",
)
test_read_committed_stream_stops_at_an_open_transaction_and_drops_aborted_ones = peer(
    test_stream_reader.test_read_committed_stream_stops_at_an_open_transaction_and_drops_aborted_ones,
    "streaming read: kafka.isolation.level=read_committed (open and aborted transactions)",
)


@pytest.fixture(scope="module")
def retention_broker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


class TimeRetention(test_stream_reader.Retention):
    """Retention on Apache Kafka, whose segments are 1 MiB at least: by time. Records 0..1999 carry a CreateTime
    of 2023 (each append of them rolls a segment, its first record being older than segment.ms), the rest the
    time they are written; once all are written the topic gets ``retention.ms`` of an hour, and the next
    retention check (every 200 ms on the shared node) deletes every segment of 2023 records: the log then starts
    at offset 2000."""

    def timestamp(self, i: int) -> int:
        return test_reader.T0 + i if i < 2000 else 0

    def start(self, address: str, topic: str) -> None:
        with KafkaClient(address) as client:
            client.admin.alter_configs(2, topic, {"retention.ms": "3600000"})  # 2: TOPIC


@pytest.fixture(scope="module")
def retention() -> test_stream_reader.Retention:
    return TimeRetention()


test_retention_between_batches_with_fail_on_data_loss_both_ways = peer(
    test_stream_reader.test_retention_between_batches_with_fail_on_data_loss_both_ways,
    "streaming read: failOnDataLoss true and false after retention deleted unread records",
)
