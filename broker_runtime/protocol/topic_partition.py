"""One partition of one topic, the key of nearly every per-partition map in pylog (Kafka's ``TopicPartition``).

A plain ``(topic name, partition index)`` tuple: hashable, ordered (topics by name, then partitions by index,
which is the order answers and logs list them in), and as cheap as a key can be on the hot paths. This module
is the one home of the name; every package imports it from here.
"""

from __future__ import annotations

__all__ = ["TopicPartition"]

TopicPartition = tuple[str, int]
