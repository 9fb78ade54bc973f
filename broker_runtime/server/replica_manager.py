"""Every partition hosted on this node: leader appends, leader/follower reads, replication state.

Append path for one produce partition (Kafka's ``ReplicaManager.appendRecords`` -> ``Partition.
appendRecordsToLeader`` -> ``UnifiedLog.append``), all per batch, never per record:

  0. this node must lead the partition (else NOT_LEADER_OR_FOLLOWER); with acks=-1 the ISR must have
     ``min.insync.replicas`` members (else NOT_ENOUGH_REPLICAS, nothing appended);
  1. :func:`~broker_runtime.server.validation.validate_produce_records` (Kafka's order and its LogValidator:
     every record walked, RecordErrors for the bad ones; see that module; a set larger than ``segment.bytes``
     is RECORD_LIST_TOO_LARGE there, not a storage error). The batch it returns is the one appended: it may be
     rewritten (maxTimestamp, or recompressed with the topic's ``compression.type``);
  2. ``PartitionLog.append``, which owns the partition's producer state (as Kafka's ``UnifiedLog``): an
     idempotent batch duplicating one of its producer's last five batches comes back as an ``AppendInfo``
     marked ``duplicate`` with the ORIGINAL offsets (nothing written); a sequence or epoch error raises
     :class:`~broker_runtime.errors.ProducerStateError`, answered with its code; otherwise the log assigns
     offsets, stamps the leader epoch (and LogAppendTime) and records the batch in the producer state.
     Any other StorageError or OSError of the append (a failing disk, a vanished directory) answers
     KAFKA_STORAGE_ERROR for this partition alone, logged in one line; an OSError (the disk refused a write:
     ENOSPC, EIO) also fails the log directory (:attr:`ReplicaManager.on_log_dir_failure`, Kafka's
     ``LogDirFailureChannel``): the partition log's memory may no longer match its files, so the node stops
     serving at once, without a clean shutdown, and its next start recovers the logs from their files;
  3. the high watermark moves to min LEO over the ISR (at once for a single replica); ``on_append`` wakes the
     delayed fetches of the partition (followers wait for new data there), ``on_high_watermark`` also the
     delayed produces. :meth:`ReplicaManager.append` returns the offset an acks=-1 produce waits for.

Replication: partitions are :class:`~broker_runtime.replication.Partition` objects. Single node: created
lazily for every local log, leader with replicas = ISR = [this node]. Cluster: :meth:`apply_view` creates the
logs this node hosts and makes each partition leader or follower as the cluster metadata says; followers are
handed to one :class:`~broker_runtime.replication.ReplicaFetcher` per leader. Follower fetches
(:meth:`record_follower_fetch`) move the high watermark; :meth:`maybe_shrink_isr` runs periodically.

Reads: consumers read up to the high watermark (``read_committed``: the last stable offset, with the aborted
transactions overlapping the returned range, from the ``.txnindex`` files), followers up to the log end
offset; only the leader serves either (a follower answers NOT_LEADER_OR_FOLLOWER). Every answer carries the
partition's last stable offset. Before a read, :meth:`validate_fetch` checks the request's
CurrentLeaderEpoch and LastFetchedEpoch (``Partition.validate_fetch``: fencing, then divergence), and
:meth:`end_offset_for_epoch` answers OffsetForLeaderEpoch from the leader's epoch cache.

Thread-safety: event-loop thread only (the storage calls are synchronous and short).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_runtime.errors import (
    ErrorCode,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    ProducerStateError,
    StorageError,
)
from broker_runtime.protocol.compression import codec_from_name
from broker_runtime.protocol.records import Buffer, build_control_batch
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.replication.fetcher import FetcherConfig, ReplicaFetcher
from broker_runtime.replication.partition import AlterIsr, Partition
from broker_runtime.server.topics import TopicManager
from broker_runtime.server.validation import BatchPolicy, Rejection, validate_produce_records
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.file_handle import FileSlice

__all__ = ["LEADER_EPOCH", "AppendResult", "ReadResult", "ReplicaManager", "VerificationGuard"]

_log = logging.getLogger(__name__)

#: The leader epoch of a single-node broker's partitions (it never changes there: no other replica exists).
LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The answer for one produce partition."""

    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    #: The offset the high watermark must reach before acks=-1 may answer (last offset + 1).
    required_offset: int = -1
    #: KIP-467 RecordErrors: (batch index, message) of the records to blame for ``error``.
    record_errors: tuple[tuple[int, str | None], ...] = ()


class VerificationGuard:
    """One transaction verification in flight on a partition for a producer (see
    :meth:`ReplicaManager.begin_verification`)."""

    __slots__ = ("alive", "users")

    def __init__(self) -> None:
        self.alive = True
        self.users = 0


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The outcome of reading one fetch partition."""

    error: ErrorCode
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    #: The leader's (epoch, end offset) where the fetcher's log diverges (Fetch v12+ DivergingEpoch), or None.
    diverging: tuple[int, int] | None = None
    #: The partition's last stable offset (-1 when unknown).
    last_stable_offset: int = -1
    #: read_committed: (producer id, first offset) of the aborted transactions overlapping the records; else None.
    aborted: list[tuple[int, int]] | None = None
    #: The records as a slice of their segment file, not read (``records`` is then empty): sent with sendfile.
    file_slice: FileSlice | None = None

    @property
    def size(self) -> int:
        return len(self.records) if self.file_slice is None else len(self.file_slice)


def _policy(cfg: LogConfig, header_only: bool) -> BatchPolicy:
    codec = cfg.compression_type
    return BatchPolicy(
        max_message_bytes=cfg.max_message_bytes,
        timestamp_type=1 if cfg.log_append_time else 0,
        timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
        timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
        segment_bytes=cfg.segment_bytes,
        compact=cfg.compact,
        target_codec=None
        if codec == "producer"
        else codec_from_name("none" if codec == "uncompressed" else codec),
        levels=cfg.compression_levels,
        header_only=header_only,
    )


class ReplicaManager:
    """Hosted partitions: leader appends and reads, follower state; see the module docstring."""

    def __init__(
        self,
        topics: TopicManager,
        *,
        wall_ms: Callable[[], int],
        on_high_watermark: Callable[[str, int], None] | None = None,
        node_id: int = 0,
        now_ms: Callable[[], int] | None = None,
        alter_isr: AlterIsr | None = None,
        replica_lag_time_max_ms: int = 30000,
        header_only_validation: bool = False,
        fetcher_config: FetcherConfig | None = None,
        resolve_broker: Callable[[int], tuple[str, int] | None] | None = None,
        cluster_mode: bool = False,
        confirm_leadership: Callable[[], str | None] | None = None,
    ) -> None:
        self._topics = topics
        self._wall_ms = wall_ms
        self._now_ms = now_ms or wall_ms
        self._on_high_watermark = on_high_watermark
        self._on_append: Callable[[str, int], None] | None = None
        self.node_id = node_id
        self._alter_isr: AlterIsr = alter_isr or (lambda topic, partition, isr, epoch: True)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        #: Tests and benchmarks only (``pylog.test.validation.header.only``): skip the record walk.
        self._header_only_validation = header_only_validation
        self._fetcher_config = fetcher_config or FetcherConfig(node_id)
        self._resolve_broker = resolve_broker or (lambda node: None)
        self._cluster_mode = cluster_mode
        #: Cluster mode: called before every leader append; brings the view up to date when this broker may
        #: have been fenced (it was not running for a while), returns why leadership cannot be confirmed or None.
        self._confirm_leadership = confirm_leadership
        self._policies: dict[str, tuple[LogConfig, BatchPolicy]] = {}
        self._partitions: dict[TopicPartition, Partition] = {}
        #: The cluster metadata last applied (cluster mode).
        self._view: Any = None
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._on_loaded: Callable[[], None] | None = None
        #: (topic, partition, producer id) -> the guard of a transaction verification in flight there
        #: (:meth:`begin_verification`); a marker of that producer on that partition kills it.
        self._verifications: dict[tuple[str, int, int], VerificationGuard] = {}
        #: Called with the OSError of a failed write to a partition log (leader, marker or follower append, a
        #: follower's truncation or epoch checkpoint): the log directory failed (the broker sets the log manager's
        #: ``LogDirFailureChannel.maybe_add_offline_log_dir``; the partition log reported its own writes already).
        self.on_log_dir_failure: Callable[[str, OSError], None] | None = None

    def set_high_watermark_listener(self, listener: Callable[[str, int], None]) -> None:
        """Called after the high watermark of (topic, partition) moved (wakes delayed produces and fetches)."""
        self._on_high_watermark = listener

    def set_loaded_listener(self, listener: Callable[[], None]) -> None:
        """Called on the loop after a partition assigned here has its log made (cluster mode): the broker
        applies the latest metadata again (roles, coordinators), which now reaches that partition."""
        self._on_loaded = listener

    def _partition_loaded(self) -> None:
        if self._on_loaded is not None:
            self._on_loaded()
        elif self._view is not None:
            self.apply_view(self._view)

    def set_append_listener(self, listener: Callable[[str, int], None]) -> None:
        """Called after every leader append (wakes delayed fetches: followers wait for new data)."""
        self._on_append = listener

    def _policy_for(self, topic: str) -> tuple[LogConfig, BatchPolicy]:
        cfg = self._topics.config(topic)
        cached = self._policies.get(topic)
        if cached is None or cached[0] is not cfg:
            cached = (cfg, _policy(cfg, self._header_only_validation))
            self._policies[topic] = cached
        return cached

    # -- partitions ---------------------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        """The hosted partition, or None (single node: created on first use for every local log)."""
        found = self._partitions.get((topic, index))
        if found is None and not self._cluster_mode:
            log = self._topics.get_log(topic, index)
            if log is None:
                return None
            found = Partition(topic, index, log, self.node_id, self._alter_isr)
            found.make_leader([self.node_id], [self.node_id], LEADER_EPOCH, self._now_ms())
            self._partitions[(topic, index)] = found
        return found

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def _not_hosted(self, topic: str, index: int) -> tuple[ErrorCode, str]:
        count = self._topics.partition_count(topic)
        if count is not None and 0 <= index < count:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"node {self.node_id} is not a replica of {topic}-{index}",
            )
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"This server does not host this topic-partition: {topic}-{index}",
        )

    def apply_view(self, view: Any) -> None:
        """Make hosted partitions leaders or followers as the cluster metadata ``view`` says (cluster mode)."""
        now = self._now_ms()
        me = self.node_id
        self._view = view
        for name, topic in view.topics.items():
            for index, info in enumerate(topic.partitions):
                if me not in info.replicas:
                    # A local log of another incarnation of the topic is a stray here too (Kafka's
                    # isStrayKraftReplica): moved aside, never served.
                    self._topics.drop_stray(name, index, topic.topic_id, self._partition_loaded)
                    continue
                key = (name, index)
                partition = self._partitions.get(key)
                if partition is None:
                    # In a cluster the log was loaded with its checkpointed high watermark (hw_follows_leo off);
                    # make_leader turns HW = LEO back on for a single replica. A log not made yet is made on the
                    # partition-load thread; the partition is not served until then, and the view of that
                    # moment (the latest) is applied once it is registered.
                    log = self._topics.hosted_or_load(
                        name, index, topic.configs, self._partition_loaded, topic.topic_id
                    )
                    if log is None:
                        continue
                    partition = Partition(name, index, log, me, self._alter_isr)
                    partition.isr_eligible = self._isr_eligible
                    self._partitions[key] = partition
                if info.leader == me:
                    was_follower = not partition.is_leader and partition.leader_id >= 0
                    previous_leader = partition.leader_id
                    hw = partition.log.high_watermark
                    partition.make_leader(info.replicas, info.isr, info.leader_epoch, now)
                    if was_follower:
                        self._fetcher(previous_leader).remove_partition(name, index)
                    if partition.log.high_watermark != hw:
                        self._high_watermark_moved(name, index)
                else:
                    previous_leader = partition.leader_id
                    was_leader = partition.is_leader
                    if partition.make_follower(info.replicas, info.leader, info.leader_epoch, info.isr):
                        if previous_leader >= 0 and previous_leader != me:
                            self._fetcher(previous_leader).remove_partition(name, index)
                        if info.leader >= 0:
                            self._fetcher(info.leader).add_partition(partition)
                    if was_leader:
                        # acks=-1 produces waiting here can no longer complete: the purgatory answers them
                        # NOT_LEADER_OR_FOLLOWER now instead of at their timeout.
                        self._high_watermark_moved(name, index)

    def forget_topic(self, name: str) -> None:
        """The topic was deleted: drop its partitions (a follower's leaves its fetcher)."""
        for key in [k for k in self._partitions if k[0] == name]:
            partition = self._partitions.pop(key)
            if not partition.is_leader and partition.leader_id >= 0 and partition.leader_id in self.fetchers:
                self.fetchers[partition.leader_id].remove_partition(*key)
        self._policies.pop(name, None)

    def _isr_eligible(self, replica: int) -> bool:
        view = self._view
        if view is None:
            return True
        info = view.brokers.get(replica)
        return info is not None and not info.fenced

    def _log_dir_failed(self, partition: str, exc: BaseException) -> None:
        """An OSError writing ``partition``'s log fails its log directory (a StorageError is the log refusing
        a request, not the disk failing, and costs the answer only)."""
        if isinstance(exc, OSError) and self.on_log_dir_failure is not None:
            self.on_log_dir_failure(partition, exc)

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                leader_id, self._resolve_broker, self._fetcher_config, on_log_dir_failure=self._log_dir_failed
            )
            self.fetchers[leader_id] = fetcher
            fetcher.start()
        return fetcher

    async def stop_fetchers(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    # -- replication (leader side) ------------------------------------------------------------------------

    def record_follower_fetch(self, topic: str, index: int, replica_id: int, fetch_offset: int) -> ErrorCode:
        """A follower fetch at ``fetch_offset`` (its log end offset): update its state, maybe move the HW."""
        partition = self._partitions.get((topic, index)) or self.partition(topic, index)
        if partition is None:
            return self._not_hosted(topic, index)[0]
        if not partition.is_leader or replica_id not in partition.replicas or replica_id == self.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        log = partition.log
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if partition.update_follower_fetch_state(replica_id, fetch_offset, self._now_ms()):
            self._high_watermark_moved(topic, index)
        return ErrorCode.NONE

    def maybe_shrink_isr(self) -> None:
        """Drop lagging followers from the ISR of every partition led here (periodic task)."""
        now = self._now_ms()
        for partition in list(self._partitions.values()):
            shrunk = partition.is_leader and partition.replicated
            if shrunk and partition.maybe_shrink_isr(now, self.replica_lag_time_max_ms):
                self._high_watermark_moved(partition.topic, partition.partition)

    def _high_watermark_moved(self, topic: str, index: int) -> None:
        if self._on_high_watermark is not None:
            self._on_high_watermark(topic, index)

    # -- produce ------------------------------------------------------------------------------------------

    def min_insync_replicas(self, topic: str) -> int:
        return int(self._topics.config(topic).min_insync_replicas)

    def append(
        self, topic: str, partition: int, records: Buffer | None, api_version: int, acks: int = 1
    ) -> AppendResult:
        """Validate and append the records of one produce partition (Produce v3+) as its leader."""
        replica = self.partition(topic, partition)
        if replica is None:
            code, message = self._not_hosted(topic, partition)
            return AppendResult(code, message=message)
        if self._confirm_leadership is not None and replica.is_leader:
            why = self._confirm_leadership()
            if why is not None:
                return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message=why)
        if not replica.is_leader:
            return AppendResult(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                message=f"node {self.node_id} is not the leader of {topic}-{partition} (leader {replica.leader_id})",
            )
        log = replica.log
        cfg, policy = self._policy_for(topic)
        if acks == -1:
            code, why = replica.check_min_isr(cfg.min_insync_replicas)
            if code != ErrorCode.NONE:
                return AppendResult(code, message=why)
        now = self._wall_ms()
        checked = validate_produce_records(
            records, partition_name=f"{topic}-{partition}", api_version=api_version, policy=policy, now_ms=now
        )
        if isinstance(checked, Rejection):
            _log.debug("produce to %s-%d rejected: %s", topic, partition, checked.message)
            return AppendResult(checked.code, message=checked.message, record_errors=checked.record_errors)
        try:
            info = log.append(checked.records, leader_epoch=max(replica.leader_epoch, 0))
        except ProducerStateError as exc:
            return AppendResult(exc.code, message=str(exc) or None)
        except LogDirOfflineError as exc:  # the failure was logged once, where it happened
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        except (StorageError, OSError) as exc:
            # A failing disk or a vanished directory costs this partition's answer, never the connection or
            # the other partitions of the request; one log line, no traceback.
            _log.error("append to %s-%d failed: %s: %s", topic, partition, type(exc).__name__, exc)
            self._log_dir_failed(f"{topic}-{partition}", exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=f"{type(exc).__name__}: {exc}")
        if not info.duplicate:  # a duplicate wrote nothing: no one to wake
            if self._on_append is not None:
                self._on_append(topic, partition)
            if replica.maybe_increment_hw():
                self._high_watermark_moved(topic, partition)
        return AppendResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=log.log_start_offset,
            required_offset=info.last_offset + 1,
        )

    # -- transaction verification (KIP-890 part 1, see broker_runtime/server/txn_verification.py) ----------------

    def has_ongoing_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int
    ) -> bool | None:
        """Has ``producer_id`` an open transaction at ``producer_epoch`` on this leader's ``topic-partition``? None
        when this node does not lead it (the append answers why). An open transaction at another epoch is not the
        asker's (Kafka's ``UnifiedLog.hasOngoingTransaction``): with transaction version 2 every EndTxn bumps the
        epoch and is answered before its markers land, so a batch of the next transaction can meet the previous
        one still open here; it must go to the coordinator (CONCURRENT_TRANSACTIONS until that one completes),
        never join it."""
        replica = self.partition(topic, partition)
        if replica is None or not replica.is_leader:
            return None
        state = replica.log.producer_state
        if producer_id not in state.ongoing_transactions:
            return False
        entry = state.last_entry(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch

    def begin_verification(self, topic: str, partition: int, producer_id: int) -> VerificationGuard:
        """The guard of a verification about to ask the coordinator whether the partition is in the producer's
        transaction (Kafka's ``VerificationGuard``): requests of the same producer verifying at once share it; a
        marker of the producer on the partition kills it, so a batch verified before that marker is refused
        (its transaction ended meanwhile). Pair with :meth:`end_verification`."""
        key = (topic, partition, producer_id)
        guard = self._verifications.get(key)
        if guard is None:
            guard = self._verifications[key] = VerificationGuard()
        guard.users += 1
        return guard

    def end_verification(
        self, topic: str, partition: int, producer_id: int, guard: VerificationGuard
    ) -> None:
        guard.users -= 1
        key = (topic, partition, producer_id)
        if guard.users <= 0 and self._verifications.get(key) is guard:
            del self._verifications[key]

    def write_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        control_type: int,
        acks: int = 1,
    ) -> AppendResult:
        """Append a COMMIT/ABORT marker as the partition's leader (what WriteTxnMarkers does on a leader).

        As Kafka's ``appendRecords`` with origin coordinator: NOT_LEADER_OR_FOLLOWER off the leader, with
        ``acks=-1`` NOT_ENOUGH_REPLICAS under the minimum ISR (nothing appended), TRANSACTION_COORDINATOR_FENCED
        for a coordinator epoch older than the producer's last marker, INVALID_PRODUCER_EPOCH for an older
        producer epoch. ``required_offset`` is what the high watermark must reach for the marker to be replicated.
        """
        replica = self.partition(topic, partition)
        if replica is None:
            code, message = self._not_hosted(topic, partition)
            return AppendResult(code, message=message)
        if self._confirm_leadership is not None and replica.is_leader:
            why = self._confirm_leadership()
            if why is not None:
                return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message=why)
        if not replica.is_leader:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if acks == -1:
            code, why = replica.check_min_isr(self._policy_for(topic)[0].min_insync_replicas)
            if code != ErrorCode.NONE:
                return AppendResult(code, message=why)
        guard = self._verifications.pop((topic, partition, producer_id), None)
        if guard is not None:
            guard.alive = False
        batch = build_control_batch(
            control_type,
            coordinator_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=self._wall_ms(),
        )
        try:
            info = replica.log.append(batch, leader_epoch=max(replica.leader_epoch, 0))
        except ProducerStateError as exc:
            _log.warning("transaction marker for %s-%d refused: %s", topic, partition, exc)
            return AppendResult(exc.code, message=str(exc))
        except LogDirOfflineError as exc:
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        except (StorageError, OSError) as exc:
            _log.error("transaction marker append to %s-%d failed: %s", topic, partition, exc)
            self._log_dir_failed(f"{topic}-{partition}", exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        if self._on_append is not None:
            self._on_append(topic, partition)
        if replica.maybe_increment_hw():
            self._high_watermark_moved(topic, partition)
        return AppendResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            log_start_offset=replica.log.log_start_offset,
            required_offset=info.last_offset + 1,
        )

    # -- fetch --------------------------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool,
        replica_id: int = -1,
        read_committed: bool = False,
        slice_min_bytes: int | None = None,
    ) -> ReadResult:
        """Read as the leader from ``fetch_offset``: up to the HW for consumers (the LSO with
        ``read_committed``, plus the aborted transactions of the range), the LEO for followers.

        ``slice_min_bytes``: records of at least that many bytes come back unread, as
        :attr:`ReadResult.file_slice` (:meth:`~broker_runtime.storage.partition_log.PartitionLog.read`)."""
        replica = self.partition(topic, partition)
        if replica is None:
            return ReadResult(self._not_hosted(topic, partition)[0])
        if not replica.is_leader:
            return ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        log = replica.log
        hw = log.high_watermark
        lso = log.last_stable_offset
        start = log.log_start_offset
        leo = log.log_end_offset
        committed = read_committed and replica_id < 0
        limit = leo if replica_id >= 0 else (lso if committed else hw)
        no_aborted: list[tuple[int, int]] | None = [] if committed else None
        if log.dir_failure.offline is not None:  # even a read that would touch no file (Kafka's order)
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, high_watermark=hw, log_start_offset=start)
        if fetch_offset < start or fetch_offset > leo:
            return ReadResult(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                high_watermark=hw,
                log_start_offset=start,
                last_stable_offset=lso,
            )
        if fetch_offset >= limit:
            return ReadResult(ErrorCode.NONE, b"", hw, start, last_stable_offset=lso, aborted=no_aborted)
        try:
            data = log.read(
                fetch_offset,
                max_bytes,
                max_offset=limit,
                min_one_batch=min_one_batch,
                slice_min_bytes=slice_min_bytes,
            )
        except OffsetOutOfRangeError:
            return ReadResult(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                high_watermark=log.high_watermark,
                log_start_offset=log.log_start_offset,
            )
        except LogDirOfflineError:
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, high_watermark=hw, log_start_offset=start)
        except StorageError as exc:
            _log.error("read of %s-%d at %d failed: %s", topic, partition, fetch_offset, exc)
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, high_watermark=hw, log_start_offset=start)
        aborted = no_aborted
        if committed and data.size:
            aborted = [
                (a.producer_id, a.first_offset)
                for a in log.collect_aborted_transactions(fetch_offset, data.next_offset)
            ]
        return ReadResult(
            ErrorCode.NONE,
            data.records,
            log.high_watermark,
            log.log_start_offset,
            last_stable_offset=lso,
            aborted=aborted,
            file_slice=data.file_slice,
        )

    def validate_fetch(
        self,
        topic: str,
        partition: int,
        current_leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
    ) -> tuple[ErrorCode, tuple[int, int] | None]:
        """Epoch fencing and divergence of one fetch partition (see ``Partition.validate_fetch``); a partition
        not hosted here passes (the read answers its error)."""
        replica = self.partition(topic, partition)
        if replica is None:
            return ErrorCode.NONE, None
        return replica.validate_fetch(current_leader_epoch, fetch_offset, last_fetched_epoch)

    def end_offset_for_epoch(
        self, topic: str, partition: int, current_leader_epoch: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch for one partition: (error, epoch, end offset)."""
        replica = self.partition(topic, partition)
        if replica is None:
            return self._not_hosted(topic, partition)[0], -1, -1
        return replica.end_offset_for_epoch(current_leader_epoch, epoch)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        replica = self.partition(topic, partition)
        return None if replica is None else replica.log.high_watermark

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's last stable offset, or -1 when it is not hosted here."""
        replica = self.partition(topic, partition)
        return -1 if replica is None else replica.log.last_stable_offset

    def log_start_offset(self, topic: str, partition: int) -> int | None:
        replica = self.partition(topic, partition)
        return None if replica is None else replica.log.log_start_offset
