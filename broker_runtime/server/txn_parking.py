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

One at a time per transactional id (:func:`in_order`, the handlers' entry): a request of a transactional id
whose earlier request is still unanswered (parked here, or waiting for its state write's replication) is handled
only once that one is answered. Kafka gets this from its network layer, which reads a connection's next request
only after answering the previous one; pylog's connections keep reading while requests wait, so without it an
EndTxn(abort) pipelined behind a parked AddPartitionsToTxn could be decided in the moment between the markers'
completion and the parked request's rerun, meet CompleteCommit and be answered INVALID_TXN_STATE (fatal for
librdkafka; found by the nemesis, tests/support/nemesis; tests/server/test_txn_in_order.py holds that moment).

Bounds: one future and one timer per parked request, one future per queued request; a connection parks or
queues at most its in-flight limit of them (``MAX_IN_FLIGHT`` of :mod:`.network`). Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["COMPLETION_WAIT_MS", "answer_or_park", "in_order", "park_until_completed"]

_log = logging.getLogger(__name__)

#: How long a request waits for its transaction to complete before it is answered CONCURRENT_TRANSACTIONS: under
#: the clients' request timeouts (the Java client's request.timeout.ms 30 s, librdkafka's socket.timeout.ms 60 s),
#: so a parked request is answered before its client gives up on it.
COMPLETION_WAIT_MS = 10_000


#: Per transaction coordinator: transactional id -> the answer (a future) of its last request not yet answered.
_unanswered: weakref.WeakKeyDictionary[object, dict[str, asyncio.Future[Any]]] = weakref.WeakKeyDictionary()


def _settle(answer: asyncio.Future[Any], result: Any) -> None:
    """Resolve ``answer`` with ``result``, or with ``result``'s outcome once it is done when it is a future."""

    def settled(done: asyncio.Future[Any]) -> None:
        if answer.done():
            return
        if done.cancelled():
            answer.cancel()
        elif (exc := done.exception()) is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(done.result())

    if isinstance(result, asyncio.Future):
        result.add_done_callback(settled)
    elif not answer.done():
        answer.set_result(result)


def in_order(ctx: BrokerContext, transactional_id: str, run: Callable[[], Any]) -> Any:
    """``run()`` (a handler's body: its answer, or a future of it) at once when no earlier request of
    ``transactional_id`` is unanswered, else a future of its answer, ``run()`` called once the last of them is
    answered (see the module docstring)."""
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return run()
    pending = _unanswered.setdefault(coordinator, {})
    last = pending.get(transactional_id)
    if last is None or last.done():
        result = run()
    else:
        result = ctx.loop.create_future()

        def start(_last: asyncio.Future[Any]) -> None:
            if result.done():
                return  # the connection went away meanwhile
            try:
                _settle(result, run())
            except Exception as exc:  # the handler's own failure: the dispatcher answers it as any other
                result.set_exception(exc)

        last.add_done_callback(start)
    if isinstance(result, asyncio.Future) and not result.done():
        pending[transactional_id] = result

        def answered(done: asyncio.Future[Any]) -> None:
            if pending.get(transactional_id) is done:
                del pending[transactional_id]

        result.add_done_callback(answered)
    return result


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

    def resume() -> None:
        if timer is not None:
            timer.cancel()
        if answer.done():
            return  # timed out meanwhile, or the connection went away
        try:
            _settle(answer, rerun())
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
        _settle(answer, concurrent())

    def completed() -> None:
        loop.call_soon(resume)  # deferred: the coordinator is calling back from inside a state change

    if not coordinator.when_completed(transactional_id, completed):
        return None
    timer = loop.call_later(COMPLETION_WAIT_MS / 1000, expire)
    return answer


def answer_or_park(
    ctx: BrokerContext,
    code: ErrorCode,
    transactional_id: str,
    what: str,
    rerun: Callable[[], Any],
    extra: dict[str, Any] | None = None,
) -> Any:
    """The ``{"ThrottleTimeMs", "ErrorCode"}`` answer of AddOffsetsToTxn or EndTxn whose coordinator call gave
    ``code``: parked until the transaction completes when that was CONCURRENT_TRANSACTIONS from a Prepare state
    (:func:`park_until_completed`), else once this request's state writes, and the id's state it read, are
    replicated. ``extra``: more fields
    of a successful answer (EndTxn v5's producer id and epoch), left out when the state write fails."""
    if code == ErrorCode.CONCURRENT_TRANSACTIONS:
        parked = park_until_completed(
            ctx, transactional_id, what, rerun, lambda: {"ThrottleTimeMs": 0, "ErrorCode": code}
        )
        if parked is not None:
            return parked
    return answer_after_state_write(
        ctx,
        lambda failed: (
            {"ThrottleTimeMs": 0, "ErrorCode": failed}
            if failed
            else {"ThrottleTimeMs": 0, "ErrorCode": code, **(extra or {})}
        ),
        [transactional_id],
    )
