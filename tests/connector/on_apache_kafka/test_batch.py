"""Batch writes and reads of the connector against Apache Kafka (tests of test_writer and test_reader)."""

from __future__ import annotations

import pytest

from tests.connector import (
    test_reader,
    test_writer,
)
from tests.connector.on_apache_kafka.support import peer

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------------- batch writes

test_headers_timestamp_and_explicit_partition = peer(
    test_writer.test_headers_timestamp_and_explicit_partition,
    "batch write: headers, CreateTime timestamps, explicit partitions",
)
test_acks = peer(test_writer.test_acks, "batch write: acks 0, 1, all (idempotent by default)")
test_unknown_partition_fails_naming_topic_and_partition = peer(
    test_writer.test_unknown_partition_fails_naming_topic_and_partition,
    "batch write: a partition the topic lacks fails naming it",
)
test_each_codec_is_read_back_by_confluent_kafka = peer(
    test_writer.test_each_codec_is_read_back_by_confluent_kafka,
    "batch write: every codec (none, gzip, snappy, lz4, zstd)",
)
test_keyed_rows_land_where_librdkafka_murmur2_puts_them = peer(
    test_writer.test_keyed_rows_land_where_librdkafka_murmur2_puts_them,
    "batch write: keyed rows placed by murmur2 as Kafka's producers place them",
)
test_written_rows_read_back_with_format_pylog = peer(
    test_writer.test_written_rows_read_back_with_format_pylog,
    "batch read of what the connector wrote (Fetch)",
)

# --------------------------------------------------------------------------------------------- batch reads

ts_topic = test_reader.ts_topic
big_topic = test_reader.big_topic
test_confluent_kafka_round_trip_every_codec = peer(
    test_reader.test_confluent_kafka_round_trip_every_codec,
    "batch read: every codec, by Fetch and by scanning Kafka's segment files (pylog.transport=local)",
)
test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after = peer(
    test_reader.test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after,
    "batch read by timestamps (ListOffsets on Kafka's time index)",
)
test_pushdown_same_rows_and_fewer_batches = peer(
    test_reader.test_pushdown_same_rows_and_fewer_batches,
    "batch read with pushdown of partition, offset and timestamp filters (the Fetch path)",
)
# test_reader.test_direct_scan_and_fetch_give_identical_dataframes cannot run as it is: it needs several
# segments of 64 KiB, and Apache Kafka 4.x refuses a segment.bytes under 1 MiB.
