"""Incremental fetch sessions (KIP-227): the broker's cache of what each fetcher asked for last.

A fetcher (consumer or follower) that sends a *full* fetch (``SessionEpoch`` 0) may be given a session: the
answer carries a ``SessionId`` and the broker keeps, per partition of that fetch, the request's parameters
(fetch offset, max bytes, leader epochs) and the last high watermark and log start offset it answered. The
fetcher's next requests are *incremental* (``SessionId``, ``SessionEpoch`` n = 1, 2, ...): they name only the
partitions whose parameters changed (added or updated) and those to drop (``ForgottenTopicsData``); the broker
reads every partition of the session and answers only those with records, a changed high watermark or log start
offset, an error or a diverging epoch (Kafka's ``CachedPartition.maybeUpdateResponseData``: the last stable
offset alone does not make a partition answered). A partition answered with records moves to the end of the
session's order, so a fetch limited by ``MaxBytes`` serves the others first next time.

Protocol rules (Kafka's ``FetchManager.newContext`` and ``FetchMetadata``):
  * epoch 0 (full): a session the request names is closed first; after the answer is computed a new session is
    made when the cache admits it (see eviction) and its id answered, else ``SessionId`` 0;
  * epoch -1 (final, and every Fetch below v7): the named session is closed; the fetch is sessionless;
  * epoch n > 0: an unknown id answers FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's
    INVALID_FETCH_SESSION_EPOCH, a session made by v13+ (topic ids) used by v12- or the reverse
    FETCH_SESSION_TOPIC_ID_ERROR -- each with ``SessionId`` 0 and no partitions. Otherwise the session is
    updated, its epoch advances (after ``INT_MAX`` it wraps to 1), and a session left without partitions is
    closed (the fetch is answered sessionless). When the answer is built the session must still be at the epoch
    this request moved it to (a duplicate request in between answers INVALID_FETCH_SESSION_EPOCH).

Bounds (nothing a client sends grows the broker without limit):
  * at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000; 0: no sessions).
    Kafka splits its slots over 8 shards by integer division (under 8 slots it keeps none); pylog has one event
    loop and one cache holding exactly that many;
  * a session never holds more partitions than the cluster metadata names (at least 1): a full fetch naming more
    makes no session, and an incremental fetch growing past it closes the session (a WARNING, counted in
    ``pylog_fetch_sessions_oversize_closed``) and is answered sessionless, so the fetcher starts over.

Eviction when the cache is full (Kafka's ``FetchSessionCacheShard.tryEvict``): the session unused longest is
evicted when it has been unused for more than :data:`EVICTION_MS` (Kafka's
``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``, 2 minutes); otherwise the least valuable evictable session --
ordered by (privileged, partitions, id) -- is evicted when the new one is worth more: a follower's (privileged)
session over a consumer's, else one with more partitions. A session is evictable by a consumer's once it was
older than :data:`EVICTION_MS` when last used, by a follower's also when it is a consumer's. Evictions count in
``IncrementalFetchSessionEvictionsPerSec``. The Fetch handler makes a session privileged only for a fetcher allowed
to fetch as a follower (CLUSTER_ACTION); Kafka takes any ReplicaId >= 0.

Security: sessions are not tied to connections (KIP-227: a fetcher keeps its session across reconnects), but
pylog ties each to the principal that made it: another principal naming its id is answered as if it did not
exist (FETCH_SESSION_ID_NOT_FOUND; a full fetch naming it does not close it). Kafka does not check this --
READ is re-checked on every fetch there as here, so a stolen id reads nothing the thief may not read, but it
could advance or empty another client's session. Ids are drawn from :mod:`secrets` over [1, INT_MAX].

Threading: the event-loop thread only (handlers and metrics snapshots run there); no locks.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker_runtime.configdef import INT_MAX

_log = logging.getLogger(__name__)

__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: A session unused this long may be evicted by anyone; younger sessions only by more valuable ones.
EVICTION_MS = 120_000

#: A partition of a session: (topic name, index) in sessions made below v13, (topic id, index) from v13.
PartitionKey = tuple[str | uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``): -1 stays -1, INT_MAX wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What a session remembers of one partition: the fetcher's last parameters and the broker's last answer
    (-1: nothing answered yet, or an error, so the next answer always includes it)."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    high_watermark: int = -1
    log_start_offset: int = -1

    def update_request(
        self, fetch_offset: int, max_bytes: int, current_leader_epoch: int, last_fetched_epoch: int
    ) -> None:
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch

    def must_respond(
        self, records_size: int, high_watermark: int, log_start_offset: int, error: int, diverging: bool
    ) -> bool:
        """Should this partition be in the incremental answer? Updates the remembered answer (Kafka's
        ``maybeUpdateResponseData`` with updating on)."""
        respond = records_size > 0 or diverging
        if self.high_watermark != high_watermark:
            self.high_watermark = high_watermark
            respond = True
        if self.log_start_offset != log_start_offset:
            self.log_start_offset = log_start_offset
            respond = True
        if error:
            self.high_watermark = -1  # answered again once the error is gone
            respond = True
        return respond


@dataclass(slots=True, eq=False)
class FetchSession:
    """One session; its partitions in answer order (a dict keeps insertion order)."""

    id: int
    principal: str
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    partitions: dict[PartitionKey, CachedPartition]
    epoch: int = 1
    last_used_ms: int = 0
    #: Set at each use, as Kafka's ``touch``: may a consumer's new session evict this one, may a follower's?
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False
    #: The partition count the cache last accounted for this session.
    cached_size: int = field(default=0)

    def update(
        self,
        fetched: Iterable[tuple[PartitionKey, uuid.UUID | None, int, int, int, int]],
        forgotten: Iterable[PartitionKey],
    ) -> None:
        """Apply an incremental request: ``fetched`` (key, topic id, fetch offset, max bytes, current leader
        epoch, last fetched epoch) added or updated, ``forgotten`` removed."""
        parts = self.partitions
        for key, topic_id, offset, max_bytes, leader_epoch, last_epoch in fetched:
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(topic_id, offset, max_bytes, leader_epoch, last_epoch)
            else:
                cached.update_request(offset, max_bytes, leader_epoch, last_epoch)
        for key in forgotten:
            parts.pop(key, None)

    def moved_to_end(self, key: PartitionKey) -> None:
        """A partition answered with records goes last (Kafka re-inserts it)."""
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached


class FetchSessionCache:
    """The sessions of one broker; see the module docstring. ``now_ms`` is a monotonic clock in milliseconds."""

    def __init__(self, max_slots: int, now_ms: Callable[[], int], eviction_ms: int = EVICTION_MS) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._now_ms = now_ms
        self._sessions: dict[int, FetchSession] = {}
        #: Sessions by last use, least recent first.
        self._last_used: OrderedDict[int, FetchSession] = OrderedDict()
        self.partitions_cached = 0
        #: Counters (cumulative): sessions evicted (``IncrementalFetchSessionEvictionsPerSec``), incremental
        #: fetches served, sessions closed for growing past the partition bound.
        self.evictions = 0
        self.incremental_fetches = 0
        self.oversize_closed = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def now_ms(self) -> int:
        return self._now_ms()

    def get(self, session_id: int, principal: str) -> FetchSession | None:
        """The session ``session_id`` when ``principal`` made it, else None (as if it did not exist)."""
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        return session

    def remove(self, session: FetchSession) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self._last_used.pop(session.id, None)
        self.partitions_cached -= session.cached_size

    def touch(self, session: FetchSession, now: int) -> None:
        """``session`` was used at ``now``: its last use, evictability and partition count are brought up to date
        (Kafka's ``touch``)."""
        session.last_used_ms = now
        self._last_used.pop(session.id, None)
        self._last_used[session.id] = session
        old_enough = now - session.creation_ms > self.eviction_ms
        session.evictable_by_all = old_enough
        session.evictable_by_privileged = old_enough or not session.privileged
        size = len(session.partitions)
        self.partitions_cached += size - session.cached_size
        session.cached_size = size

    def maybe_create(
        self,
        principal: str,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """A new session holding ``partitions`` when there is a free slot or one may be evicted; its id, else
        :data:`INVALID_SESSION_ID`."""
        if self.max_slots <= 0:
            return INVALID_SESSION_ID
        now = self._now_ms()
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(session_id, principal, privileged, uses_topic_ids, now, partitions)
        self._sessions[session_id] = session
        self.touch(session, now)
        return session_id

    def _new_id(self) -> int:
        while True:
            candidate = 1 + secrets.randbelow(INT_MAX)
            if candidate not in self._sessions:
                return candidate

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Make room for a new session of ``size`` partitions (Kafka's ``tryEvict``); True when one was evicted.
        The stale check is O(1); the value check scans the sessions (at most ``max_slots``), only when full."""
        if not self._last_used:
            return False
        oldest = next(iter(self._last_used.values()))
        if now - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [
            s
            for s in self._sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        # The new session's key is (privileged, size, 0): it loses every tie, as in Kafka.
        if (privileged, size) <= (victim.privileged, victim.cached_size):
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        _log.debug("evicting fetch session %d (%d partitions)", session.id, session.cached_size)
        self.remove(session)
        self.evictions += 1
