"""The connector's Kafka clients: how the reader and the writer connect, and the topic lookup both sides share.

Runs on: driver (planning, commit); executors (task).

Where this runs: the **driver** (planning a read, checking a write's topic) and the **executors** (read and
write tasks); every caller owns the client it gets and closes it, except a :func:`kept_client`, which the
process keeps between calls (the streaming sink's driver calls, once per micro-batch, in Python workers PySpark
reuses; one call at a time per process, no threads). Clients are lazy: nothing connects before the first
request. The version floors below are the protocol features the connector relies on:

* Metadata v4+ carries ``AllowAutoTopicCreation``: a read never creates a topic, a write asks for it;
* ListOffsets v1+ answers one offset per timestamp (the reader's time lookups); v2+ carries the
  IsolationLevel, so a ``read_committed`` reader requires it (an older broker would silently answer the high
  watermark instead of the last stable offset);
* Fetch v5+ carries the log start offset (the reader's data-loss checks).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from broker_runtime.client import BrokerConnectionError, KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security import ClientSecurity
from spark_kafka_log.common.reader_options import ReaderOptions

__all__ = ["drop_kept_client", "kept_client", "reader_client", "topic_partitions", "writer_client"]

_READER_MIN_VERSIONS: dict[int, int] = {ApiKey.METADATA: 4, ApiKey.LIST_OFFSETS: 1, ApiKey.FETCH: 5}
#: read_committed: ListOffsets with IsolationLevel (v2); Fetch v4 already has it (below the reader's floor).
_READ_COMMITTED_MIN_VERSIONS: dict[int, int] = {**_READER_MIN_VERSIONS, ApiKey.LIST_OFFSETS: 2}
_WRITER_MIN_VERSIONS: dict[int, int] = {ApiKey.METADATA: 4}


def reader_client(bootstrap_servers: str, options: ReaderOptions) -> KafkaClient:
    """The reader's client (``kafka.client.id``, ``kafka.request.timeout.ms``); never auto-creates a topic.

    Leader moves (failover) are retried for ``kafka.default.api.timeout.ms`` per call, ``kafka.retry.backoff.ms``
    apart."""
    return KafkaClient(
        bootstrap_servers,
        client_id=options.client_id,
        request_timeout_ms=options.request_timeout_ms,
        retry_backoff_ms=options.retry_backoff_ms,
        retry_timeout_ms=options.default_api_timeout_ms,
        min_versions=_READ_COMMITTED_MIN_VERSIONS if options.read_committed else _READER_MIN_VERSIONS,
        security=options.security,
    )


def writer_client(
    bootstrap_servers: str,
    *,
    client_id: str,
    request_timeout_ms: int,
    retry_backoff_ms: int = 100,
    retry_timeout_ms: int | None = None,
    security: ClientSecurity | None = None,
) -> KafkaClient:
    """The writer's client (driver check or executor task); an executor's retries leader moves of its offset
    lookups within ``retry_timeout_ms`` (the task's delivery timeout)."""
    return KafkaClient(
        bootstrap_servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_timeout_ms=retry_timeout_ms,
        min_versions=_WRITER_MIN_VERSIONS,
        security=security,
    )


#: Errors about who the client is, not about the topic: passed on as the broker said them.
_LOGIN_OR_ACL_ERRORS = frozenset(
    {
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        ErrorCode.ILLEGAL_SASL_STATE,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def topic_partitions(client: KafkaClient, topic: str) -> int:
    """Partitions of ``topic``, asking the broker to auto-create it (with its num.partitions). A refused login
    or authorization is raised as the broker answered it (never as a missing topic)."""
    try:
        return len(client.partitions_for(topic, allow_auto_create=True))
    except BrokerConnectionError:
        raise
    except KafkaError as exc:
        if exc.code in _LOGIN_OR_ACL_ERRORS:
            raise
        raise KafkaError(
            exc.code,
            f"topic {topic!r} is not available for writing (auto-creation disabled on the broker? "
            "create it first)",
        ) from exc


#: purpose -> (the settings it was made with, the client); see :func:`kept_client`.
_kept: dict[str, tuple[Hashable, KafkaClient]] = {}


def kept_client(purpose: str, settings: Hashable, make: Callable[[], KafkaClient]) -> KafkaClient:
    """The client this process keeps for ``purpose``, made by ``make`` when there is none for these ``settings``.

    It saves a connection (and the coordinator lookups it caches) per call. A broker that restarted is
    reconnected to by the client itself; callers :func:`drop_kept_client` after any failure, so the next call
    starts afresh."""
    kept = _kept.get(purpose)
    if kept is not None and kept[0] == settings:
        return kept[1]
    drop_kept_client(purpose)
    client = make()
    _kept[purpose] = (settings, client)
    return client


def drop_kept_client(purpose: str) -> None:
    """Close and forget the client kept for ``purpose`` (none: nothing to do)."""
    kept = _kept.pop(purpose, None)
    if kept is not None:
        kept[1].close()
