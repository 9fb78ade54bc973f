"""``split_ranges`` against Spark's ``KafkaOffsetRangeCalculator`` arithmetic: parts per range rounded half up
(Scala's ``math.round``), ranges split also when there are exactly ``minPartitions`` of them, and
``maxRecordsPerPartition`` applied first."""

from __future__ import annotations

from spark_kafka_log.read.read_plan import split_ranges


def _sizes(ranges: list[tuple[str, int, int, int]]) -> list[tuple[int, int]]:
    return [(p, e - s) for _, p, s, e in ranges]


def test_parts_are_rounded_half_up_as_spark() -> None:
    # 2 partitions of 150 offsets, minPartitions=5: 150 / 300 * 5 = 2.5 parts each, Spark rounds to 3.
    got = split_ranges([("t", 0, 0, 150), ("t", 1, 0, 150)], 5, None)
    assert _sizes(got) == [(0, 50), (0, 50), (0, 50), (1, 50), (1, 50), (1, 50)]


def test_as_many_ranges_as_min_partitions_are_still_split_by_size() -> None:
    # Spark splits unless there are MORE ranges than minPartitions: sizes 10 and 90 with minPartitions=2 give
    # round(0.2)=0 -> 1 part and round(1.8)=2 parts.
    got = split_ranges([("t", 0, 0, 10), ("t", 1, 0, 90)], 2, None)
    assert _sizes(got) == [(0, 10), (1, 45), (1, 45)]
    assert split_ranges([("t", 0, 0, 10), ("t", 1, 0, 90), ("t", 2, 0, 5)], 2, None) == [
        ("t", 0, 0, 10),
        ("t", 1, 0, 90),
        ("t", 2, 0, 5),
    ]


def test_max_records_first_then_min_partitions() -> None:
    got = split_ranges([("t", 0, 0, 100), ("t", 1, 5, 5)], None, 30)
    assert _sizes(got) == [(0, 25), (0, 25), (0, 25), (0, 25)]  # the empty range dropped
