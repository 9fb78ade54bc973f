"""Tests of the hierarchical timing wheel timer, driven by a ManualClock (no sleeping)."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.purgatory.clock import ManualClock, SystemClock
from broker_runtime.purgatory.timing_wheel import Timer, TimerTask


class Recorder(TimerTask):
    """Records (name, clock time) into a shared log when run."""

    def __init__(self, name: Any, delay_ms: int, clock: ManualClock, log: list[tuple[Any, int]]) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.clock = clock
        self.log = log

    def run(self) -> None:
        self.log.append((self.name, self.clock.now_ms()))


def make(start: int = 0) -> tuple[ManualClock, Timer, list[tuple[Any, int]]]:
    clock = ManualClock(start)
    return clock, Timer(clock, name="test"), []


# -- clock ------------------------------------------------------------------------------------------------


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(5)
    assert clock.now_ms() == 5
    assert clock.advance(10) == 15
    clock.set(20)
    assert clock.now_ms() == 20
    with pytest.raises(ValueError, match="already reads 20"):
        clock.set(19)
    with pytest.raises(ValueError, match="monotonic"):
        clock.advance(-1)


def test_system_clock_is_monotonic_ms() -> None:
    clock = SystemClock()
    a = clock.now_ms()
    b = clock.now_ms()
    assert isinstance(a, int) and b >= a


# -- expiry at the right tick -------------------------------------------------------------------------------


def test_many_random_delays_expire_exactly_at_their_tick_in_deadline_order() -> None:
    rng = random.Random(1234)
    clock, timer, log = make(start=7)
    deadlines: dict[int, int] = {}
    for i in range(2000):
        delay = rng.randint(1, 100_000)
        timer.add(Recorder(i, delay, clock, log))
        deadlines[i] = 7 + delay
    # A couple of tasks pinned to wheel boundaries (20, 400, 8000, 160000 ms spans).
    for i, delay in enumerate((1, 19, 20, 21, 399, 400, 401, 7999, 8000, 8001, 100_000), start=10_000):
        timer.add(Recorder(i, delay, clock, log))
        deadlines[i] = 7 + delay
    assert timer.size == len(deadlines)
    assert timer.levels == 4  # 20 ms, 400 ms, 8 s and 160 s wheels cover 100 s
    end = 7 + 100_000
    while clock.now_ms() < end:
        clock.advance(1)
        timer.advance_clock()
    assert timer.size == 0
    assert sorted(name for name, _ in log) == sorted(deadlines)
    for name, ran_at in log:
        assert ran_at == deadlines[name], f"task {name} ran at {ran_at}, deadline {deadlines[name]}"
    times = [t for _, t in log]
    assert times == sorted(times)


def test_sparse_advances_never_run_early_and_run_everything_due() -> None:
    rng = random.Random(99)
    clock, timer, log = make()
    deadlines = {}
    for i in range(3000):
        delay = rng.randint(0, 50_000)
        timer.add(Recorder(i, delay, clock, log))
        deadlines[i] = delay
    seen = 0
    while clock.now_ms() < 50_000:
        clock.advance(rng.randint(1, 3000))
        timer.advance_clock()
        now = clock.now_ms()
        new = log[seen:]
        seen = len(log)
        for name, ran_at in new:
            assert deadlines[name] <= ran_at
        ran = {name for name, _ in log}
        assert ran == {name for name, d in deadlines.items() if d <= now}
        # Within one advance, due tasks run in deadline order.
        ds = [deadlines[name] for name, _ in new]
        assert ds == sorted(ds)
    assert len(log) == 3000


def test_add_after_clock_moved_without_advancing_timer() -> None:
    # The wheel's own time lags the clock until advance_clock runs; deadlines still come from the clock.
    clock, timer, log = make()
    clock.set(123_456)
    timer.add(Recorder("a", 5, clock, log))
    timer.add(Recorder("b", 30_000, clock, log))
    for _ in range(5):
        clock.advance(1)
        timer.advance_clock()
    assert log == [("a", 123_461)]
    clock.set(123_456 + 29_999)
    timer.advance_clock()
    assert log == [("a", 123_461)]
    clock.advance(1)
    timer.advance_clock()
    assert log[-1] == ("b", 153_456)


def test_explicit_now_argument() -> None:
    clock, timer, log = make()
    timer.add(Recorder("x", 50, clock, log))
    assert timer.advance_clock(49) is False
    clock.set(50)
    assert timer.advance_clock(50) is True
    assert log == [("x", 50)]
    assert timer.advance_clock(10) is False  # going back finds nothing


def test_due_task_runs_inside_add() -> None:
    clock, timer, log = make(start=10)
    timer.add(Recorder("zero", 0, clock, log))
    timer.add(Recorder("negative", -5, clock, log))
    assert log == [("zero", 10), ("negative", 10)]
    assert timer.size == 0


# -- cancellation and re-adding ---------------------------------------------------------------------------


def test_cancelled_tasks_never_run() -> None:
    rng = random.Random(7)
    clock, timer, log = make()
    tasks = [Recorder(i, rng.randint(1, 30_000), clock, log) for i in range(1000)]
    for t in tasks:
        timer.add(t)
    cancelled = set(rng.sample(range(1000), 400))
    for i in cancelled:
        tasks[i].cancel()
        tasks[i].cancel()  # idempotent
        assert not tasks[i].scheduled
    assert timer.size == 600
    clock.set(30_000)
    timer.advance_clock()
    assert {name for name, _ in log} == set(range(1000)) - cancelled
    assert timer.size == 0


def test_cancel_after_found_due_but_before_run() -> None:
    # A task that cancels a later task of the same expiry batch: the later one must not run.
    clock, timer, log = make()
    victim = Recorder("victim", 10, clock, log)

    class Killer(TimerTask):
        def run(self) -> None:
            log.append(("killer", clock.now_ms()))
            victim.cancel()

    timer.add(Killer(10))
    timer.add(victim)
    clock.set(10)
    timer.advance_clock()
    assert log == [("killer", 10)]


def test_readding_moves_the_task_and_it_runs_once() -> None:
    clock, timer, log = make()
    t = Recorder("t", 5000, clock, log)
    timer.add(t)
    clock.set(100)
    timer.advance_clock()
    timer.add(t)  # new deadline 5100, old entry at 5000 must be gone
    assert timer.size == 1
    clock.set(5000)
    timer.advance_clock()
    assert log == []
    clock.set(5099)
    timer.advance_clock()
    assert log == []
    clock.set(5100)
    timer.advance_clock()
    assert log == [("t", 5100)]
    clock.set(20_000)
    timer.advance_clock()
    assert log == [("t", 5100)]

    # Moving a task earlier works too.
    t2 = Recorder("t2", 10_000, clock, log)
    timer.add(t2)
    t2.delay_ms = 3
    timer.add(t2)
    clock.advance(3)
    timer.advance_clock()
    assert log[-1] == ("t2", 20_003)
    assert timer.size == 0


def test_task_can_re_add_itself_periodically() -> None:
    clock, timer, log = make()

    class Periodic(TimerTask):
        runs = 0

        def run(self) -> None:
            self.runs += 1
            log.append(("p", clock.now_ms()))
            if self.runs < 5:
                timer.add(self)

    timer.add(Periodic(7))
    for _ in range(100):
        clock.advance(1)
        timer.advance_clock()
    assert [t for _, t in log] == [7, 14, 21, 28, 35]


def test_a_failing_task_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    clock, timer, log = make()

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer.add(Boom(1))
    timer.add(Recorder("ok", 1, clock, log))
    clock.advance(1)
    assert timer.advance_clock() is True
    assert log == [("ok", 1)]
    assert "boom" in caplog.text


# -- next expiration, size, shutdown -----------------------------------------------------------------------


def test_next_expiration_is_a_lower_bound_that_loses_no_deadline() -> None:
    clock, timer, log = make()
    assert timer.next_expiration_ms() is None
    timer.add(Recorder("near", 15, clock, log))
    assert timer.next_expiration_ms() == 15
    far = Recorder("far", 12_345, clock, log)
    timer.add(far)
    # Sleep-until-next-expiration loop: jump straight to each reported time.
    wakeups = []
    while (nxt := timer.next_expiration_ms()) is not None:
        assert nxt >= clock.now_ms()
        clock.set(nxt)
        wakeups.append(nxt)
        timer.advance_clock()
    assert log == [("near", 15), ("far", 12_345)]
    assert wakeups[0] == 15 and wakeups[-1] == 12_345
    assert all(w <= 12_345 for w in wakeups)
    assert len(wakeups) <= 5  # one per wheel level at most for the far task


def test_next_expiration_ignores_buckets_emptied_by_cancel() -> None:
    clock, timer, log = make()
    a = Recorder("a", 10, clock, log)
    timer.add(a)
    timer.add(Recorder("b", 15, clock, log))
    a.cancel()
    assert timer.next_expiration_ms() == 15
    # The bucket dropped by next_expiration_ms is re-queued by a later add with the same tick.
    timer.add(Recorder("c", 10, clock, log))
    assert timer.next_expiration_ms() == 10
    clock.set(30)
    timer.advance_clock()
    assert log == [("c", 30), ("b", 30)]


def test_shutdown_drops_pending_tasks_and_refuses_adds() -> None:
    clock, timer, log = make()
    t = Recorder("t", 10, clock, log)
    timer.add(t)
    timer.shutdown()
    assert timer.size == 0 and timer.is_shut_down
    assert not t.scheduled
    clock.set(100)
    assert timer.advance_clock() is False
    assert log == []
    with pytest.raises(RuntimeError, match="shut down"):
        timer.add(Recorder("late", 1, clock, log))


def test_concurrent_adds_from_threads() -> None:
    clock, timer, log = make()
    n_threads, per_thread = 8, 500
    barrier = threading.Barrier(n_threads)
    lock = threading.Lock()
    safe_log: list[tuple[object, int]] = []

    class SafeRecorder(TimerTask):
        def __init__(self, name: object, delay: int) -> None:
            super().__init__(delay)
            self.name = name

        def run(self) -> None:
            with lock:
                safe_log.append((self.name, clock.now_ms()))

    def worker(k: int) -> None:
        rng = random.Random(k)
        barrier.wait()
        for i in range(per_thread):
            timer.add(SafeRecorder((k, i), rng.randint(1, 20_000)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert timer.size == n_threads * per_thread
    clock.set(20_000)
    timer.advance_clock()
    assert len(safe_log) == n_threads * per_thread
    assert len({name for name, _ in safe_log}) == n_threads * per_thread


def test_constructor_validates_arguments() -> None:
    with pytest.raises(ValueError, match="tick_ms"):
        Timer(ManualClock(), tick_ms=0)
    with pytest.raises(ValueError, match="wheel_size"):
        Timer(ManualClock(), wheel_size=1)


def test_base_task_run_must_be_overridden() -> None:
    with pytest.raises(NotImplementedError):
        TimerTask(1).run()


# -- reference model ---------------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(min_value=-2, max_value=20_000)),
        st.tuples(st.just("readd"), st.integers(min_value=0, max_value=40), st.integers(0, 20_000)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=3_000)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(start=st.integers(min_value=0, max_value=10**9), ops=_ops)
def test_matches_a_sorted_list_reference_model(start: int, ops: list[tuple]) -> None:
    clock, timer, log = make(start)
    tasks: list[Recorder] = []
    model: dict[Any, int] = {}  # task index -> deadline, for scheduled tasks
    expected_log: list[tuple[Any, int]] = []

    def model_run_due(now: int) -> None:
        due = {i: d for i, d in model.items() if d <= now}
        got = log[len(expected_log) :]
        assert sorted(name for name, _ in got) == sorted(due)
        got_deadlines = [due[name] for name, _ in got]
        assert got_deadlines == sorted(got_deadlines)  # deadline order; ties in any order
        assert all(ran_at == now for _, ran_at in got)  # not before the deadline, not a tick later
        for i in due:
            del model[i]
        expected_log.extend(got)

    for op in ops:
        now = clock.now_ms()
        if op[0] == "add":
            t = Recorder(len(tasks), op[1], clock, log)
            tasks.append(t)
            model[t.name] = now + op[1]
            timer.add(t)
            model_run_due(now)
        elif op[0] == "readd" and tasks:
            t = tasks[op[1] % len(tasks)]
            t.delay_ms = op[2]
            model[t.name] = now + op[2]
            timer.add(t)
            model_run_due(now)
        elif op[0] == "cancel" and tasks:
            t = tasks[op[1] % len(tasks)]
            t.cancel()
            model.pop(t.name, None)
        elif op[0] == "advance":
            clock.advance(op[1])
            timer.advance_clock()
            model_run_due(clock.now_ms())
        assert timer.size == len(model)
        nxt = timer.next_expiration_ms()
        if model:
            assert nxt is not None and nxt <= min(model.values())
        else:
            assert nxt is None
    assert log == expected_log
