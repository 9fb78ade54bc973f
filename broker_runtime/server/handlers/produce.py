"""Produce (key 0): advertised v0-11, answered for v3-11.

Per request (Kafka's ``KafkaApis.handleProduceRequest`` + ``ReplicaManager.appendRecords``):
  * v0-2 carry legacy message sets (magic 0/1) this broker cannot store: every partition is answered
    UNSUPPORTED_FOR_MESSAGE_FORMAT. They stay advertised because older librdkafka releases only enable
    compression when Produce's minimum version is below 3;
  * partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION (Kafka creates topics from Metadata, not
    from Produce);
  * ``acks`` outside {-1, 0, 1}: INVALID_REQUIRED_ACKS for every partition of known topics, nothing appended;
  * a transactional produce to a partition where its producer has no open transaction yet is first verified
    with the transaction coordinator (KIP-890 part 1, :mod:`broker_runtime.server.txn_verification`): a partition
    not in the producer's transaction is refused (INVALID_TXN_STATE, or TRANSACTION_ABORTABLE from v11) and
    nothing is appended to it;
  * otherwise each partition is validated and appended by the ReplicaManager (per batch work only); with
    metrics on, its bytes and records count as the topic's BytesIn / MessagesIn;
  * ``acks=0``: no response at all; if any partition failed, the connection is closed so the client notices
    and refreshes its metadata, as Kafka does; the reason is logged as one WARNING line, at most one every
    ``ACKS0_WARNING_INTERVAL_S`` seconds (the lines left out are counted in the next one);
  * ``acks=-1``: before appending, a partition whose ISR is smaller than ``min.insync.replicas`` gets
    NOT_ENOUGH_REPLICAS; after appending, a :class:`~broker_runtime.replication.DelayedProduce` waits in the
    produce purgatory, watched by every appended partition, until each partition's high watermark reaches
    its last offset + 1 (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas
    meanwhile) or ``TimeoutMs`` expires (REQUEST_TIMED_OUT for the partitions still waiting). The handler
    never blocks: it returns a future and the connection answers later requests' responses after it, in
    order. A single-replica partition completes inside the first try (HW = LEO after the append), so the
    answer is returned at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, produce
from broker_runtime.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import CLOSE_CONNECTION, BrokerContext
from broker_runtime.server.replica_manager import AppendResult
from broker_runtime.server.txn_verification import verify_then

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

#: The request this module answers (its API key travels with the message definition).
REQUEST = produce.REQUEST
MIN_VERSION = 0
MAX_VERSION = 12

_VALID_ACKS = (produce.ACKS_ALL, produce.ACKS_NONE, produce.ACKS_LEADER)
#: The least time between two WARNING lines about refused acks=0 produces.
ACKS0_WARNING_INTERVAL_S = 10.0


class _RateLimitedWarning:
    """One WARNING line per interval; the lines left out meanwhile are counted in the next one."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._next = 0.0
        self._suppressed = 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        self._next = now + self._interval_s
        if self._suppressed:
            message += " (%d more such refusals in the last %.0f s were not logged)"
            args = (*args, self._suppressed, self._interval_s)
            self._suppressed = 0
        _log.warning(message, *args)


_ACKS0_WARNINGS = _RateLimitedWarning(ACKS0_WARNING_INTERVAL_S)


def _partition_response(index: int, result: AppendResult) -> dict[str, Any]:
    return {
        "Index": index,
        "ErrorCode": result.error,
        "BaseOffset": result.base_offset,
        "LogAppendTimeMs": result.log_append_time_ms,
        "LogStartOffset": result.log_start_offset,
        "RecordErrors": [{"BatchIndex": i, "BatchIndexErrorMessage": m} for i, m in result.record_errors],
        "ErrorMessage": result.message if result.error else None,
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    version = header.api_version
    acks = body["Acks"]
    topics = ctx.topics
    # Per partition: its answer when a check refuses it, else None and its records (appended below).
    planned: list[tuple[str, list[tuple[int, AppendResult | None, Any]]]] = []
    txn_id = body.get("TransactionalId")
    txn_denied = txn_id is not None and not ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    )
    for topic_data in body["TopicData"]:
        name = topic_data["Name"]
        denied = not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, name)
        count = None if denied else topics.partition_count(name)
        if count is None and not denied and ctx.refresh_cluster():
            count = topics.partition_count(name)
        partitions: list[tuple[int, AppendResult | None, Any]] = []
        for pdata in topic_data["PartitionData"]:
            index = pdata["Index"]
            result: AppendResult | None = None
            if txn_denied:
                result = AppendResult(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    message=f"WRITE on transactional id {txn_id} is not allowed",
                )
            elif denied:
                result = AppendResult(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED, message=f"WRITE on topic {name} is not allowed"
                )
            elif count is None or not 0 <= index < count:
                result = AppendResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    message=f"This server does not host this topic-partition: {name}-{index}",
                )
            elif version < 3:
                result = AppendResult(
                    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                    message=f"Produce v{version} (legacy message format) is not supported; use v3 or later",
                )
            elif acks not in _VALID_ACKS:
                result = AppendResult(
                    ErrorCode.INVALID_REQUIRED_ACKS, message=f"acks={acks} is not -1, 0 or 1"
                )
            partitions.append((index, result, pdata["Records"]))
        planned.append((name, partitions))
    candidates = [(name, i, records) for name, parts in planned for i, r, records in parts if r is None]
    return verify_then(
        ctx,
        version,
        txn_id,
        candidates,
        lambda refused: _append(ctx, header, body, planned, refused),
    )


def _append(
    ctx: BrokerContext,
    header: RequestHeader,
    body: dict[str, Any],
    planned: list[tuple[str, list[tuple[int, AppendResult | None, Any]]]],
    refused: dict[tuple[str, int], AppendResult],
) -> Any:
    """Append every partition no check refused (``refused``: those transaction verification refused), then
    answer (at once, after replication for acks=-1, or not at all for acks=0)."""
    acks = body["Acks"]
    replicas = ctx.replicas
    metrics = ctx.metrics
    results: list[tuple[str, list[tuple[int, AppendResult]]]] = []
    failed: list[str] = []
    for name, parts in planned:
        partitions: list[tuple[int, AppendResult]] = []
        for index, planned_result, records in parts:
            result = planned_result or refused.get((name, index))
            if result is None:
                result = replicas.append(name, index, records, header.api_version, acks)
                if metrics is not None and not result.error:
                    metrics.appended(name, len(records), result.required_offset - result.base_offset)
            if result.error:
                failed.append(f"{name}-{index}: {ErrorCode(result.error).name}: {result.message}")
            partitions.append((index, result))
        results.append((name, partitions))
    if acks == produce.ACKS_NONE:
        if failed:
            _ACKS0_WARNINGS.warn(
                "closing connection after acks=0 produce (correlation id %d, client %r) failed: %s",
                header.correlation_id,
                header.client_id,
                "; ".join(failed),
            )
            return CLOSE_CONNECTION
        return None
    if acks == produce.ACKS_ALL and ctx.produce_purgatory is not None:
        return _delay_until_replicated(ctx, body["TimeoutMs"], results)
    return _body(results)


def _body(results: list[tuple[str, list[tuple[int, AppendResult]]]]) -> dict[str, Any]:
    return {
        "Responses": [
            {"Name": name, "PartitionResponses": [_partition_response(i, r) for i, r in parts]}
            for name, parts in results
        ],
        "ThrottleTimeMs": 0,
    }


def _delay_until_replicated(
    ctx: BrokerContext, timeout_ms: int, results: list[tuple[str, list[tuple[int, AppendResult]]]]
) -> Any:
    """Park an acks=-1 produce until the appended partitions are replicated; the body or a future of it."""
    statuses: dict[tuple[str, int], ProducePartitionStatus] = {}
    replicas = ctx.replicas
    for name, parts in results:
        for index, result in parts:
            min_isr = replicas.min_insync_replicas(name) if not result.error else 1
            statuses[(name, index)] = ProducePartitionStatus(result.required_offset, result.error, min_isr)
    if not any(s.pending for s in statuses.values()):
        return _body(results)
    future: asyncio.Future[Any] = ctx.loop.create_future()
    answered: list[dict[str, Any]] = []

    def on_done(final: dict[tuple[str, int], ProducePartitionStatus]) -> None:
        merged = [
            (
                name,
                [
                    (i, r if final[(name, i)].error == r.error else _with_error(r, final[(name, i)].error))
                    for i, r in parts
                ],
            )
            for name, parts in results
        ]
        answer = _body(merged)
        answered.append(answer)
        if not future.done():
            future.set_result(answer)

    operation = DelayedProduce(timeout_ms, statuses, replicas.partition, on_done, is_abandoned=future.done)
    assert ctx.produce_purgatory is not None
    if ctx.produce_purgatory.try_complete_else_watch(operation, operation.watch_keys):
        return answered[0] if answered else future
    ctx.schedule_timer()
    return future


def _with_error(result: AppendResult, error: ErrorCode) -> AppendResult:
    messages = {
        ErrorCode.REQUEST_TIMED_OUT: "the high watermark did not reach the appended records within the timeout",
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
            "the ISR shrank below min.insync.replicas after the records were appended"
        ),
    }
    return dataclasses.replace(result, error=error, message=messages.get(error, ErrorCode(error).name))
