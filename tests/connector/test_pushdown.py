"""Filter pushdown, one operator at a time: the same rows with pushdown on and off, the rows the data says.

Two topics are written once for the module through ``format("pylog")``, each 3 partitions x 12 records:
``mono`` has timestamps growing with the offset, ``shuffled`` has them out of offset order. Every query is run
with ``spark.sql.python.filterPushdown.enabled`` true and false; both results must equal the rows computed in
Python from what was written, and the per-task read metrics (``pylog.metricsDir``) must show that a pushed
filter narrowed the offset ranges read to exactly what the planning promises (offset and partition filters:
the matching offsets; timestamp lower bounds: from the first offset whose timestamp satisfies the bound).
"""

from __future__ import annotations

import glob
import json
import operator
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.connector.test_reader import PUSHDOWN_CONF, pushdown

pytestmark = [pytest.mark.timeout(240)]

T0 = 1_700_000_000_000
PARTITIONS = 3
PER_PARTITION = 12
# Timestamp rank of each offset in the ``shuffled`` topic (a permutation of 0..11, not monotonic).
SHUFFLED = [5, 2, 9, 0, 7, 3, 11, 1, 8, 4, 10, 6]

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


@dataclass(frozen=True)
class Topic:
    name: str
    records: tuple[tuple[int, int, int], ...]  # (partition, offset, timestamp ms), as written

    def timestamp_at(self, offset: int) -> int:
        return next(ts for p, o, ts in self.records if p == 0 and o == offset)


def _timestamps(kind: str, partition: int) -> list[int]:
    ranks = range(PER_PARTITION) if kind == "mono" else SHUFFLED
    return [T0 + 100 * rank + partition for rank in ranks]


@pytest.fixture(scope="module")
def topics(spark: Any, broker: str) -> dict[str, Topic]:
    """``mono`` and ``shuffled``, written once: one Spark task, so offsets follow row order per partition.

    Their records carry 2023 timestamps, so the topics keep them forever (``retention.ms=-1``): with the default
    retention a broker check landing between the write and a read deleted them (DataLossError)."""
    from pyspark.sql import functions as F

    from broker_runtime.client import KafkaClient

    out = {}
    for kind in ("mono", "shuffled"):
        name = f"pushdown-{kind}-{uuid.uuid4().hex[:6]}"
        with KafkaClient(broker) as client:
            created = client.admin.create_topics({name: (PARTITIONS, 1)}, configs={"retention.ms": "-1"})
            assert created == {name: 0}, created
        records = tuple(
            (p, offset, ts) for p in range(PARTITIONS) for offset, ts in enumerate(_timestamps(kind, p))
        )
        rows = [(f"k{p}-{o}", f"v{p}-{o}", p, ts) for p, o, ts in records]
        df = spark.createDataFrame(rows, "key string, value string, partition int, ts long").coalesce(1)
        df.select("key", "value", "partition", F.timestamp_millis("ts").alias("timestamp")).write.format(
            "pylog"
        ).option("kafka.bootstrap.servers", broker).option("topic", name).mode("append").save()
        out[kind] = Topic(name, records)
    return out


def _read(
    spark: Any, broker: str, topic: Topic, where: str, enabled: bool, metrics: Path
) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """Rows (partition, offset, timestamp ms) matching ``where``, and offsets read per partition."""
    with pushdown(spark, enabled):
        assert spark.conf.get(PUSHDOWN_CONF) == ("true" if enabled else "false")
        df = (
            spark.read.format("pylog")
            .option("kafka.bootstrap.servers", broker)
            .option("subscribe", topic.name)
            .option("pylog.metricsDir", str(metrics))
            .load()
            .where(where)
        )
        rows = sorted(
            (r.partition, r.offset, r.ts)
            for r in df.selectExpr("partition", "offset", "unix_millis(timestamp) AS ts").collect()
        )
    read: dict[int, int] = {}
    for path in glob.glob(str(metrics / "read-*.json")):
        m = json.loads(Path(path).read_text())
        read[m["partition"]] = read.get(m["partition"], 0) + m["end"] - m["start"]
    return rows, {p: n for p, n in read.items() if n}


def _check(
    spark: Any,
    broker: str,
    topic: Topic,
    tmp_path: Path,
    where: str,
    matches: Callable[[int, int, int], bool],
    pushed_read: Callable[[int, list[tuple[int, int]]], int],
) -> None:
    """``where`` gives the rows ``matches`` picks, pushed or not; pushed, each partition reads ``pushed_read``.

    ``pushed_read(partition, [(offset, timestamp), ...])`` is how many offsets the pushed plan reads there.
    """
    expected = sorted(r for r in topic.records if matches(*r))
    by_partition = {p: [(o, ts) for q, o, ts in topic.records if q == p] for p in range(PARTITIONS)}
    everything = {p: len(records) for p, records in by_partition.items()}
    narrowed = {p: n for p, records in by_partition.items() if (n := pushed_read(p, records))}
    for enabled, read_expected in ((True, narrowed), (False, everything)):
        rows, read = _read(spark, broker, topic, where, enabled, tmp_path / f"pushdown-{enabled}")
        assert rows == expected, (where, enabled)
        assert read == read_expected, (where, enabled)


def _exact(matches: Callable[[int, int, int], bool]) -> Callable[[int, list[tuple[int, int]]], int]:
    """Filters applied exactly by the plan: a partition reads exactly the offsets that match."""
    return lambda p, records: sum(matches(p, o, ts) for o, ts in records)


@pytest.mark.parametrize("value", [0, 5, PER_PARTITION - 1])
@pytest.mark.parametrize("op", list(OPS))
def test_offset_comparison(
    spark: Any, broker: str, topics: dict[str, Topic], tmp_path: Path, op: str, value: int
) -> None:
    """``offset <op> n`` alone returns exactly the offsets the operator selects, and reads only those."""

    def matches(p: int, o: int, ts: int) -> bool:
        return OPS[op](o, value)

    _check(spark, broker, topics["mono"], tmp_path, f"offset {op} {value}", matches, _exact(matches))


@pytest.mark.parametrize("op", list(OPS))
def test_partition_comparison(
    spark: Any, broker: str, topics: dict[str, Topic], tmp_path: Path, op: str
) -> None:
    """``partition <op> 1`` alone returns the partitions the operator selects; ``=`` reads only partition 1."""

    def matches(p: int, o: int, ts: int) -> bool:
        return OPS[op](p, 1)

    # Only partition = n (and IN) are pushed; range comparisons on partition are left to Spark.
    plan = _exact(matches) if op == "=" else _exact(lambda p, o, ts: True)
    _check(spark, broker, topics["mono"], tmp_path, f"partition {op} 1", matches, plan)


@pytest.mark.parametrize(
    ("column", "values"), [("offset", (0, 3, PER_PARTITION - 1)), ("partition", (0, 2)), ("offset", (4,))]
)
def test_in(
    spark: Any, broker: str, topics: dict[str, Topic], tmp_path: Path, column: str, values: tuple[int, ...]
) -> None:
    """``column IN (...)`` alone returns the rows whose value is listed, pushed or not."""
    index = {"partition": 0, "offset": 1}[column]

    def matches(p: int, o: int, ts: int) -> bool:
        return (p, o, ts)[index] in values

    # Spark turns a one-element IN into =, which is pushed for both columns; IN is pushed for partition only.
    pushed = column == "partition" or len(values) == 1
    plan = _exact(matches) if pushed else _exact(lambda p, o, ts: True)
    where = f"{column} IN ({', '.join(map(str, values))})"
    _check(spark, broker, topics["mono"], tmp_path, where, matches, plan)


@pytest.mark.parametrize("offset", [0, 5, PER_PARTITION - 1])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kind", ["mono", "shuffled"])
def test_timestamp_comparison_with_a_bound_equal_to_a_record(
    spark: Any, broker: str, topics: dict[str, Topic], tmp_path: Path, kind: str, op: str, offset: int
) -> None:
    """``timestamp <op> t`` with t the timestamp of partition 0's record at ``offset``: no matching row lost.

    Lower bounds (=, >=, >) start each partition at its first offset whose timestamp satisfies the bound
    (everything before it is older); upper bounds read everything, since timestamps need not grow.
    """
    topic = topics[kind]
    bound = topic.timestamp_at(offset)

    def matches(p: int, o: int, ts: int) -> bool:
        return OPS[op](ts, bound)

    def plan(p: int, records: list[tuple[int, int]]) -> int:
        if op in ("<", "<="):
            return len(records)
        lower = operator.gt if op == ">" else operator.ge
        first = next((o for o, ts in records if lower(ts, bound)), len(records))
        return len(records) - first

    where = f"timestamp {op} TIMESTAMP_MILLIS({bound})"
    _check(spark, broker, topic, tmp_path, where, matches, plan)
