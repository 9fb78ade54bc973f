"""TEST-ONLY fault injection for the writer: the ``pylog.test.*`` options and the failures they cause.

Nothing here runs in production: :func:`parse_fault_options` returns ``None`` when no ``pylog.test.*`` option
is given, the writer then builds no :class:`TaskFaults`, and the producer's only hook
(``faults is not None`` checks in :mod:`spark_kafka_log.sender`) is skipped.

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
* ``pylog.test.stallCommitAfterPrepared=N`` (exactly-once streaming sink, **driver**): every micro-batch's
  ``commit()`` stops for good once its sink-log entry is written ``prepared`` and the first N of its
  transactions are committed (N=0: none), after creating ``stalled-<batchId>.test`` in the sink log's folder,
  so a test can SIGKILL the driver at exactly that point (:func:`stall_commit`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import InjectedFailure
from spark_kafka_log.option_parsing import int_option

__all__ = [
    "FAULT_OPTION_KEYS",
    "FAULT_OPTION_NAMES",
    "FaultOptions",
    "TaskFaults",
    "kill_driver",
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


def parse_fault_options(opts: Mapping[str, str]) -> FaultOptions | None:
    """The test-only options of a write (keys lower-cased), or ``None`` when none is given."""
    values = [int_option(opts, name, None, 0) for name in FAULT_OPTION_NAMES]
    if all(v is None for v in values):
        return None
    return FaultOptions(*values)


def stall_commit(sink_dir: str, batch_id: int, committed: int) -> None:
    """Driver, ``pylog.test.stallCommitAfterPrepared``: mark the stall, then never return (the test kills us)."""
    Path(sink_dir, f"stalled-{batch_id}.test").touch()
    while True:
        time.sleep(3600)


class TaskFaults:
    """The faults of one task attempt; the sender asks it after every acknowledgement."""

    def __init__(self, options: FaultOptions, task: int, attempt: int) -> None:
        self._options = options
        self._task = task
        self._attempt = attempt
        self._drop_armed = options.drop_response_after_requests is not None

    def after_acknowledged(self, acknowledged: int) -> None:
        """Raise :class:`InjectedFailure` in a first attempt that reached ``failAfterRequests``."""
        if self._options.always_fail_partition == self._task:
            raise InjectedFailure(
                f"pylog.test.alwaysFailPartition={self._task}: injected failure of attempt {self._attempt} "
                f"after {acknowledged} acknowledged request(s) (test-only option)"
            )
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
