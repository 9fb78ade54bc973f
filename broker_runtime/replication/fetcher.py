"""The follower's fetcher: one asyncio task per leader broker pulling its partitions (Kafka's
``ReplicaFetcherThread``, without the thread).

Loop, per leader::

    connect (address resolved anew each time, so a restarted leader on a new port is found)
    repeat: Fetch(ReplicaId = this node, MaxWaitMs = replica.fetch.wait.max.ms,
                  MinBytes = replica.fetch.min.bytes, per partition FetchOffset = local LEO,
                  CurrentLeaderEpoch = the epoch the metadata gives the leader,
                  LastFetchedEpoch = the epoch of the last local batch)
            for each partition in the answer:
              NONE + DivergingEpoch   the local log diverges from the leader's after the given (epoch, end
                                      offset): truncate to min(leader's end offset, own end offset for that
                                      epoch) (Partition.truncation_offset; WARNING if below the local HW),
                                      fetch again at once -- repeated until the logs agree (KIP-101/595)
              NONE                    append the batches with the leader's offsets, HW := min(LEO, leader HW)
              OFFSET_OUT_OF_RANGE     our LEO is above the leader's log end: truncate to the leader's HW;
                                      our LEO is below the leader's log start: truncate fully and start at
                                      the leader's log start (Kafka's truncateFullyAndStartAt), fetch again;
                                      otherwise (the leader knows no end for our last epoch) back off
              FENCED_LEADER_EPOCH /   the leader's epoch and ours differ: back off (INFO) until the metadata
              UNKNOWN_LEADER_EPOCH    poll gives this broker the leader's epoch or a new leader
              anything else           log it, keep the partition, back off replica.fetch.backoff.ms

The fetch offset the leader sees *is* this follower's log end offset: that is how the leader learns follower
positions (and so the high watermark) -- there is no separate acknowledgement. The next fetch is sent as soon
as the previous answer is processed, so an acks=-1 produce completes after two follower round trips.

Requests go over the task's own asyncio stream (the replication layer uses no client library); correlation ids,
framing of the answer (at most ``max_response_bytes``, refused with a ``ProtocolError`` naming size and bound
before it is buffered) and decoding are the sans-IO
:class:`~broker_runtime.protocol.client_connection.ClientConnection` the client uses too; this module only
reads and writes the stream. Nothing here blocks the event loop except the (short, synchronous) storage append:
a truncation (which deletes segments, fsyncs and rebuilds the producer state by replaying the batch headers
after the newest snapshot, as long as the log after it) runs on a worker thread
(:meth:`~broker_runtime.replication.partition.Partition.truncate_to_off_loop`) while this task awaits it, so
the other connections and fetchers of the broker go on; this fetcher's other partitions wait for it, as in
Kafka's fetcher thread.

Failures (Kafka's ``AbstractFetcherThread``: a fetcher that is shutting down does not report errors): any
failed round trip closes the connection and retries after ``replica.fetch.backoff.ms``. How loudly:

  * the fetcher is stopping (its broker shuts down, or the partitions moved): nothing above DEBUG;
  * the leader closed the connection, refused it, timed out or answered a top-level error: INFO while the
    fetcher has been failing for less than ``replica.lag.time.max.ms`` (``lag_time_max_ms``) without a
    successful round trip, WARNING once it has failed for longer -- by then the leader has dropped this
    follower from the ISR, so it matters. A leader restarting, or every node of a cluster stopping at once
    (each follower sees its leaders close their connections), therefore logs INFO lines only; the first
    successful round trip after failures logs one INFO line and ends the streak;
  * bytes that break the protocol (``ProtocolError``: a malformed answer, a frame above the bound, a
    correlation id out of step): WARNING at once; anything unexpected: ERROR with its traceback.

Thread-safety: every method runs on the broker's event-loop thread; only the truncations above run in a worker
thread, under the partition's storage lock (see :mod:`.partition`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_runtime.errors import BrokerConnectionError, ErrorCode, KafkaError, ProtocolError, StorageError
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from broker_runtime.protocol.messages import ApiKey, IsolationLevel
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.replication.partition import Partition
from broker_runtime.security.async_client import open_connection, reauthenticate
from broker_runtime.security.client_security import ClientSecurity
from broker_runtime.security.sasl_client import reauthenticate_after_s

__all__ = ["FETCH_VERSION", "FetcherConfig", "ReplicaFetcher"]

_log = logging.getLogger(__name__)

#: The Fetch version followers speak (the broker's highest; ReplicaId is a body field up to v14).
FETCH_VERSION = 12
_RECV_BYTES = 1 << 20


@dataclass(frozen=True)
class FetcherConfig:
    """Kafka's replica.fetch.* settings, for one follower broker."""

    node_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    #: How long to wait for an answer beyond MaxWaitMs before the connection is considered dead.
    socket_timeout_ms: int = 30000
    client_id: str = "pylog-replica-fetcher"
    #: replica.lag.time.max.ms: connection failures are INFO until they have lasted this long, then WARNING.
    lag_time_max_ms: int = 30000
    #: The largest answer accepted (socket.request.max.bytes' default); a larger size prefix is a ProtocolError.
    max_response_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: The inter-broker listener's security (TLS, SASL login); None: PLAINTEXT.
    security: ClientSecurity | None = None


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader; see the module docstring."""

    def __init__(
        self,
        leader_id: int,
        resolve: Callable[[int], tuple[str, int] | None],
        config: FetcherConfig,
        *,
        on_progress: Callable[[Partition], None] | None = None,
        on_log_dir_failure: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self.leader_id = leader_id
        #: Called with a failed follower append's error (the replica manager fails the log dir on an OSError).
        self._on_log_dir_failure = on_log_dir_failure
        self._resolve = resolve
        self._config = config
        self._on_progress = on_progress
        self.partitions: dict[TopicPartition, Partition] = {}
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._address = ""
        #: Loop time at which the connection's SASL session is renewed (KIP-368); None: it does not expire.
        self._reauth_at: float | None = None
        self._state = ClientConnection(config.client_id, max_frame_bytes=config.max_response_bytes)
        self._stopping = False
        #: Loop time of the first failure since the last successful round trip (None: not failing).
        self._failing_since: float | None = None
        #: The last error a round trip failed with (None after a success); for tests and diagnostics.
        self.last_error: BaseException | None = None
        #: Partitions that answered an error: not fetched again before this loop time (per-partition backoff).
        self._retry_at: dict[TopicPartition, float] = {}
        #: Fetch round trips completed (for tests and logs).
        self.rounds = 0

    # -- membership -----------------------------------------------------------------------------------------

    def add_partition(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.partition)] = partition
        self._wakeup.set()

    def remove_partition(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)
        self._retry_at.pop((topic, index), None)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self._config.node_id}-from-{self.leader_id}"
            )

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._close()

    # -- loop -----------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff_s = self._config.backoff_ms / 1000
        while not self._stopping:
            if not self.partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            loop = asyncio.get_running_loop()
            now = loop.time()
            ready = [p for tp, p in self.partitions.items() if self._retry_at.get(tp, 0.0) <= now]
            if not ready:
                await asyncio.sleep(max(0.001, min(self._retry_at.values(), default=now) - now))
                continue
            try:
                if self._writer is None:
                    await self._connect()
                else:
                    await self._maybe_reauthenticate()
                await self._fetch_once(ready)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._close()
                self._report_failure(exc)
                await asyncio.sleep(backoff_s)
            else:
                self._report_success()

    def _report_failure(self, exc: Exception) -> None:
        """Log a failed round trip at the level the module docstring gives it."""
        self.last_error = exc
        now = asyncio.get_running_loop().time()
        if self._failing_since is None:
            self._failing_since = now
        failing_ms = int((now - self._failing_since) * 1000)
        node, leader = self._config.node_id, self.leader_id
        if self._stopping:
            _log.debug(
                "node %d: fetcher for leader %d stopping (%s: %s)", node, leader, type(exc).__name__, exc
            )
            return
        if isinstance(exc, ProtocolError):
            level = logging.WARNING
        elif isinstance(
            exc, KafkaError | OSError
        ):  # BrokerConnectionError, refused, timed out, top-level error
            level = logging.WARNING if failing_ms >= self._config.lag_time_max_ms else logging.INFO
        else:
            _log.error("node %d: fetcher for leader %d failed", node, leader, exc_info=exc)
            return
        _log.log(
            level,
            "node %d: fetching from leader %d failed (%s: %s); failing for %d ms, retrying in %d ms",
            node,
            leader,
            type(exc).__name__,
            exc,
            failing_ms,
            self._config.backoff_ms,
        )

    def _report_success(self) -> None:
        if self._failing_since is not None:
            _log.info(
                "node %d: fetching from leader %d works again (%s)",
                self._config.node_id,
                self.leader_id,
                self.last_error,
            )
        self._failing_since = None
        self.last_error = None

    async def _connect(self) -> None:
        address = self._resolve(self.leader_id)
        if address is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no address known for broker {self.leader_id}")
        host, port = address
        self._address = f"{host}:{port}"
        timeout_s = self._config.socket_timeout_ms / 1000
        reader, writer, lifetime_ms = await open_connection(
            host, port, self._config.security, client_id=self._config.client_id, timeout_s=timeout_s
        )
        self._reader, self._writer = reader, writer
        self._schedule_reauth(lifetime_ms)
        self._state.reset()
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _log.info(
            "node %d: connected to leader %d at %s:%d", self._config.node_id, self.leader_id, host, port
        )

    def _schedule_reauth(self, lifetime_ms: int) -> None:
        after_s = reauthenticate_after_s(lifetime_ms)
        self._reauth_at = None if after_s is None else asyncio.get_running_loop().time() + after_s

    async def _maybe_reauthenticate(self) -> None:
        """Renew the SASL session between two fetches when it is due (the leader closes an expired one)."""
        if self._reauth_at is None or asyncio.get_running_loop().time() < self._reauth_at:
            return
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        lifetime_ms = await reauthenticate(
            reader,
            writer,
            self._config.security,
            self._address,
            client_id=self._config.client_id,
            timeout_s=self._config.socket_timeout_ms / 1000,
        )
        self._schedule_reauth(lifetime_ms)
        _log.debug("node %d: re-authenticated to leader %d", self._config.node_id, self.leader_id)

    def _close(self) -> None:
        writer = self._writer
        self._reader = self._writer = None
        self._state.reset()
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()

    def _request_body(self, parts: list[Partition]) -> dict[str, Any]:
        cfg = self._config
        topics: list[dict[str, Any]] = []
        for p in parts:
            if not topics or topics[-1]["Topic"] != p.topic:
                topics.append({"Topic": p.topic, "Partitions": []})
            topics[-1]["Partitions"].append(
                {
                    "Partition": p.partition,
                    "CurrentLeaderEpoch": p.leader_epoch,
                    "FetchOffset": p.log.log_end_offset,
                    "LastFetchedEpoch": p.last_fetched_epoch,
                    "LogStartOffset": p.log.log_start_offset,
                    "PartitionMaxBytes": cfg.partition_max_bytes,
                }
            )
        return {
            "ClusterId": None,
            "ReplicaId": cfg.node_id,
            "MaxWaitMs": cfg.max_wait_ms,
            "MinBytes": cfg.min_bytes,
            "MaxBytes": cfg.max_bytes,
            "IsolationLevel": IsolationLevel.READ_UNCOMMITTED,
            "SessionId": 0,
            "SessionEpoch": -1,
            "Topics": topics,
            "ForgottenTopicsData": [],
            "RackId": "",
        }

    async def _fetch_once(self, ready: list[Partition]) -> None:
        """One Fetch round trip for ``ready``; a partition answering an error is backed off on its own."""
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        parts = sorted(ready, key=lambda p: (p.topic, p.partition))
        body = await self._round_trip(reader, writer, self._request_body(parts))
        self.rounds += 1
        if body["ErrorCode"]:
            raise KafkaError(body["ErrorCode"], f"leader {self.leader_id} refused the fetch")
        retry_at = asyncio.get_running_loop().time() + self._config.backoff_ms / 1000
        for topic in body["Responses"]:
            for entry in topic["Partitions"]:
                tp = (topic["Topic"], entry["PartitionIndex"])
                partition = self.partitions.get(tp)
                if partition is None:
                    continue  # removed while the fetch was in flight
                if await self._process(partition, entry):
                    self._retry_at[tp] = retry_at
                else:
                    self._retry_at.pop(tp, None)

    async def _round_trip(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Send one Fetch and read until its answer is complete; return the answer's body."""
        _, chunks = self._state.send_request(ApiKey.FETCH, FETCH_VERSION, body)
        writer.writelines(chunks)
        timeout_s = (self._config.max_wait_ms + self._config.socket_timeout_ms) / 1000
        while True:
            try:
                data = await asyncio.wait_for(reader.read(_RECV_BYTES), timeout_s)
            except TimeoutError as exc:
                raise BrokerConnectionError(self._address, f"no answer within {timeout_s:g} s") from exc
            if not data:
                raise BrokerConnectionError(self._address, "connection closed by the leader")
            responses = self._state.receive_data(data)
            if responses:
                return responses[-1].body

    async def _truncate_diverging(self, partition: Partition, epoch: int, end_offset: int) -> bool:
        """The leader says this log diverges after ``end_offset`` of ``epoch``: truncate there (KIP-101/595)."""
        name = f"{partition.topic}-{partition.partition}"
        log = partition.log
        target = partition.truncation_offset(epoch, end_offset)
        below_hw = target < log.high_watermark
        _log.log(
            logging.WARNING if below_hw else logging.INFO,
            "node %d: %s: log diverges from leader %d (its epoch %d ends at %d, ours: last epoch %d, LEO %d); "
            "truncating to %d%s",
            self._config.node_id,
            name,
            self.leader_id,
            epoch,
            end_offset,
            partition.last_fetched_epoch,
            log.log_end_offset,
            target,
            f", below the high watermark {log.high_watermark} (records this replica had as committed are "
            "dropped: an unclean election happened)"
            if below_hw
            else "",
        )
        try:
            await partition.truncate_to_off_loop(target)
        except (StorageError, OSError) as exc:
            _log.error("node %d: %s: truncation to %d failed: %s", self._config.node_id, name, target, exc)
            return True
        return False

    def _follow_log_start(self, partition: Partition, leader_start: int) -> None:
        """Move this replica's log start up to the leader's (DeleteRecords on the leader), as Kafka's follower
        does with the fetch answer's ``LogStartOffset``; only as far as this replica's high watermark."""
        log = partition.log
        if leader_start > log.log_start_offset:
            try:
                log.delete_records_before(min(leader_start, log.high_watermark))
            except (StorageError, OSError, KafkaError) as exc:
                _log.warning(
                    "node %d: %s-%d: cannot follow the leader's log start %d: %s",
                    self._config.node_id,
                    partition.topic,
                    partition.partition,
                    leader_start,
                    exc,
                )

    async def _process(self, partition: Partition, entry: dict[str, Any]) -> bool:
        code = entry["ErrorCode"]
        name = f"{partition.topic}-{partition.partition}"
        diverging = entry.get("DivergingEpoch") or {}
        if code == ErrorCode.NONE and diverging.get("Epoch", -1) >= 0:
            return await self._truncate_diverging(partition, diverging["Epoch"], diverging["EndOffset"])
        if code == ErrorCode.NONE:
            try:
                partition.append_as_follower(entry["Records"], entry["HighWatermark"])
            except ProtocolError as exc:  # a batch that fails its header or CRC check: fetch it again later
                _log.error(
                    "node %d: invalid data fetched from leader %d for %s, retrying after back-off: %s",
                    self._config.node_id,
                    self.leader_id,
                    name,
                    exc,
                )
                return True
            except (StorageError, OSError) as exc:
                _log.error(
                    "node %d: appending fetched data of %s failed: %s", self._config.node_id, name, exc
                )
                if self._on_log_dir_failure is not None:
                    self._on_log_dir_failure(name, exc)
                return True
            self._follow_log_start(partition, entry.get("LogStartOffset", -1))
            if self._on_progress is not None:
                self._on_progress(partition)
            return False
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_hw = entry["HighWatermark"]
            leo = partition.log.log_end_offset
            if 0 <= leader_hw < leo:
                _log.warning(
                    "node %d: %s: LEO %d is beyond the leader's log; truncating to its HW %d",
                    self._config.node_id,
                    name,
                    leo,
                    leader_hw,
                )
                await partition.truncate_to_off_loop(leader_hw)
                return False
            leader_start = entry["LogStartOffset"]
            if leader_start > leo:
                _log.warning(
                    "node %d: %s: LEO %d is below the leader's log start %d; truncating fully and starting there",
                    self._config.node_id,
                    name,
                    leo,
                    leader_start,
                )
                try:
                    await partition.truncate_fully_and_start_at_off_loop(leader_start)
                except (StorageError, OSError) as exc:
                    _log.error("node %d: %s: full truncation failed: %s", self._config.node_id, name, exc)
                    return True
                return False
            _log.info(
                "node %d: %s: fetch offset %d with last fetched epoch %d out of range (leader log start %d, "
                "HW %d); retrying",
                self._config.node_id,
                name,
                leo,
                partition.last_fetched_epoch,
                leader_start,
                leader_hw,
            )
            return True
        if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH):
            # Our metadata and the leader's disagree on the epoch: fetching again before one of us learns the
            # new metadata cannot succeed; the metadata poll moves this partition (or the leader catches up).
            _log.info(
                "node %d: leader %d answered %s for %s at our epoch %d; waiting for new metadata, retrying "
                "in %d ms",
                self._config.node_id,
                self.leader_id,
                ErrorCode(code).name,
                name,
                partition.leader_epoch,
                self._config.backoff_ms,
            )
            return True
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            # The leader's authorizer refused this broker's login CLUSTER_ACTION: nothing replicates until an
            # operator fixes the ACLs, so say it loudly (Kafka's fetcher logs such errors at ERROR).
            _log.warning(
                "node %d: leader %d refused to replicate %s to us (TOPIC_AUTHORIZATION_FAILED): this broker's "
                "principal on inter.broker.listener.name needs CLUSTER_ACTION on the cluster (list it in "
                "super.users or grant it); retrying",
                self._config.node_id,
                self.leader_id,
                name,
            )
            return True
        _log.info(
            "node %d: leader %d answered %s for %s; retrying",
            self._config.node_id,
            self.leader_id,
            ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
            name,
        )
        return True
