"""Tests of DelayedOperation and DelayedOperationPurgatory with a ManualClock (no sleeping)."""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from broker_runtime.purgatory import (
    DelayedOperation,
    DelayedOperationPurgatory,
    ManualClock,
    Timer,
    TimerTask,
)


class Op(DelayedOperation):
    """Completes when ``ready()`` says so; records every callback."""

    def __init__(self, delay_ms: int, ready: Callable[[], bool] | None = None, name: object = None) -> None:
        super().__init__(delay_ms)
        self.ready = ready or (lambda: False)
        self.name = name
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if self.ready():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def make(purge_interval: int = 1000) -> tuple[ManualClock, DelayedOperationPurgatory[Op]]:
    clock = ManualClock()
    return clock, DelayedOperationPurgatory("produce", Timer(clock), purge_interval)


def test_completes_immediately_when_ready() -> None:
    _, purgatory = make()
    op = Op(1000, ready=lambda: True)
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is True
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.watched == 0 and purgatory.delayed == 0


def test_watch_then_complete_by_key() -> None:
    _, purgatory = make()
    state = {"hw": 0}
    op = Op(1000, ready=lambda: state["hw"] >= 10)
    assert purgatory.try_complete_else_watch(op, [("t", 0), ("t", 1)]) is False
    assert op.tries == 2  # tried, watched, tried again
    assert purgatory.watched == 2 and purgatory.delayed == 1
    assert purgatory.check_and_complete(("t", 0)) == 0
    state["hw"] = 10
    assert purgatory.check_and_complete(("t", 5)) == 0  # unrelated key
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert op.completions == 1 and op.expirations == 0 and op.is_completed
    assert purgatory.delayed == 0  # the timer task was cancelled
    assert purgatory.watched == 1  # still listed under ("t", 1) until checked or purged
    assert purgatory.check_and_complete(("t", 1)) == 0
    assert purgatory.watched == 0 and purgatory.watched_keys == 0


def test_expiry_completes_once_and_calls_on_expiration() -> None:
    clock, purgatory = make()
    op = Op(500)
    purgatory.try_complete_else_watch(op, ["k"])
    clock.set(499)
    assert purgatory.advance_clock() is False
    assert op.completions == 0
    clock.set(500)
    assert purgatory.advance_clock() is True
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.check_and_complete("k") == 0
    assert op.force_complete() is False
    assert op.completions == 1


def test_zero_delay_expires_inside_the_call() -> None:
    _, purgatory = make()
    op = Op(0)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed == 0


def test_empty_key_list_is_rejected() -> None:
    _, purgatory = make()
    with pytest.raises(ValueError, match="at least one watch key"):
        purgatory.try_complete_else_watch(Op(10), [])


def test_forced_completion_cancels_timer_task() -> None:
    clock, purgatory = make()
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["k"])
    assert op.force_complete() is True
    assert purgatory.delayed == 0
    clock.set(1000)
    purgatory.advance_clock()
    assert (op.completions, op.expirations) == (1, 0)


def test_operations_expire_in_deadline_order_across_wheels() -> None:
    clock, purgatory = make()
    order: list[int] = []

    class Tracked(Op):
        def on_expiration(self) -> None:
            order.append(self.delay_ms)

    rng = random.Random(5)
    delays = [rng.randint(1, 100_000) for _ in range(500)]
    for i, d in enumerate(delays):
        purgatory.try_complete_else_watch(Tracked(d, name=i), [i % 7])
    while (nxt := purgatory.next_expiration_ms()) is not None:
        clock.set(nxt)
        purgatory.advance_clock()
    assert order == sorted(delays)


def test_completion_exactly_once_under_racing_check_and_expiry() -> None:
    clock, purgatory = make(purge_interval=50)
    n = 2000
    hw = {"value": 0}
    ops = [
        Op(100 + (i % 50), ready=functools.partial(lambda j: hw["value"] > j, i), name=i) for i in range(n)
    ]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [("t", i % 4)])
    barrier = threading.Barrier(5)
    completed_by_check = Counter[int]()
    lock = threading.Lock()

    def checker(partition: int) -> None:
        barrier.wait()
        for step in range(0, n + 1, 100):
            with lock:
                hw["value"] = max(hw["value"], step)
            got = purgatory.check_and_complete(("t", partition))
            with lock:
                completed_by_check[partition] += got

    def expirer() -> None:
        barrier.wait()
        for t in range(100, 151):
            clock.set(t)
            purgatory.advance_clock()

    threads = [threading.Thread(target=checker, args=(p,)) for p in range(4)]
    threads.append(threading.Thread(target=expirer))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    clock.set(1000)
    purgatory.advance_clock()
    assert all(op.completions == 1 for op in ops)
    assert all(op.expirations <= 1 for op in ops)
    expired = sum(op.expirations for op in ops)
    assert sum(completed_by_check.values()) + expired == n
    assert purgatory.delayed == 0


def test_purge_removes_completed_operations_from_watcher_lists() -> None:
    clock, purgatory = make(purge_interval=10)
    ready = {"flag": False}
    ops = [Op(10_000, ready=lambda: ready["flag"]) for _ in range(30)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.watched == 60
    ready["flag"] = True
    assert purgatory.check_and_complete("a") == 30
    assert purgatory.watched == 30  # "b" still lists the 30 completed operations
    assert purgatory.delayed == 0
    # estimated total (30) - delayed (0) > purge interval (10): the next advance purges.
    purgatory.advance_clock()
    assert purgatory.watched == 0 and purgatory.watched_keys == 0


def test_no_purge_below_the_interval() -> None:
    _, purgatory = make(purge_interval=10)
    ready = {"flag": False}
    ops = [Op(10_000, ready=lambda: ready["flag"]) for _ in range(10)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b"])
    ready["flag"] = True
    purgatory.check_and_complete("a")
    purgatory.advance_clock()
    assert purgatory.watched == 10  # 10 completed is not more than the interval
    assert purgatory.purge_completed() == 10
    assert purgatory.watched == 0


def test_purge_happens_inline_while_watching() -> None:
    _, purgatory = make(purge_interval=100)
    # Each operation completes through "x" but is also watched under a unique key nobody checks.
    for i in range(500):
        state = {"done": False}
        op = Op(60_000, ready=functools.partial(dict.__getitem__, state, "done"))
        purgatory.try_complete_else_watch(op, ["x", ("other", i)])
        state["done"] = True
        purgatory.check_and_complete("x")
    # Without a purge 500 ("other", i) lists would remain; the inline purge keeps them bounded.
    assert purgatory.watched_keys <= 102
    assert purgatory.watched <= 102


def test_five_thousand_parked_operations_completed_by_key() -> None:
    clock, purgatory = make()
    partitions = [("topic", p) for p in range(10)]
    high_watermark = dict.fromkeys(partitions, 0)
    ops: list[tuple[Op, tuple[str, int], int]] = []
    rng = random.Random(42)
    for i in range(5000):
        key = partitions[i % 10]
        required = rng.randint(1, 1000)
        op = Op(30_000, ready=functools.partial(lambda k, r: high_watermark[k] >= r, key, required), name=i)
        assert purgatory.try_complete_else_watch(op, [key]) is False
        ops.append((op, key, required))
    assert purgatory.delayed == 5000 and purgatory.watched == 5000
    total = 0
    for new_hw in (250, 500, 1000):
        for key in partitions:
            high_watermark[key] = new_hw
            total += purgatory.check_and_complete(key)
        expected_done = sum(1 for _, _, r in ops if r <= new_hw)
        assert total == expected_done
        assert purgatory.delayed == 5000 - expected_done
        for op, _, r in ops:
            assert op.is_completed == (r <= new_hw)
    assert purgatory.watched == 0 and purgatory.watched_keys == 0
    clock.set(60_000)
    purgatory.advance_clock()
    assert all(op.completions == 1 and op.expirations == 0 for op, _, _ in ops)


def test_cancel_for_key_returns_operations_without_completing() -> None:
    clock, purgatory = make()
    ops = [Op(100) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["gone"])
    cancelled = purgatory.cancel_for_key("gone")
    assert cancelled == ops
    assert purgatory.delayed == 0 and purgatory.watched == 0
    clock.set(1000)
    purgatory.advance_clock()
    assert all(op.completions == 0 for op in ops)
    assert purgatory.cancel_for_key("gone") == []


def test_shutdown_stops_timeouts_and_refuses_new_operations() -> None:
    clock, purgatory = make()
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.shutdown()
    clock.set(1000)
    purgatory.advance_clock()
    assert op.completions == 0
    with pytest.raises(RuntimeError, match="shut down"):
        purgatory.try_complete_else_watch(Op(100), ["k"])


def test_timer_disabled_never_expires() -> None:
    clock = ManualClock()
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory(
        "p", Timer(clock), timer_enabled=False
    )
    op = Op(10)
    purgatory.try_complete_else_watch(op, ["k"])
    clock.set(100)
    purgatory.advance_clock()
    assert op.completions == 0 and purgatory.delayed == 0


def test_abstract_hooks_must_be_implemented() -> None:
    class Bare(DelayedOperation):
        pass

    op = Bare(5)
    with pytest.raises(NotImplementedError):
        op.try_complete()
    with pytest.raises(NotImplementedError):
        op.force_complete()


def test_operation_completed_just_before_the_timer_add_is_taken_back_out() -> None:
    # Simulates another thread completing the operation between the last try and the timer add.
    class RacingTimer(Timer):
        def add(self, task: TimerTask) -> None:
            assert isinstance(task, DelayedOperation)
            task.force_complete()
            super().add(task)

    clock = ManualClock()
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("p", RacingTimer(clock))
    op = Op(100)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert op.completions == 1
    assert purgatory.delayed == 0
    clock.set(1000)
    purgatory.advance_clock()
    assert (op.completions, op.expirations) == (1, 0)
