"""Fetch (key 1, v4-18): committed records from the high watermark down, with min bytes / max wait.

Semantics (Kafka's ``ReplicaManager.fetchMessages`` / ``DelayedFetch``):
  * v13+ name topics by id (KIP-516; the answer names them by id too): an id the cluster metadata does not know
    answers UNKNOWN_TOPIC_ID for each of its partitions, and a partition whose local log belongs to another
    incarnation of the topic (its ``partition.metadata`` names another id) INCONSISTENT_TOPIC_ID, as Kafka's
    ``Partition.fetchRecords`` does; v15+ take a follower's id from ``ReplicaState``. pylog's own followers
    (:mod:`broker_runtime.replication.fetcher`) still fetch by name at v12: the names are theirs to resolve from
    the same metadata, and v13+ adds nothing they use;
  * fetch sessions (KIP-227, :mod:`broker_runtime.server.fetch_sessions`): a full fetch (SessionEpoch 0) may
    be answered a SessionId; an incremental one (the session's epoch) reads every partition of the session and
    answers only those with records or a changed high watermark / log start offset, an error or a diverging
    epoch; session errors (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
    FETCH_SESSION_TOPIC_ID_ERROR) answer no partitions. Authorization, leadership and every other check below
    apply to the session's partitions on every fetch, as Kafka's ``foreachPartition`` does: a session never
    keeps a right, and a partition whose leader moved answers NOT_LEADER_OR_FOLLOWER in it until the fetcher
    forgets it (Kafka keeps the session too);
  * partitions are read in request order; each reads at most ``PartitionMaxBytes`` and the whole response at
    most ``MaxBytes`` (for a consumer with a ``consumer_byte_rate`` quota, at most what the quota allows in one
    quota window, as Kafka limits it; the dispatcher throttles the answer), except that the first partition returning data returns at least one whole batch
    (``min_one_batch``), so a batch larger than the limits never blocks a consumer;
  * reads stop at the high watermark; with IsolationLevel 1 (read_committed) at the last stable offset, and
    AbortedTransactions lists (producer id, first offset) of the aborted transactions overlapping the returned
    records (an empty list when none; null under read_uncommitted, as Kafka). LastStableOffset is the
    partition's in every answer;
  * checked first, before anything is read or recorded (``Partition.validate_fetch``, Kafka's
    ``Partition.fetchRecords``): a CurrentLeaderEpoch (v9+) older than the partition's leader epoch on this
    broker gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, for consumers and followers alike; then
    a replica that does not lead answers NOT_LEADER_OR_FOLLOWER;
  * v12+ LastFetchedEpoch >= 0 (KIP-595): when the leader cannot tell where that epoch ends, or the fetch offset
    is below its log start, OFFSET_OUT_OF_RANGE; when the leader's end offset for that epoch is below the fetch
    offset, or the leader's largest epoch up to it is smaller, the fetcher's log diverges: the partition answers
    NONE, no records and DivergingEpoch = the leader's (epoch, end offset); a follower truncates there and
    fetches again. Such a follower fetch (like a fenced one) is not recorded as its log end offset -- it is not
    caught up to anything;
  * a fetch offset outside [log start, log end] gets OFFSET_OUT_OF_RANGE;
  * follower fetches (``ReplicaId`` >= 0, a replica of the partition): the fetch offset is the follower's log
    end offset and is recorded first (it may move the high watermark and the ISR, see
    :meth:`ReplicaManager.record_follower_fetch`); they read up to the log end offset, consumers only up to
    the high watermark. Only the leader serves either; other replicas answer NOT_LEADER_OR_FOLLOWER;
  * the fetch answers at once when MaxWaitMs <= 0, enough bytes (>= MinBytes) are there, or a partition has an
    error; otherwise a :class:`DelayedFetch` waits in the fetch purgatory, watched by every partition, until an
    append brings enough bytes (``check_and_complete`` from the ReplicaManager) or MaxWaitMs expires.

Zero copy (Kafka's ``FileRecords`` written with ``transferTo``): on a PLAINTEXT or SASL_PLAINTEXT connection
with ``pylog.fetch.sendfile`` on (the default), a partition's records of at least
:data:`~broker_runtime.server.network.SENDFILE_MIN_BYTES` are not read: the answer carries a
:class:`~broker_runtime.storage.file_handle.FileSlice` of the segment file, and the connection sends it with
``sendfile`` (the frame is byte for byte the one a read would give). On TLS connections the records are read
into the answer, as Kafka does (the bytes must pass through the TLS engine); smaller ranges are read too (one
copy costs less than a sendfile's extra round through the event loop).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, NamedTuple

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.batch_header import HEADER_SIZE
from broker_runtime.protocol.messages import CONSUMER_REPLICA_ID, IsolationLevel, RequestHeader, fetch
from broker_runtime.purgatory.delayed_operation import DelayedOperation
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    PartitionKey,
    next_epoch,
)
from broker_runtime.server.network import SENDFILE_MIN_BYTES
from broker_runtime.server.quota_manager import user_of
from broker_runtime.server.replica_manager import ReadResult

_log = logging.getLogger(__name__)

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "DelayedFetch", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = fetch.REQUEST
MIN_VERSION = 4
MAX_VERSION = 18

#: Security protocols whose connections write plain socket bytes (so ``sendfile`` can write the records).
_PLAIN_SOCKETS = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})


class _PartitionFetch(NamedTuple):
    #: The topic's name ("" for a v13+ topic id the metadata does not know).
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int = -1
    read_committed: bool = False
    #: v13+: the id the request named the topic by.
    topic_id: uuid.UUID | None = None

    @property
    def key(self) -> PartitionKey:
        """The partition's key in a fetch session: by topic id from v13, else by name."""
        return (self.topic_id if self.topic_id is not None else self.topic, self.partition)


def _validate(ctx: BrokerContext, part: _PartitionFetch) -> ReadResult | None:
    """The answer for a partition refused before reading (unknown or inconsistent topic id, fenced or unknown
    epoch, not the leader, out of range for its last fetched epoch) or whose fetcher's log diverges, else None."""
    if part.topic_id is not None:
        if not part.topic:
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_ID)
        log = ctx.topics.get_log(part.topic, part.partition)
        if log is not None and log.topic_id is not None and log.topic_id != part.topic_id:
            return ReadResult(ErrorCode.INCONSISTENT_TOPIC_ID)
    code, diverging = ctx.replicas.validate_fetch(
        part.topic, part.partition, part.current_leader_epoch, part.fetch_offset, part.last_fetched_epoch
    )
    if code == ErrorCode.NONE and diverging is None:
        return None
    if code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
        # The follower needs the leader's HW and log start to decide how to truncate after these.
        return ReadResult(code, b"", _hw(ctx, part), _log_start(ctx, part), diverging)
    return ReadResult(code)  # HW and log start unknown (-1), as Kafka answers an error


def _slice_min_bytes(ctx: BrokerContext) -> int | None:
    """The ``slice_min_bytes`` of the current request's reads: None (read the records) unless sendfile applies."""
    if ctx.config.fetch_sendfile and ctx.request_session.security_protocol in _PLAIN_SOCKETS:
        return SENDFILE_MIN_BYTES
    return None


def _read_all(
    ctx: BrokerContext,
    parts: list[_PartitionFetch],
    max_bytes: int,
    replica_id: int = CONSUMER_REPLICA_ID,
    slice_min_bytes: int | None = None,
) -> tuple[list[ReadResult], int, bool]:
    """Read every partition within the limits; returns (results, total bytes, any error)."""
    remaining = max_bytes
    total = 0
    any_error = False
    results: list[ReadResult] = []
    replicas = ctx.replicas
    for part in parts:
        refused = _validate(ctx, part)
        if refused is not None:  # fenced, unknown epoch, or diverging: answered at once, without records
            results.append(refused)
            any_error = True
            continue
        limit = min(part.max_bytes, remaining)
        if limit < HEADER_SIZE and total > 0:
            # No batch fits in what is left (a batch is at least its header): answer the partition's offsets
            # without reading (its log start too, so a fetch session does not see it change).
            hw = replicas.high_watermark(part.topic, part.partition)
            if hw is not None:
                lso = replicas.last_stable_offset(part.topic, part.partition)
                aborted: list[tuple[int, int]] | None = [] if part.read_committed else None
                results.append(
                    ReadResult(
                        ErrorCode.NONE,
                        b"",
                        hw,
                        _log_start(ctx, part),
                        last_stable_offset=lso,
                        aborted=aborted,
                    )
                )
                continue
        result = replicas.read(
            part.topic,
            part.partition,
            part.fetch_offset,
            max(limit, 0),
            min_one_batch=total == 0,
            replica_id=replica_id,
            read_committed=part.read_committed,
            slice_min_bytes=slice_min_bytes,
        )
        if result.error:
            any_error = True
        size = result.size
        total += size
        remaining -= size
        results.append(result)
    return results, total, any_error


def _count_out(
    ctx: BrokerContext, replica_id: int, parts: list[_PartitionFetch], results: list[ReadResult]
) -> None:
    """A consumer's answer counts as the topics' BytesOut (a follower's is replication, as Kafka counts it)."""
    metrics = ctx.metrics
    if metrics is None or replica_id >= 0:
        return
    for part, result in zip(parts, results, strict=True):
        if result.size:
            metrics.fetched(part.topic, result.size)


class _Shape:
    """How a fetch's answer is shaped by its session: sessionless (every partition, SessionId 0), full (every
    partition; a new session is made from them when the cache admits it) or incremental (only the partitions
    the session must answer). Made while its request is handled: it keeps that request's principal, as a full
    fetch parked in the purgatory makes its session when it completes -- on whichever request's append (another
    connection's Produce, another principal's) or timer expiry completes it, when ``ctx.request_session`` is not
    the fetcher's."""

    __slots__ = ("ctx", "expected_epoch", "mode", "principal", "privileged", "session")

    def __init__(
        self,
        ctx: BrokerContext,
        mode: str,
        session: FetchSession | None = None,
        privileged: bool = False,
    ) -> None:
        self.ctx = ctx
        self.principal = ctx.request_session.principal  # the fetcher's, whenever the answer is built
        self.mode = mode  # "sessionless", "full" or "incremental"
        self.session = session
        self.privileged = privileged
        self.expected_epoch = session.epoch if session is not None else 0

    def apply(
        self, version: int, parts: list[_PartitionFetch], results: list[ReadResult]
    ) -> tuple[int, int, list[_PartitionFetch], list[ReadResult]]:
        """(error, session id, partitions answered, their results)."""
        if self.mode == "full":
            return ErrorCode.NONE, self._create(version, parts, results), parts, results
        session = self.session
        if self.mode == "sessionless" or session is None:
            return ErrorCode.NONE, INVALID_SESSION_ID, parts, results
        if session.epoch != self.expected_epoch:  # another request of this session ran in between
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [], []
        kept_parts: list[_PartitionFetch] = []
        kept: list[ReadResult] = []
        cached_parts = session.partitions
        for part, result in zip(parts, results, strict=True):
            cached = cached_parts.get(part.key)
            if cached is None:
                continue
            size = result.size
            if cached.must_respond(
                size,
                result.high_watermark,
                result.log_start_offset,
                result.error,
                result.diverging is not None,
            ):
                kept_parts.append(part)
                kept.append(result)
                if size > 0:
                    session.moved_to_end(part.key)
        return ErrorCode.NONE, session.id, kept_parts, kept

    def _create(self, version: int, parts: list[_PartitionFetch], results: list[ReadResult]) -> int:
        ctx = self.ctx
        cached: dict[PartitionKey, CachedPartition] = {}
        for part, result in zip(parts, results, strict=True):
            cached[part.key] = CachedPartition(
                part.topic_id,
                part.fetch_offset,
                part.max_bytes,
                part.current_leader_epoch,
                part.last_fetched_epoch,
                result.high_watermark,
                result.log_start_offset,
            )
        if len(cached) > _partition_bound(ctx):
            return INVALID_SESSION_ID
        return ctx.fetch_sessions.maybe_create(self.principal, self.privileged, version >= 13, cached)


def _partition_bound(ctx: BrokerContext) -> int:
    """The most partitions one session may hold: as many as the cluster metadata names (at least 1)."""
    return max(1, sum(len(t.partitions) for t in ctx.cluster.view.topics.values()))


def _response(
    version: int, parts: list[_PartitionFetch], results: list[ReadResult], shape: _Shape
) -> dict[str, Any]:
    error, session_id, parts, results = shape.apply(version, parts, results)
    topics: list[dict[str, Any]] = []
    by_id = version >= 13
    for part, result in zip(parts, results, strict=True):
        if by_id:
            if not topics or topics[-1]["TopicId"] != part.topic_id:
                topics.append({"TopicId": part.topic_id, "Partitions": []})
        elif not topics or topics[-1]["Topic"] != part.topic:
            topics.append({"Topic": part.topic, "Partitions": []})
        entries: list[dict[str, Any]] = topics[-1]["Partitions"]
        entries.append(
            {
                "PartitionIndex": part.partition,
                "ErrorCode": result.error,
                "HighWatermark": result.high_watermark,
                "LastStableOffset": (
                    result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark
                ),
                "LogStartOffset": result.log_start_offset,
                "AbortedTransactions": (
                    None
                    if result.aborted is None
                    else [{"ProducerId": pid, "FirstOffset": first} for pid, first in result.aborted]
                ),
                "PreferredReadReplica": -1,
                "DivergingEpoch": (
                    {"Epoch": result.diverging[0], "EndOffset": result.diverging[1]}
                    if result.diverging is not None
                    else {"Epoch": -1, "EndOffset": -1}
                ),
                "Records": result.file_slice if result.file_slice is not None else result.records,
            }
        )
    return {"ThrottleTimeMs": 0, "ErrorCode": error, "SessionId": session_id, "Responses": topics}


def _denied_topics(ctx: BrokerContext, parts: list[_PartitionFetch], replica_id: int) -> set[str]:
    """Topics this fetch may not read: a consumer needs READ on each topic; a follower (ReplicaId >= 0) must come
    in on the inter-broker listener or hold CLUSTER_ACTION on the cluster, else every topic is refused (Kafka
    answers a follower fetch without CLUSTER_ACTION with TOPIC_AUTHORIZATION_FAILED for each partition)."""
    topics = {p.topic for p in parts if p.topic}  # "": an unknown topic id, answered UNKNOWN_TOPIC_ID
    if replica_id >= 0:
        if ctx.inter_broker_allowed():
            return set()
        _log.warning(
            "follower-style fetch (replica id %d) from %s on listener %s refused: no CLUSTER_ACTION",
            replica_id,
            ctx.request_session.principal,
            ctx.request_session.listener,
        )
        return topics
    return {t for t in topics if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t)}


def _hw(ctx: BrokerContext, part: _PartitionFetch) -> int:
    hw = ctx.replicas.high_watermark(part.topic, part.partition)
    return -1 if hw is None else hw


def _log_start(ctx: BrokerContext, part: _PartitionFetch) -> int:
    start = ctx.replicas.log_start_offset(part.topic, part.partition)
    return -1 if start is None else start


class DelayedFetch(DelayedOperation):
    """A fetch waiting for MinBytes of new data or MaxWaitMs; completes its future exactly once."""

    __slots__ = (
        "_ctx",
        "_future",
        "_max_bytes",
        "_min_bytes",
        "_parts",
        "_replica_id",
        "_results",
        "_shape",
        "_slice_min_bytes",
        "_version",
    )

    def __init__(
        self,
        ctx: BrokerContext,
        version: int,
        parts: list[_PartitionFetch],
        min_bytes: int,
        max_bytes: int,
        max_wait_ms: int,
        future: asyncio.Future[Any],
        shape: _Shape,
        replica_id: int = CONSUMER_REPLICA_ID,
        slice_min_bytes: int | None = None,
    ) -> None:
        super().__init__(max_wait_ms)
        self._shape = shape
        self._replica_id = replica_id
        # fixed by the request's connection (the op may complete while another connection's request runs)
        self._slice_min_bytes = slice_min_bytes
        self._ctx = ctx
        self._version = version
        self._parts = parts
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._future = future
        self._results: list[ReadResult] | None = None

    def try_complete(self) -> bool:
        if self._future.done():  # the connection went away: nothing to wait for
            return self.force_complete()
        results, total, any_error = _read_all(
            self._ctx, self._parts, self._max_bytes, self._replica_id, self._slice_min_bytes
        )
        if any_error or total >= self._min_bytes:
            self._results = results
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        results = self._results
        if results is None:
            results, _, _ = _read_all(
                self._ctx, self._parts, self._max_bytes, self._replica_id, self._slice_min_bytes
            )
        if not self._future.done():
            _count_out(self._ctx, self._replica_id, self._parts, results)
            self._future.set_result(_response(self._version, self._parts, results, self._shape))


def _topic_names(ctx: BrokerContext, topics: list[dict[str, Any]]) -> list[str]:
    """v13+: the name of each requested topic id ("" when the metadata does not know it, even after a refresh:
    a topic just created elsewhere may not be in this broker's view yet)."""
    by_id = ctx.cluster.view.names_by_id()
    if any(t["TopicId"] not in by_id for t in topics):
        ctx.refresh_cluster()
        by_id = ctx.cluster.view.names_by_id()
    return [by_id.get(t["TopicId"], "") for t in topics]


def _session_error(code: ErrorCode) -> dict[str, Any]:
    """A session error: no partitions, SessionId 0 (Kafka's ``SessionErrorContext``)."""
    return {"ThrottleTimeMs": 0, "ErrorCode": code, "SessionId": INVALID_SESSION_ID, "Responses": []}


def _session_parts(
    ctx: BrokerContext, session: FetchSession, read_committed: bool, names: dict[uuid.UUID, str]
) -> list[_PartitionFetch]:
    """Every partition of ``session`` in its order, as a fetch reads them (names of v13+ topics resolved now:
    an id unknown when the session cached it may be known since)."""
    parts: list[_PartitionFetch] = []
    for (topic, index), cached in session.partitions.items():
        if cached.topic_id is not None:
            name = names.get(cached.topic_id, "")
        else:
            name = topic if isinstance(topic, str) else ""
        parts.append(
            _PartitionFetch(
                name,
                index,
                cached.fetch_offset,
                cached.max_bytes,
                cached.current_leader_epoch,
                cached.last_fetched_epoch,
                read_committed,
                cached.topic_id,
            )
        )
    return parts


def _forgotten(version: int, body: dict[str, Any]) -> list[PartitionKey]:
    keys: list[PartitionKey] = []
    for topic in body["ForgottenTopicsData"]:
        named = topic["TopicId"] if version >= 13 else topic["Topic"]
        keys.extend((named, index) for index in topic["Partitions"])
    return keys


def _session_shape(
    ctx: BrokerContext,
    version: int,
    body: dict[str, Any],
    requested: list[_PartitionFetch],
    replica_id: int,
) -> tuple[_Shape, list[_PartitionFetch]] | dict[str, Any]:
    """The session context of a fetch (Kafka's ``FetchManager.newContext``) and the partitions it reads, or the
    answer of a session error."""
    cache = ctx.fetch_sessions
    principal = ctx.request_session.principal
    session_id, epoch = body["SessionId"], body["SessionEpoch"]
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            old = cache.get(session_id, principal)
            if old is not None:
                cache.remove(old)
        mode = "full" if epoch == INITIAL_EPOCH else "sessionless"
        # A follower's session is privileged (it may evict consumers' sessions): only for a fetcher allowed to
        # fetch as a follower, else anyone could claim a replica id to evict the others (Kafka does not check).
        privileged = replica_id >= 0 and ctx.inter_broker_allowed()
        return _Shape(ctx, mode, privileged=privileged), requested
    session = cache.get(session_id, principal)
    if session is None:
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != (version >= 13):
        return _session_error(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    before = len(session.partitions)
    session.update(
        (
            (p.key, p.topic_id, p.fetch_offset, p.max_bytes, p.current_leader_epoch, p.last_fetched_epoch)
            for p in requested
        ),
        _forgotten(version, body),
    )
    size = len(session.partitions)
    if size > before and size > _partition_bound(ctx):
        cache.remove(session)
        cache.oversize_closed += 1
        _log.warning(
            "fetch session %d of %s closed: %d partitions, more than the cluster's %d; answered sessionless",
            session.id,
            principal,
            size,
            _partition_bound(ctx),
        )
        return _Shape(ctx, "sessionless"), requested
    if size == 0:
        cache.remove(session)
        return _Shape(ctx, "sessionless"), requested
    cache.touch(session, cache.now_ms())
    session.epoch = next_epoch(session.epoch)
    cache.incremental_fetches += 1
    names = ctx.cluster.view.names_by_id() if session.uses_topic_ids else {}
    return _Shape(ctx, "incremental", session), _session_parts(
        ctx, session, body["IsolationLevel"] == IsolationLevel.READ_COMMITTED, names
    )


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    version = header.api_version
    read_committed = body["IsolationLevel"] == IsolationLevel.READ_COMMITTED
    names = _topic_names(ctx, body["Topics"]) if version >= 13 else [t["Topic"] for t in body["Topics"]]
    requested = [
        _PartitionFetch(
            name,
            p["Partition"],
            p["FetchOffset"],
            p["PartitionMaxBytes"],
            p["CurrentLeaderEpoch"],
            p["LastFetchedEpoch"] if version >= 12 else -1,
            read_committed,
            t["TopicId"] if version >= 13 else None,
        )
        for t, name in zip(body["Topics"], names, strict=True)
        for p in t["Partitions"]
    ]
    replica_id = body["ReplicaState"]["ReplicaId"] if version >= 15 else body["ReplicaId"]
    shaped = _session_shape(ctx, version, body, requested, replica_id)
    if isinstance(shaped, dict):
        return shaped
    shape, parts = shaped
    max_bytes = body["MaxBytes"]
    min_bytes = body["MinBytes"]
    max_wait = body["MaxWaitMs"]
    if replica_id < 0 and ctx.client_quotas.fetch.enabled:
        # Kafka's KafkaApis: a consumer fetches at most what its consumer_byte_rate allows in one quota window
        window_bytes = ctx.client_quotas.fetch.max_value_in_window(
            user_of(ctx.request_session.principal), header.client_id or ""
        )
        if window_bytes is not None:
            max_bytes = max(0, min(max_bytes, int(window_bytes)))
    slice_min = _slice_min_bytes(ctx)
    if ctx.authorizer is not None:
        denied = _denied_topics(ctx, parts, replica_id)
        if denied:
            # Answer at once: the refused partitions with TOPIC_AUTHORIZATION_FAILED, the others as read now.
            allowed = [p for p in parts if p.topic not in denied]
            read, _, _ = _read_all(ctx, allowed, max_bytes, replica_id, slice_min)
            by_part = dict(zip((id(p) for p in allowed), read, strict=True))
            results = [
                by_part[id(p)] if id(p) in by_part else ReadResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for p in parts
            ]
            return _response(version, parts, results, shape)
    if any(ctx.topics.partition_count(t) is None for t in {p.topic for p in parts if p.topic}):
        ctx.refresh_cluster()
    if replica_id >= 0:
        # A follower's fetch offset is its log end offset -- unless its fetch is fenced or its log diverges,
        # in which case it is not recorded (it is not caught up to anything).
        errors = [
            ErrorCode.NONE
            if _validate(ctx, p) is not None
            else ctx.replicas.record_follower_fetch(p.topic, p.partition, replica_id, p.fetch_offset)
            for p in parts
        ]
        if any(errors):
            # Answer at once, failed partitions with their error and the others as read now: the follower
            # backs the failed ones off and fetches the others again right away. The log start offset tells a
            # follower that fell below it where to start over.
            results, _, _ = _read_all(ctx, parts, max_bytes, replica_id, slice_min)
            results = [
                ReadResult(code, b"", _hw(ctx, p), _log_start(ctx, p)) if code else result
                for p, code, result in zip(parts, errors, results, strict=True)
            ]
            return _response(version, parts, results, shape)
    results, total, any_error = _read_all(ctx, parts, max_bytes, replica_id, slice_min)
    if max_wait <= 0 or not parts or total >= min_bytes or any_error:
        _count_out(ctx, replica_id, parts, results)
        return _response(version, parts, results, shape)
    future: asyncio.Future[Any] = ctx.loop.create_future()
    op = DelayedFetch(
        ctx, version, parts, min_bytes, max_bytes, max_wait, future, shape, replica_id, slice_min
    )
    keys = {(p.topic, p.partition) for p in parts}
    if not ctx.fetch_purgatory.try_complete_else_watch(op, keys):
        ctx.schedule_timer()
    return future
