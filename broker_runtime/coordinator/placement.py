"""Which partition of a coordinator's internal topic holds a key: Kafka's ``Utils.abs(key.hashCode) % n``.

Used by both coordinators (``__transaction_state`` by transactional id, ``__consumer_offsets`` by group id) so a
Kafka tool computes the same partition. Pure functions: thread-safe.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
