"""Fault a forked child at a seeded STEP of its file-system work, not at a moment.

A test runs the work in a forked child whose file-system calls (:data:`STEP_CALLS`) each count as a step; at step
``pause_at`` the child writes ``P`` to a pipe and waits, and the parent SIGKILLs it there. So the kill lands
inside the work however fast or slow the machine is, and a seed that picks ``pause_at`` reproduces a failure.
A run with ``pause_at=0`` goes to the end and reports its step count, which tells a test how many steps there
are to choose from. The child leaves by ``os._exit`` only (no pytest machinery runs in it).
"""

from __future__ import annotations

import builtins
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

__all__ = ["STEP_CALLS", "run_to_step"]

#: The calls counted as steps: every open (before it and once the file exists), fsync, rename and removal.
#: ``fsutil.write_atomically`` and fsspec's local file system go through these too.
STEP_CALLS = (
    (builtins, "open"),
    (os, "fsync"),
    (os, "replace"),
    (os, "rename"),
    (os, "remove"),
    (os, "unlink"),
)

#: Called before each step's call with (call name, its arguments, the step number).
Observer = Callable[[str, tuple[Any, ...], int], None]


def _count_steps(pause_at: int, report: int, observe: Observer | None) -> list[int]:
    steps = [0]

    def step() -> None:
        steps[0] += 1
        if steps[0] == pause_at:
            os.write(report, b"P")
            time.sleep(120)  # the parent kills this process now; never returns in a passing run
            os._exit(3)

    def counted(call: Any, name: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            step()
            if observe is not None:
                observe(name, args, steps[0])
            result = call(*args, **kwargs)
            if name == "open":
                step()
            return result

        return wrapper

    for owner, name in STEP_CALLS:
        setattr(owner, name, counted(getattr(owner, name), name))
    return steps


def run_to_step(
    work: Callable[[], str], pause_at: int, what: str, observe: Observer | None = None
) -> tuple[str, int, str]:
    """Run ``work`` in a forked child paused and SIGKILLed at step ``pause_at`` (0: never).

    Returns ``("killed", pause_at, "")``, or ``("done", steps, result)`` when the work ended before that step
    (``result``: what ``work`` returned). Anything else (the child failed, or said nothing in 60 s) raises an
    AssertionError naming ``what``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, leave by os._exit only
        code = 1
        try:
            os.close(read_end)
            steps = _count_steps(pause_at, write_end, observe)
            result = work()
            os.write(write_end, f"D{steps[0]} {result}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 60)
        said = os.read(read_end, 4096).decode() if ready else "(no word in 60 s)"
        if said == "P":
            os.kill(pid, signal.SIGKILL)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(read_end)
    if said == "P" and code == -signal.SIGKILL:
        return "killed", pause_at, ""
    if said.startswith("D") and code == 0:
        steps, _, result = said[1:].partition(" ")
        return "done", int(steps), result
    raise AssertionError(f"{what}: a run paused at step {pause_at} said {said!r}, exit code {code}")
