"""Replication state of one partition on this broker: leader or follower, the ISR, the high watermark
(Kafka's ``Partition`` + ``ReplicaState``).

Leader side::

    follower fetch(offset = follower LEO) --> update_follower_fetch_state --> maybe expand ISR
                                                                          --> maybe increment HW
    every replica.lag.time.max.ms / 2     --> maybe_shrink_isr            --> maybe increment HW
    acks=-1 produce                       --> check_min_isr (before append), then the DelayedProduce asks
                                              check_enough_replicas_reach_offset(lastOffset + 1)

* high watermark = min log end offset over the ISR (the leader's own LEO included); it never moves back, and
  it does not move while the ISR is smaller than the effective minimum (KAFKA-15583), so nothing written while
  too few replicas are in sync becomes visible;
* the effective minimum ISR is ``min(min.insync.replicas, replication factor)``, as Kafka's
  ``Partition.effectiveMinIsr``: a topic whose replication factor is below ``min.insync.replicas`` can still take
  acks=-1 writes once all its replicas are in sync;
* a follower is *caught up* at a fetch when its fetch offset reaches the leader's LEO of that moment, or the
  leader's LEO of its previous fetch (it consumed everything that existed then); ``last_caught_up_ms``
  records when. A follower leaves the ISR when ``now - last_caught_up_ms > replica.lag.time.max.ms`` and its
  LEO is below the leader's (an idle follower that fetched everything stays in);
* a follower joins the ISR when its LEO reaches the high watermark and the start offset of the leader's
  current epoch, and it is not fenced (``isr_eligible``);
* ISR changes go through ``alter_isr`` (the cluster metadata store), and the in-memory ISR changes only when
  that call accepted it (Kafka's AlterPartition);
* :meth:`Partition.check_enough_replicas_reach_offset`: (False, NONE) while HW < required; once HW >= required,
  (True, NONE) if the ISR still has ``min.insync.replicas`` members, else (True,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND); a non-leader answers (False, NOT_LEADER_OR_FOLLOWER).

Leader epochs (KIP-101/279/320/595): a leader records (its epoch, its LEO) in the leader-epoch cache when it
takes an epoch, and the log stamps that epoch into every batch it appends. Every request naming a
CurrentLeaderEpoch is checked first (:meth:`Partition.check_leader_epoch`: older -> FENCED_LEADER_EPOCH, newer
-> UNKNOWN_LEADER_EPOCH, then NOT_LEADER_OR_FOLLOWER on a non-leader). A fetch carrying the fetcher's
LastFetchedEpoch is checked against the cache before anything is read (:meth:`Partition.validate_fetch`): if the
leader's records of that epoch end below the fetch offset, or the leader never had that epoch, the answer is
the leader's (epoch, end offset) as DivergingEpoch and the follower truncates
(:meth:`Partition.truncation_offset`, :meth:`Partition.truncate_to`), repeating until the logs agree.

Follower side: :meth:`Partition.append_as_follower` checks every fetched batch's header and CRC-32C first (a
corrupt one raises :class:`~broker_runtime.errors.CorruptRecordError` and nothing of that fetch is appended),
then appends the leader's batches with their own offsets and
epochs (recording new epochs in the leader-epoch cache; the log records their producers in its producer
state, so this replica recognises retried idempotent batches once it leads), then the high watermark becomes
``min(own LEO, leader's HW)``. A follower whose log end fell below the leader's log start (retention ran on
the leader meanwhile) empties its log and its epoch cache and restarts at the leader's log start
(:meth:`Partition.truncate_fully_and_start_at`). The high watermark of a replicated partition is managed here, so the log's
``hw_follows_leo`` is switched off (single-replica partitions keep it: HW = LEO).

Thread-safety: event-loop thread, except the ``*_off_loop`` truncations, which run the whole truncation (log
and epoch cache) on a worker thread while the calling coroutine (the fetcher) waits. One lock per partition
(``_storage_lock``) keeps the log end offset and the epoch cache consistent: the truncation holds it, and the
role changes and follower appends (the other writers of the epoch cache) take it, so a role change that arrives
during a truncation waits for it, as it waited before on the loop. Readers of the epoch cache (leader-side fetch
validation) run only while the partition leads, never during a follower truncation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable

from broker_runtime.errors import CorruptRecordError, ErrorCode
from broker_runtime.protocol.batch_header import compute_crc, iter_batch_spans
from broker_runtime.protocol.records import Buffer
from broker_runtime.replication.epoch_cache import LeaderEpochCache
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["AlterIsr", "Partition", "ReplicaState"]

_log = logging.getLogger(__name__)

#: ``alter_isr(topic, partition, new_isr, leader_epoch) -> accepted``: persists an ISR change (Kafka's
#: AlterPartition), refused when ``leader_epoch`` is no longer the partition's.
AlterIsr = Callable[[str, int, list[int], int], bool]


class ReplicaState:
    """What the leader knows about one follower, from its fetches."""

    __slots__ = ("last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "log_end_offset", "node_id")

    def __init__(self, node_id: int, now_ms: int, in_sync: bool) -> None:
        self.node_id = node_id
        #: The follower's log end offset (its last fetch offset); -1 until it fetched.
        self.log_end_offset = -1
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0

    def update_fetch_state(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= max_lag_ms

    def __repr__(self) -> str:
        return f"ReplicaState({self.node_id}, leo={self.log_end_offset}, caught_up={self.last_caught_up_ms})"


class Partition:
    """Leader/follower state of one hosted partition; see the module docstring."""

    def __init__(
        self, topic: str, partition: int, log: PartitionLog, local_id: int, alter_isr: AlterIsr
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.local_id = local_id
        self._alter_isr = alter_isr
        self.replicas: list[int] = [local_id]
        self.leader_id = -1
        self.leader_epoch = -1
        self.isr: frozenset[int] = frozenset()
        self.remote: dict[int, ReplicaState] = {}
        self.epoch_cache = LeaderEpochCache(log.dir, log.dir_failure)
        #: Held while the log and the epoch cache change together: by a truncation (on a worker thread, see
        #: :meth:`truncate_to_off_loop`) and by the role changes and follower appends that assign epochs, so
        #: neither reads a log end offset the other is about to change.
        self._storage_lock = threading.RLock()
        #: Whether a replica may join the ISR (False while the controller has it fenced, as Kafka's leader checks
        #: its metadata before AlterPartition); set by the owner, every replica by default.
        self.isr_eligible: Callable[[int], bool] = lambda replica: True
        #: Start offset of the current leader epoch on this leader (followers must reach it to join the ISR).
        self.leader_epoch_start_offset = -1

    # -- roles ----------------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def replicated(self) -> bool:
        return len(self.replicas) > 1

    def make_leader(self, replicas: Iterable[int], isr: Iterable[int], epoch: int, now_ms: int) -> None:
        with self._storage_lock:
            self._make_leader(replicas, isr, epoch, now_ms)

    def _make_leader(self, replicas: Iterable[int], isr: Iterable[int], epoch: int, now_ms: int) -> None:
        """Become (or stay) the leader of ``epoch`` with the given replica list and ISR."""
        replicas = list(replicas)
        new_isr = frozenset(isr) | {self.local_id}
        first_time = not self.is_leader or epoch != self.leader_epoch
        self.replicas = replicas
        self.leader_id = self.local_id
        self.log.hw_follows_leo = not self.replicated
        if first_time:
            self.leader_epoch = epoch
            self.isr = new_isr
            self.remote = {r: ReplicaState(r, now_ms, r in new_isr) for r in replicas if r != self.local_id}
            self._seed_epoch_cache()
            latest = self.epoch_cache.latest_epoch
            if epoch < latest:
                _log.warning(
                    "%s-%d: leader in epoch %d, but this log already holds epoch %d: the metadata's leader "
                    "epoch went backwards, so followers cannot tell this leader's new records from older "
                    "ones at the same offsets (divergence checks are unreliable for this partition)",
                    self.topic,
                    self.partition,
                    epoch,
                    latest,
                )
            self.epoch_cache.assign(epoch, self.log.log_end_offset)
            start = self.epoch_cache.start_offset_of(epoch)
            self.leader_epoch_start_offset = self.log.log_end_offset if start is None else start
            _log.info(
                "%s-%d: leader in epoch %d, replicas %s, ISR %s, LEO %d, HW %d",
                self.topic,
                self.partition,
                epoch,
                replicas,
                sorted(new_isr),
                self.log.log_end_offset,
                self.log.high_watermark,
            )
        else:
            for r in replicas:
                if r != self.local_id and r not in self.remote:
                    self.remote[r] = ReplicaState(r, now_ms, False)
            if new_isr != self.isr:
                # The controller changed the ISR (it fenced a follower): the metadata is the truth. This
                # leader's own changes reach memory only after the metadata accepted them, so they agree.
                _log.info(
                    "%s-%d: ISR %s -> %s (from the cluster metadata)",
                    self.topic,
                    self.partition,
                    sorted(self.isr),
                    sorted(new_isr),
                )
                self.isr = new_isr
        self.maybe_increment_hw()

    def make_follower(self, replicas: Iterable[int], leader_id: int, epoch: int, isr: Iterable[int]) -> bool:
        """Follow ``leader_id`` in ``epoch``; True when the leader or epoch changed (the fetcher must move)."""
        with self._storage_lock:
            return self._make_follower(replicas, leader_id, epoch, isr)

    def _make_follower(self, replicas: Iterable[int], leader_id: int, epoch: int, isr: Iterable[int]) -> bool:
        changed = leader_id != self.leader_id or epoch != self.leader_epoch
        self.replicas = list(replicas)
        self.leader_id = leader_id
        self.leader_epoch = epoch
        self.isr = frozenset(isr)
        self.remote = {}
        self.log.hw_follows_leo = False
        if changed:
            self._seed_epoch_cache()
            _log.info(
                "%s-%d: follower of node %d in epoch %d, LEO %d, HW %d",
                self.topic,
                self.partition,
                leader_id,
                epoch,
                self.log.log_end_offset,
                self.log.high_watermark,
            )
        return changed

    def _seed_epoch_cache(self) -> None:
        """An empty cache over a non-empty log learns the epoch of the first batch (as log recovery would)."""
        if self.epoch_cache.entries or self.log.log_end_offset <= self.log.log_start_offset:
            return
        try:
            data = self.log.read(self.log.log_start_offset, 1, min_one_batch=True)
        except Exception:  # an unreadable log is reported by its reads; the cache simply stays empty
            return
        spans = iter_batch_spans(data.records)
        if spans:
            header = spans[0][1]
            self.epoch_cache.assign(max(header.partition_leader_epoch, 0), header.base_offset)

    # -- leader: follower fetches, ISR, high watermark ------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """Record a follower fetch at ``fetch_offset`` (its LEO); True when the high watermark moved."""
        state = self.remote.get(replica_id)
        if state is None or not self.is_leader:
            return False
        state.update_fetch_state(fetch_offset, self.log.log_end_offset, now_ms)
        self._maybe_expand_isr(state)
        return self.maybe_increment_hw()

    def _maybe_expand_isr(self, state: ReplicaState) -> None:
        if state.node_id in self.isr or not self.isr_eligible(state.node_id):
            return
        hw = self.log.high_watermark
        if state.log_end_offset >= hw and state.log_end_offset >= self.leader_epoch_start_offset >= 0:
            new_isr = sorted(self.isr | {state.node_id})
            if self._alter_isr(self.topic, self.partition, new_isr, self.leader_epoch):
                _log.info(
                    "%s-%d: expanding ISR from %s to %s (replica %d at %d, HW %d)",
                    self.topic,
                    self.partition,
                    sorted(self.isr),
                    new_isr,
                    state.node_id,
                    state.log_end_offset,
                    hw,
                )
                self.isr = frozenset(new_isr)

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> bool:
        """Drop followers not caught up for ``max_lag_ms``; True when the high watermark moved."""
        if not self.is_leader or len(self.isr) <= 1:
            return False
        leo = self.log.log_end_offset
        out = [
            r
            for r in sorted(self.isr)
            if r != self.local_id
            and (r not in self.remote or not self.remote[r].is_caught_up(leo, now_ms, max_lag_ms))
        ]
        if not out:
            return False
        new_isr = sorted(self.isr - set(out))
        if not self._alter_isr(self.topic, self.partition, new_isr, self.leader_epoch):
            return False
        _log.warning(
            "%s-%d: shrinking ISR from %s to %s: %s",
            self.topic,
            self.partition,
            sorted(self.isr),
            new_isr,
            ", ".join(
                f"replica {r} at {self.remote[r].log_end_offset} last caught up "
                f"{now_ms - self.remote[r].last_caught_up_ms} ms ago"
                if r in self.remote
                else f"replica {r} unknown"
                for r in out
            ),
        )
        self.isr = frozenset(new_isr)
        return self.maybe_increment_hw()

    def effective_min_isr(self, min_isr: int | None = None) -> int:
        """``min(min.insync.replicas, replication factor)`` (Kafka's ``effectiveMinIsr``); ``min_isr`` defaults
        to the topic's ``min.insync.replicas``."""
        wanted = self.log.config.min_insync_replicas if min_isr is None else min_isr
        return min(wanted, len(self.replicas))

    def maybe_increment_hw(self) -> bool:
        """HW := min LEO over the ISR when that is higher and the ISR is not under its minimum; True when it
        moved."""
        if not self.is_leader:
            return False
        if len(self.isr) < self.effective_min_isr():
            _log.debug(
                "%s-%d: HW stays at %d: ISR %s is under min ISR",
                self.topic,
                self.partition,
                self.log.high_watermark,
                sorted(self.isr),
            )
            return False
        log = self.log
        new_hw = log.log_end_offset
        for r in self.isr:
            if r == self.local_id:
                continue
            state = self.remote.get(r)
            leo = state.log_end_offset if state is not None else -1
            if leo < new_hw:
                new_hw = leo
        old = log.high_watermark
        if new_hw > old:
            log.high_watermark = new_hw
            return log.high_watermark != old
        return False

    def check_min_isr(self, min_isr: int) -> tuple[ErrorCode, str | None]:
        """Before an acks=-1 append: NOT_ENOUGH_REPLICAS when the ISR is smaller than the effective minimum."""
        min_isr = self.effective_min_isr(min_isr)
        if len(self.isr) < min_isr:
            return (
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {min_isr} for partition {self.topic}-{self.partition}",
            )
        return ErrorCode.NONE, None

    def check_enough_replicas_reach_offset(
        self, required_offset: int, min_isr: int
    ) -> tuple[bool, ErrorCode]:
        """See the module docstring: (done, error) for an acks=-1 produce waiting for ``required_offset``."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.isr) >= self.effective_min_isr(min_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True) -> ErrorCode:
        """A request's CurrentLeaderEpoch against this replica (Kafka's ``Partition.getLocalLog``), epoch first:

        * ``current_leader_epoch`` >= 0 and older than the epoch this broker knows: FENCED_LEADER_EPOCH (the
          sender's metadata is stale); newer: UNKNOWN_LEADER_EPOCH (this broker has not learnt of it yet);
        * otherwise, with ``require_leader``, a replica that does not lead: NOT_LEADER_OR_FOLLOWER;
        * else NONE. -1 ("no epoch", older request versions) skips the epoch check.
        """
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if require_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def validate_fetch(
        self, current_leader_epoch: int, fetch_offset: int, last_fetched_epoch: int
    ) -> tuple[ErrorCode, tuple[int, int] | None]:
        """Leader side of a fetch before anything is read (Kafka's ``Partition.fetchRecords`` /
        ``readRecords``, KIP-320 and KIP-595), in this order:

        * :meth:`check_leader_epoch` (fencing, then leadership);
        * ``last_fetched_epoch`` >= 0 (Fetch v12+) and this log cannot tell where that epoch ends (an epoch
          above all it knows, or an empty cache): OFFSET_OUT_OF_RANGE;
        * ``last_fetched_epoch`` >= 0 and ``fetch_offset`` below this log's start: OFFSET_OUT_OF_RANGE, whether or
          not the epochs diverge (the fetcher must start over at the log start);
        * ``last_fetched_epoch`` >= 0 and this log's (epoch, end offset) for it shows the fetcher's log diverges
          (the largest epoch here up to it is smaller, or it ends below ``fetch_offset``): NONE with that
          (epoch, end offset) -- the DivergingEpoch the fetcher truncates to before fetching again;
        * otherwise (NONE, None): read as usual.
        """
        code = self.check_leader_epoch(current_leader_epoch)
        if code != ErrorCode.NONE or last_fetched_epoch < 0:
            return code, None
        log = self.log
        epoch, end = self.epoch_cache.end_offset_for(last_fetched_epoch, log.log_end_offset)
        if epoch < 0 or end < 0:
            _log.debug(
                "%s-%d: fetch at %d with last fetched epoch %d: no end offset known for it here (epochs %s)",
                self.topic,
                self.partition,
                fetch_offset,
                last_fetched_epoch,
                self.epoch_cache.entries,
            )
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if fetch_offset < log.log_start_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return ErrorCode.NONE, (epoch, end)
        return ErrorCode.NONE, None

    def end_offset_for_epoch(self, current_leader_epoch: int, epoch: int) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch as the leader (Kafka's ``Partition.lastOffsetForLeaderEpoch`` with
        fetchOnlyFromLeader): (error, epoch, end offset) -- :meth:`check_leader_epoch`, then the cache's
        ``end_offset_for`` with this log's end offset; (NONE, -1, -1) when it is undefined here."""
        code = self.check_leader_epoch(current_leader_epoch)
        if code != ErrorCode.NONE:
            return code, -1, -1
        found_epoch, end = self.epoch_cache.end_offset_for(epoch, self.log.log_end_offset)
        if found_epoch < 0 or end < 0:
            return ErrorCode.NONE, -1, -1
        return ErrorCode.NONE, found_epoch, end

    # -- follower -------------------------------------------------------------------------------------------

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of this replica's last batch, sent in its fetches (-1 when unknown)."""
        return self.epoch_cache.latest_epoch

    def truncation_offset(self, diverging_epoch: int, diverging_end: int) -> int:
        """Where a follower truncates after the leader answered DivergingEpoch (Kafka's
        ``AbstractFetcherThread`` rules): the leader's end offset for the epoch, or this replica's own end
        offset for the largest epoch it has up to that one, whichever is smaller. When this replica does not
        know the leader's epoch, the next fetch (with an older LastFetchedEpoch) is checked again, so repeated
        rounds converge on the first offset where the logs differ."""
        leo = self.log.log_end_offset
        if diverging_end < 0:  # the leader knows no epoch at all: only what it has acknowledged is certain
            return min(self.log.high_watermark, leo)
        if diverging_epoch < 0:
            return min(diverging_end, leo)
        own_epoch, own_end = self.epoch_cache.end_offset_for(diverging_epoch, leo)
        if own_epoch < 0:
            return min(diverging_end, leo)
        return min(diverging_end, own_end, leo)

    def append_as_follower(self, records: Buffer | None, leader_hw: int) -> int:
        with self._storage_lock:
            return self._append_as_follower(records, leader_hw)

    def _append_as_follower(self, records: Buffer | None, leader_hw: int) -> int:
        """Append the leader's batches (own offsets kept, producer state updated by the log) and learn its HW;
        returns the new LEO."""
        log = self.log
        if records is not None and len(records):
            spans = iter_batch_spans(records)
            for position, header in spans:  # as Kafka's ReplicaFetcherThread: nothing corrupt reaches the log
                crc = compute_crc(records, position, header.size)
                if crc != header.crc:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: fetched batch at offset {header.base_offset} fails its "
                        f"CRC check (stored {header.crc:#010x}, computed {crc:#010x}); nothing of this fetch "
                        "was appended"
                    )
            latest = self.epoch_cache.latest_epoch
            for _, header in spans:
                if header.partition_leader_epoch > latest:
                    latest = header.partition_leader_epoch
                    self.epoch_cache.assign(latest, header.base_offset)
            if spans:
                log.append_as_follower(records)
        self.update_follower_hw(leader_hw)
        return log.log_end_offset

    def update_follower_hw(self, leader_hw: int) -> None:
        log = self.log
        new_hw = min(log.log_end_offset, leader_hw)
        if new_hw > log.high_watermark:
            log.high_watermark = new_hw

    def truncate_to(self, offset: int) -> None:
        """Follower truncation (a DivergingEpoch answer, or the leader said our fetch offset is beyond its log):
        the log (whole batches; its producer state is rebuilt from what remains), then the epoch cache's
        entries at or above the new log end offset."""
        with self._storage_lock:
            self.log.truncate_to(offset)
            self.epoch_cache.truncate_from_end(self.log.log_end_offset)

    async def truncate_to_off_loop(self, offset: int) -> None:
        """:meth:`truncate_to` on a worker thread (segment deletion, fsync, the producer-state replay, the epoch
        cache), awaited by the fetcher. A caller cancelled meanwhile stops waiting; the truncation still
        completes, and a role change or follower append on the loop waits for it (``_storage_lock``)."""
        await asyncio.shield(asyncio.to_thread(self.truncate_to, offset))

    async def truncate_fully_and_start_at_off_loop(self, offset: int) -> None:
        """:meth:`truncate_fully_and_start_at` on a worker thread (see :meth:`truncate_to_off_loop`)."""
        await asyncio.shield(asyncio.to_thread(self.truncate_fully_and_start_at, offset))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower whose log end is below the leader's log start: drop the whole log, restart it at ``offset``."""
        with self._storage_lock:
            self.log.truncate_fully_and_start_at(offset)
            self.epoch_cache.clear()

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (
            f"Partition({self.topic}-{self.partition}, {role}, epoch {self.leader_epoch}, "
            f"replicas {self.replicas}, ISR {sorted(self.isr)}, HW {self.log.high_watermark}, "
            f"LEO {self.log.log_end_offset})"
        )
