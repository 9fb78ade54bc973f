"""TEST-ONLY fault injection for the writer: the ``pylog.test.*`` options and the failures they cause.

Runs on: driver (planning, commit); executors (task).

Nothing here runs in production: :func:`parse_fault_options` returns ``None`` when no ``pylog.test.*`` option
is given, the writer then builds no :class:`TaskFaults`, and the producer's only hook
(``faults is not None`` checks in :mod:`spark_kafka_log.write.sender`) is skipped.

Where this runs: parsing on the **driver** (``writer()``, with the other options); :class:`TaskFaults` on the
**executors**, one per task attempt, used by that attempt's sender thread only (not thread-safe).

* ``pylog.test.failAfterRequests=N``: the FIRST attempt of every task (attempt number 0 -- so also every
  task of a re-attempted stage, whose attempt numbers restart at 0) raises
  :class:`~broker_runtime.errors.InjectedFailure` once N of its produce requests were acknowledged, so Spark
  retries the task (needs ``spark.task.maxFailures`` > 1, e.g. master ``local[2,2]``).
* ``pylog.test.dropResponseAfterRequests=N``: after N acknowledged requests, the producer closes its connection
  once without reading the responses of the requests in flight, as a network failure would, and resends them
  (the idempotent producer must not duplicate them).
* ``pylog.test.alwaysFailPartition=P``: EVERY attempt of the task of Spark partition P raises
  :class:`~broker_runtime.errors.InjectedFailure` after its first acknowledged request, so the job fails for good
  after writing part of its rows.
* ``pylog.test.killDriverAfterCommitIntent=PID``: the driver's ``commit()`` of a transactional batch write
  SIGKILLs the process group of PID (the test's driver program, which must lead its own process group, i.e. be
  started in a new session) and then its own process, right after writing the commit intent and before any
  EndTxn: a driver crash in the middle of the commit (:func:`kill_driver`).
* ``pylog.test.loseShuffleAfterRequests=N``: once per write, the first attempt of the task of Spark partition 0
  (attempt number 0), once N of its requests were acknowledged, deletes every shuffle file of this executor
  (under the block manager folders Spark names in ``SPARK_LOCAL_DIRS`` for its Python workers) and ends its
  Python worker process at once, as a crash would (no abort of its transaction, no cleanup, requests possibly
  in flight): the task's retry finds the map output gone (FetchFailed), so
  Spark runs the map stage again and re-attempts the write stage, whose attempt numbers start at 0 again
  (:func:`lose_shuffle_once`; a marker file in the first of those folders makes it once per write id). Needs a
  shuffle before the write, local mode, and a ``spark.local.dir`` of the test's own.
* ``pylog.test.stallCommitAfterPrepared=N`` (**driver**): in the exactly-once streaming sink, every
  micro-batch's ``commit()`` stops for good once its sink-log entry is written ``prepared`` and the first N of
  its transactions are committed (N=0: none), after creating ``stalled-<batchId>.test`` in the sink log's
  folder; in a transactional batch write, ``commit()`` stops for good once the commit intent is written and the
  first N of its transactions are committed, after creating ``stalled-<writeId>.test`` in
  ``pylog.transactionStateDir``. A test can then SIGKILL the driver at exactly that point
  (:func:`stall_commit`), or let another write of the same driver do it (``killDriverAfterCommitIntent``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import InjectedFailure
from spark_kafka_log.common.option_parsing import int_option

__all__ = [
    "FAULT_OPTION_KEYS",
    "FAULT_OPTION_NAMES",
    "FaultOptions",
    "TaskFaults",
    "kill_driver",
    "lose_shuffle_once",
    "parse_fault_options",
    "stall_commit",
]

#: The options as the user spells them; lower-cased they are the keys Spark hands over.
FAULT_OPTION_NAMES = (
    "pylog.test.failAfterRequests",
    "pylog.test.dropResponseAfterRequests",
    "pylog.test.alwaysFailPartition",
    "pylog.test.killDriverAfterCommitIntent",
    "pylog.test.stallCommitAfterPrepared",
    "pylog.test.loseShuffleAfterRequests",
)
FAULT_OPTION_KEYS = tuple(name.lower() for name in FAULT_OPTION_NAMES)


@dataclass(frozen=True)
class FaultOptions:
    """The parsed ``pylog.test.*`` options (None: not given)."""

    fail_after_requests: int | None = None
    drop_response_after_requests: int | None = None
    always_fail_partition: int | None = None
    kill_driver_after_commit_intent: int | None = None
    stall_commit_after_prepared: int | None = None
    lose_shuffle_after_requests: int | None = None


def parse_fault_options(opts: Mapping[str, str]) -> FaultOptions | None:
    """The test-only options of a write (keys lower-cased), or ``None`` when none is given."""
    values = [int_option(opts, name, None, 0) for name in FAULT_OPTION_NAMES]
    if all(v is None for v in values):
        return None
    return FaultOptions(*values)


def stall_commit(touch: Callable[[str], None], name: int | str, committed: int) -> None:
    """Driver, ``pylog.test.stallCommitAfterPrepared``: mark the stall with ``touch`` (``stalled-<name>.test``
    beside the sink log's records, or in a batch write's state directory), then never return (the test kills
    us)."""
    touch(f"stalled-{name}.test")
    while True:
        time.sleep(3600)


class TaskFaults:
    """The faults of one task attempt; the sender asks it after every acknowledgement."""

    def __init__(self, options: FaultOptions, task: int, attempt: int, write_id: str = "") -> None:
        self._options = options
        self._task = task
        self._attempt = attempt
        self._write_id = write_id
        self._drop_armed = options.drop_response_after_requests is not None

    def after_acknowledged(self, acknowledged: int) -> None:
        """Raise :class:`InjectedFailure` in a first attempt that reached ``failAfterRequests``."""
        if self._options.always_fail_partition == self._task:
            raise InjectedFailure(
                f"pylog.test.alwaysFailPartition={self._task}: injected failure of attempt {self._attempt} "
                f"after {acknowledged} acknowledged request(s) (test-only option)"
            )
        lose = self._options.lose_shuffle_after_requests
        if lose is not None and self._task == 0 and self._attempt == 0 and acknowledged >= lose:
            lose_shuffle_once(self._write_id, lose)
        limit = self._options.fail_after_requests
        if limit is not None and self._attempt == 0 and acknowledged >= limit:
            raise InjectedFailure(
                f"pylog.test.failAfterRequests={limit}: injected failure of task {self._task} attempt "
                f"{self._attempt} after {acknowledged} acknowledged request(s) (test-only option)"
            )

    def drop_responses_now(self, acknowledged: int) -> bool:
        """True once, when ``dropResponseAfterRequests`` is reached: lose the responses in flight."""
        limit = self._options.drop_response_after_requests
        if self._drop_armed and limit is not None and acknowledged >= limit:
            self._drop_armed = False
            return True
        return False


def lose_shuffle_once(write_id: str, limit: int) -> None:
    """``pylog.test.loseShuffleAfterRequests``: delete this executor's shuffle files and crash, once per write."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    if not dirs:
        raise InjectedFailure(
            "pylog.test.loseShuffleAfterRequests: SPARK_LOCAL_DIRS is not set (not in Spark?)"
        )
    try:
        Path(dirs[0], f"pylog-test-lost-shuffle-{write_id}").touch(exist_ok=False)
    except FileExistsError:
        return  # done once for this write: the re-attempted stage runs undisturbed
    lost = [f for d in dirs for f in Path(d).rglob("shuffle_*")]
    for f in lost:
        f.unlink(missing_ok=True)
    print(
        f"pylog.test.loseShuffleAfterRequests={limit}: deleted {len(lost)} shuffle file(s) under {dirs} after "
        f"{limit} acknowledged request(s); ending this Python worker (test-only option)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


def kill_driver(pid: int) -> None:
    """``pylog.test.killDriverAfterCommitIntent``: SIGKILL the process group led by ``pid``, then this process.

    Refuses (InjectedFailure) unless ``pid`` leads its own process group, so that it can never take down a
    process group it does not own (a test runner's)."""
    if os.getpgid(pid) != pid:
        raise InjectedFailure(
            f"pylog.test.killDriverAfterCommitIntent={pid}: that process does not lead its own process group "
            "(start the driver program in a new session); not killing anything"
        )
    os.killpg(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
