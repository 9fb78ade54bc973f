"""The connector against Apache Kafka: the tests it has against pylog's broker, run against the real thing.

Every test here IS a test of ``test_writer.py`` or ``test_reader.py`` (imported, not copied): this module only
gives them Apache Kafka's broker through the fixtures they take. ``broker`` and ``rbroker`` are the session's
Apache Kafka node (``apache_kafka``: one KRaft node with 3 partitions per auto-created topic and retention off,
as the pylog brokers of those modules); ``rbroker``'s log directory is that node's, so ``pylog.transport=local``
reads the files Apache Kafka wrote. The records are checked as in the original tests (confluent-kafka, or the
connector's own reader compared with what was sent). A test listed here is one whose behaviour should be the
same on both brokers; a difference found is fixed in the connector, never in the test.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.connector import test_reader, test_writer
from tests.support.apache_kafka import KafkaCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def broker(apache_kafka: KafkaCluster) -> str:
    return apache_kafka.bootstrap


@pytest.fixture(scope="module")
def rbroker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


# Writing: headers, timestamps and explicit partitions; every codec; acks 0/1/all; the batch read of what was
# written (the Fetch path over kafka.bootstrap.servers).
test_headers_timestamp_and_explicit_partition = test_writer.test_headers_timestamp_and_explicit_partition
test_each_codec_is_read_back_by_confluent_kafka = test_writer.test_each_codec_is_read_back_by_confluent_kafka
test_acks = test_writer.test_acks
test_keyed_rows_land_where_librdkafka_murmur2_puts_them = (
    test_writer.test_keyed_rows_land_where_librdkafka_murmur2_puts_them
)
test_written_rows_read_back_with_format_pylog = test_writer.test_written_rows_read_back_with_format_pylog
test_unknown_partition_fails_naming_topic_and_partition = (
    test_writer.test_unknown_partition_fails_naming_topic_and_partition
)

# Reading: by offsets, by timestamps, with pushdown, over Fetch and over Apache Kafka's own files.
test_confluent_kafka_round_trip_every_codec = test_reader.test_confluent_kafka_round_trip_every_codec
big_topic = test_reader.big_topic
ts_topic = test_reader.ts_topic
test_direct_scan_and_fetch_give_identical_dataframes = (
    test_reader.test_direct_scan_and_fetch_give_identical_dataframes
)
test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after = (
    test_reader.test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after
)
test_pushdown_same_rows_and_fewer_batches = test_reader.test_pushdown_same_rows_and_fewer_batches
test_round_trip_with_the_pylog_writer = test_reader.test_round_trip_with_the_pylog_writer

__all__: list[Any] = []
