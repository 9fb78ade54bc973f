"""The unit of work of a read: one topic partition's offsets [start, end), planned on the driver, read on an executor.

Runs on: driver (planning); executors (task).

Where this runs: built on the **driver** by the read planner (:mod:`spark_kafka_log.read.read_plan`), pickled by
Spark to an **executor**, where :func:`spark_kafka_log.read.read_task.read_range` reads it. It carries everything the
task needs, the resolved broker address too: PySpark pickles the reader BEFORE it calls ``partitions()``, so
nothing set on the reader there reaches the executors except through the partitions. Immutable after
construction by convention (``value`` is a display name Spark shows).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

__all__ = ["PylogInputPartition"]


@dataclass
class PylogInputPartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic partition, plus the broker and its log dirs."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap: str
    log_dirs: tuple[str, ...]

    def __post_init__(self) -> None:
        self.value = f"{self.topic}-{self.partition}[{self.start},{self.end})"
