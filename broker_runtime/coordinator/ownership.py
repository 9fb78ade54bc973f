"""Which partitions of a coordinator's internal topic this node coordinates, and at which epoch (Kafka's
``CoordinatorRuntime`` load and unload of a shard, ``onElection`` / ``onResignation`` of the coordinators).

Both coordinators keep their state in the partitions of an internal topic (the group coordinator in
``__consumer_offsets`` by group id, the transaction coordinator in ``__transaction_state`` by transactional id,
``abs(key.hashCode) % partitions`` from :mod:`.placement`) and serve only the keys of the partitions this node
leads. :class:`PartitionOwnership` is that bookkeeping, written once:

* **Load** (:meth:`PartitionOwnership.become_leader`): the partition is unloaded first if it was owned (at an
  older epoch), its records are replayed from the local replica (``shard.replay``: its whole log, since as leader
  every record in it will be committed), it is owned at the leader epoch, then ``shard.loaded`` finishes what
  the replay found (a group's fresh session timers, a transaction's markers re-sent) and says how many keys the
  partition holds. A single node leads every partition at epoch 0 (:meth:`PartitionOwnership.load_all`): it is
  a cluster of one, with the same code paths.
* **Unload** (:meth:`PartitionOwnership.resign`): the partition is no longer owned and ``shard.unloaded``
  drops its keys (waiting answers get NOT_COORDINATOR).
* **Requests** (:meth:`PartitionOwnership.owner_error`): NONE for a key of an owned partition, else
  NOT_COORDINATOR; the client rediscovers the coordinator.
* **Writes** (:meth:`PartitionOwnership.appended`, :meth:`PartitionOwnership.take_appended`): the partitions a
  request appended to, which its handler waits to see replicated before it answers.

Invariant: ``owned`` maps a partition to the leader epoch it was loaded at; a partition is in it only between
its load and its unload, and only once its replay is complete (loading is synchronous).

Thread-safety: event-loop thread only, as the coordinators that own an instance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from broker_runtime.errors import ErrorCode

__all__ = ["CoordinatorShard", "PartitionOwnership"]

_log = logging.getLogger(__name__)


class CoordinatorShard(Protocol):
    """The coordinator's side of loading and unloading one partition of its internal topic."""

    def replay(self, partition: int, /) -> None:
        """Apply every record of the partition's local replica to the in-memory state."""

    def loaded(self, partition: int, /) -> int:
        """The partition is owned now: finish what its replay found; returns the number of keys it holds."""

    def unloaded(self, partition: int, /) -> int:
        """The partition is no longer owned: drop its keys; returns how many were dropped."""


class PartitionOwnership:
    """See the module docstring. ``keys`` names what a partition holds in the log lines ("group(s)")."""

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        partition_for: Callable[[str], int],
        shard: CoordinatorShard,
        keys: str,
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.partition_for = partition_for
        self._shard = shard
        self._keys = keys
        #: Partitions this node leads -> the leader epoch they were loaded at.
        self._owned: dict[int, int] = {}
        #: Partitions appended to since the last :meth:`take_appended`.
        self._appended: set[int] = set()

    # -- requests ------------------------------------------------------------------------------------------

    def owner_error(self, key: str) -> ErrorCode:
        """NONE when this node coordinates ``key``, else NOT_COORDINATOR."""
        return ErrorCode.NONE if self.partition_for(key) in self._owned else ErrorCode.NOT_COORDINATOR

    def epoch_of(self, partition: int) -> int:
        """The leader epoch ``partition`` was loaded at, -1 when it is not owned."""
        return self._owned.get(partition, -1)

    def owns(self, partition: int, epoch: int) -> bool:
        """``partition`` is owned, at ``epoch``."""
        return self._owned.get(partition) == epoch

    @property
    def owned(self) -> dict[int, int]:
        """A copy of partition -> leader epoch."""
        return dict(self._owned)

    # -- load and unload -----------------------------------------------------------------------------------

    def load_all(self) -> int:
        """A single node: lead every partition at epoch 0 (see the module docstring); returns the number of
        keys loaded."""
        loaded = sum(self._load(partition, 0) for partition in range(self.num_partitions))
        if loaded:
            _log.info("coordinator of every %s partition: %d %s loaded", self.topic, loaded, self._keys)
        return loaded

    def become_leader(self, partition: int, epoch: int) -> int:
        """This node now leads ``partition`` at ``epoch``: load it; returns the number of keys loaded."""
        loaded = self._load(partition, epoch)
        _log.info(
            "now coordinator of %s-%d (leader epoch %d): %d %s loaded",
            self.topic,
            partition,
            epoch,
            loaded,
            self._keys,
        )
        return loaded

    def _load(self, partition: int, epoch: int) -> int:
        self.resign(partition)
        self._shard.replay(partition)
        self._owned[partition] = epoch
        return self._shard.loaded(partition)

    def resign(self, partition: int) -> None:
        """This node no longer leads ``partition``: unload it (nothing happens when it was not owned)."""
        was = self._owned.pop(partition, None)
        if was is None:
            return
        dropped = self._shard.unloaded(partition)
        _log.info(
            "no longer coordinator of %s-%d (leader epoch %d): %d %s unloaded",
            self.topic,
            partition,
            was,
            dropped,
            self._keys,
        )

    # -- writes --------------------------------------------------------------------------------------------

    def appended(self, partition: int) -> None:
        """A request appended to ``partition``."""
        self._appended.add(partition)

    def take_appended(self) -> set[int]:
        """The partitions appended to since the last call (the handler waits until they are replicated before
        it answers)."""
        appended, self._appended = self._appended, set()
        return appended
