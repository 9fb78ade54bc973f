"""Requests that find their transaction's markers still being written wait for them (pylog's answer; Kafka
answers CONCURRENT_TRANSACTIONS at once).

Why: Kafka answers EndTxn once the PrepareCommit/PrepareAbort record is durable and writes the markers after;
meanwhile AddPartitionsToTxn, AddOffsetsToTxn and EndTxn of the same transactional id get CONCURRENT_TRANSACTIONS
(its ``pendingTransitionInProgress`` check, before the state match). librdkafka counts an AddPartitionsToTxn so
answered as one the coordinator may have applied (``txn_req_cnt``), so an application that aborts right then
makes it send EndTxn(abort), which meets CompleteCommit once the markers are written: INVALID_TXN_STATE, a fatal
error for the producer (Apache Kafka 4.4.0 does exactly that, see tests/replication/test_txn_abort_race.py).
Here such a request waits until the transaction completes and is then handled as if it arrived at that moment,
so the AddPartitionsToTxn succeeds and the abort finds its transaction Ongoing.

:func:`park_until_completed` is called by a handler whose coordinator call answered CONCURRENT_TRANSACTIONS
(nothing written then): when the transactional id is in a Prepare state it returns a future of the handler's
answer, computed again (``rerun``) once the coordinator reports the transaction complete
(:meth:`~broker_runtime.coordinator.transaction.TransactionCoordinator.when_completed`: markers written and
the Complete state logged, or the id no longer coordinated here, which the rerun answers NOT_COORDINATOR). The
reruns of one id run in the order the requests were parked (``call_soon`` order), so a pipelined
AddPartitionsToTxn is applied before the EndTxn that follows it. A request still parked after
:data:`COMPLETION_WAIT_MS` gets Kafka's CONCURRENT_TRANSACTIONS (``concurrent``; WARNING logged, counted in the
coordinator's ``completion_wait_timeouts``, ``pylog_transaction_requests_parked_timed_out_total``); the client
retries it as it would with Kafka.

Bounds: one future and one timer per parked request; a connection parks at most its in-flight limit of them
(``MAX_IN_FLIGHT`` of :mod:`.network`). Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["COMPLETION_WAIT_MS", "answer_or_park", "park_until_completed"]

_log = logging.getLogger(__name__)

#: How long a request waits for its transaction to complete before it is answered CONCURRENT_TRANSACTIONS: under
#: the clients' request timeouts (the Java client's request.timeout.ms 30 s, librdkafka's socket.timeout.ms 60 s),
#: so a parked request is answered before its client gives up on it.
COMPLETION_WAIT_MS = 10_000


def park_until_completed(
    ctx: BrokerContext,
    transactional_id: str,
    what: str,
    rerun: Callable[[], Any],
    concurrent: Callable[[], Any],
) -> asyncio.Future[Any] | None:
    """None when ``transactional_id`` is not in a Prepare state (the handler answers as it is), else a future of
    ``rerun()``'s answer once its transaction completes, or of ``concurrent()`` after :data:`COMPLETION_WAIT_MS`
    (see the module docstring). ``rerun`` may return a future of the answer itself (awaited)."""
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return None
    loop = ctx.loop
    answer: asyncio.Future[Any] = loop.create_future()
    timer: asyncio.TimerHandle | None = None

    def settle(result: Any) -> None:
        if isinstance(result, asyncio.Future):
            result.add_done_callback(settled)
        elif not answer.done():
            answer.set_result(result)

    def settled(done: asyncio.Future[Any]) -> None:
        if answer.done():
            return
        if done.cancelled():
            answer.cancel()
        elif (exc := done.exception()) is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(done.result())

    def resume() -> None:
        if timer is not None:
            timer.cancel()
        if answer.done():
            return  # timed out meanwhile, or the connection went away
        try:
            settle(rerun())
        except Exception as exc:  # the handler's own failure: the dispatcher answers it as any other
            answer.set_exception(exc)

    def expire() -> None:
        if answer.done():
            return
        coordinator.completion_wait_timeouts += 1
        _log.warning(
            "%s for transactional id %r waited %d ms for its transaction's markers to be written; answering "
            "CONCURRENT_TRANSACTIONS (the client retries)",
            what,
            transactional_id,
            COMPLETION_WAIT_MS,
        )
        settle(concurrent())

    def completed() -> None:
        loop.call_soon(resume)  # deferred: the coordinator is calling back from inside a state change

    if not coordinator.when_completed(transactional_id, completed):
        return None
    timer = loop.call_later(COMPLETION_WAIT_MS / 1000, expire)
    return answer


def answer_or_park(
    ctx: BrokerContext, code: ErrorCode, transactional_id: str, what: str, rerun: Callable[[], Any]
) -> Any:
    """The ``{"ThrottleTimeMs", "ErrorCode"}`` answer of AddOffsetsToTxn or EndTxn whose coordinator call gave
    ``code``: parked until the transaction completes when that was CONCURRENT_TRANSACTIONS from a Prepare state
    (:func:`park_until_completed`), else once this request's state writes are replicated."""
    if code == ErrorCode.CONCURRENT_TRANSACTIONS:
        parked = park_until_completed(
            ctx, transactional_id, what, rerun, lambda: {"ThrottleTimeMs": 0, "ErrorCode": code}
        )
        if parked is not None:
            return parked
    return answer_after_state_write(ctx, lambda failed: {"ThrottleTimeMs": 0, "ErrorCode": failed or code})
