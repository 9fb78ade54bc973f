"""``split_ranges`` against Spark's ``KafkaOffsetRangeCalculator`` arithmetic: parts per range rounded half up
(Scala's ``math.round``), no split once there are ``minPartitions`` ranges or more, ranges whose share rounds
to one part left whole and out of the proportion (Spark's "unsplit" ranges), and ``maxRecordsPerPartition``
applied first."""

from __future__ import annotations

from spark_kafka_log.read.read_plan import split_ranges


def _sizes(ranges: list[tuple[str, int, int, int]]) -> list[tuple[int, int]]:
    return [(p, e - s) for _, p, s, e in ranges]


def test_parts_are_rounded_half_up_as_spark() -> None:
    # 2 partitions of 150 offsets, minPartitions=5: 150 / 300 * 5 = 2.5 parts each, Spark rounds to 3.
    got = split_ranges([("t", 0, 0, 150), ("t", 1, 0, 150)], 5, None)
    assert _sizes(got) == [(0, 50), (0, 50), (0, 50), (1, 50), (1, 50), (1, 50)]


def test_no_split_once_there_are_min_partitions_ranges() -> None:
    # Spark splits only when there are FEWER ranges than minPartitions (offsetRanges.size >= minPartitions: none)
    ranges = [("t", 0, 0, 10), ("t", 1, 0, 90)]
    assert split_ranges(ranges, 2, None) == ranges
    assert split_ranges([*ranges, ("t", 2, 0, 5)], 2, None) == [*ranges, ("t", 2, 0, 5)]


def test_small_ranges_stay_whole_and_out_of_the_proportion() -> None:
    # sizes 1, 1, 1, 97 and minPartitions=10: the three small ranges round to one part each and stay whole; the
    # big one gets round(97 / 97 * (10 - 3)) = 7 parts: 10 tasks, as Spark (13 without the refinement)
    got = split_ranges([("t", 0, 0, 1), ("t", 1, 0, 1), ("t", 2, 0, 1), ("t", 3, 0, 97)], 10, None)
    assert len(got) == 10 and _sizes(got)[:3] == [(0, 1), (1, 1), (2, 1)]
    assert [n for p, n in _sizes(got) if p == 3] == [13, 14, 14, 14, 14, 14, 14]


def test_max_records_first_then_min_partitions() -> None:
    got = split_ranges([("t", 0, 0, 100), ("t", 1, 5, 5)], None, 30)
    assert _sizes(got) == [(0, 25), (0, 25), (0, 25), (0, 25)]  # the empty range dropped
