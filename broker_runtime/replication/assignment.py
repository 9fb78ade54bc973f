"""Replica assignment for new topics: Kafka's rack-unaware round-robin (``assignReplicasToBrokersRackUnaware``).

For brokers ``b[0..n-1]`` (sorted ids), partition ``p`` gets its first replica (the preferred leader) at index
``(p + start_index) % n``; the other replicas follow at a shift from it: replica ``j`` (0-based among the
followers) sits at ``(first + 1 + (shift + j) % (n - 1)) % n``. The shift starts at ``replica_shift`` and grows
by one each time ``p`` wraps around the broker list, so followers of consecutive rounds land on different
brokers. Kafka draws ``start_index`` and ``replica_shift`` at random per topic; pylog fixes both (default 0)
so that an assignment is reproducible from the broker list alone.

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker_runtime.errors import InvalidArgumentError

__all__ = ["assign_replicas"]


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    replica_shift: int = 0,
) -> list[list[int]]:
    """Replica lists (preferred leader first) for ``partitions`` partitions over ``brokers``.

    Raises ValueError when the arguments cannot be satisfied (the caller maps it to a Kafka error).
    """
    ids = sorted(brokers)
    n = len(ids)
    if partitions <= 0:
        raise InvalidArgumentError(f"number of partitions must be larger than 0, got {partitions}")
    if replication_factor <= 0:
        raise InvalidArgumentError(f"replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > n:
        raise InvalidArgumentError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    result: list[list[int]] = []
    shift = replica_shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        result.append(replicas)
    return result
