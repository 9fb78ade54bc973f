"""One nemesis run: workloads on a local process cluster, a seeded schedule of faults, healing, then checkers.

:func:`run` on a running :class:`~broker_runtime.launch.BrokerCluster` (started with :data:`OVERRIDES` on top of
the caller's settings; its topics, transactional id and group are named after ``name``, so several runs can share
one cluster):

1. creates two topics of ``PARTITIONS`` partitions, replication factor 3, ``min.insync.replicas=2``, time
   retention :data:`RETENTION_MS` (longer than any run, so a segment deleted by time is a failure); with clocks
   (:class:`~.clocks.Clocks`) the idempotent one also with :data:`CLOCK_TOPIC_CONFIGS`;
2. starts the workloads (:mod:`.workload`) and waits until the idempotent producer has an acknowledgement;
3. runs the schedule (:mod:`.schedule`, :func:`~.faults.inflict`), step after step;
4. heals: every node runs, every node's metadata lists every broker unfenced and every partition led with its
   full ISR, and one node holds the controller role, within :data:`HEAL_BOUND_S` (a failure otherwise);
5. lets the workloads run one more second on the healed cluster, stops them (producers drain), and
6. runs every checker of :mod:`.checkers`.

The :class:`Report` says what happened (the seed, the schedule, what each step hit, client error counts, how long
healing took) and lists the failures; :meth:`Report.summary` is what a failing test prints, enough to run the
same schedule again from its seed.

Threading: the caller's thread drives the faults and checks; the workloads run in their own threads.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.launch import BrokerCluster
from tests.support.cluster import FAST, cluster_metadata, create_replicated, heal
from tests.support.nemesis import checkers
from tests.support.nemesis.clocks import Clocks
from tests.support.nemesis.disks import Disks
from tests.support.nemesis.faults import Event, inflict
from tests.support.nemesis.network import Network
from tests.support.nemesis.schedule import KINDS, Step, describe, make_schedule
from tests.support.nemesis.workload import (
    DRAIN_S,
    FINISH_S,
    LIBRDKAFKA_LOG,
    LIBRDKAFKA_TAIL,
    GroupMember,
    Idempotent,
    Transactional,
)

__all__ = ["CLOCK_TOPIC_CONFIGS", "HEAL_BOUND_S", "OVERRIDES", "PARTITIONS", "RETENTION_MS", "Report", "run"]

PARTITIONS = 3
#: The cluster settings a nemesis run assumes: the tests' short timings (a killed or stopped node fenced within
#: 1.5 s), few internal partitions (quick to create), transactions of dead producers aborted within a second of
#: their timeout, no initial rebalance delay, a follower cut off for 3 s out of the ISR, a retention pass every
#: second (so that a clock jump meets one).
OVERRIDES = {
    **FAST,
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "3000",
    "log.retention.check.interval.ms": "1000",
}
#: The workload topics' time retention: ten minutes, longer than a run plus the largest clock jump
#: (:data:`.schedule.JUMP_S`), so no segment of a run is old enough to go, whatever a node's clock says.
RETENTION_MS = 600_000
#: The idempotent topic's settings when the nodes' clocks jump: its leaders stamp every batch with their wall
#: clock (``LogAppendTime``), so a jump shows in the log and in its time index, and the index is dense (an entry
#: every few batches) so that entries are written while a clock is off.
CLOCK_TOPIC_CONFIGS = {"message.timestamp.type": "LogAppendTime", "index.interval.bytes": "256"}
#: How long a cluster may take to be whole again after the last fault was undone (the bound the README states).
HEAL_BOUND_S = 30.0
#: How long the last stable offset may take to reach the high watermark once the producers stopped: the
#: transaction timeout (30 s) of a producer that died mid-transaction, plus the abort check's period and margin.
STABLE_BOUND_S = 35.0


@dataclass
class Report:
    seed: int
    schedule: list[Step]
    events: list[Event] = field(default_factory=list)
    heal_s: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: Seconds each phase took: setup (topics, clients, first acknowledgement), faults, heal, drain, checks, time
    #: checks (retention, time indexes, ListOffsets by timestamp).
    phases: dict[str, float] = field(default_factory=dict)
    #: With clocks: each step back of the idempotent topic's record timestamps (LogAppendTime), seconds.
    steps_back_s: list[int] = field(default_factory=list)
    #: The file holding every librdkafka log line of the run (beside the brokers' logs).
    librdkafka_log: Path | None = None

    def summary(self) -> str:
        lines = [describe(self.seed, self.schedule), "what each step hit:"]
        lines += [f"  {event}" for event in self.events]
        healed = "not healed" if self.heal_s is None else f"healed in {self.heal_s:.1f} s"
        lines.append(f"{healed}; workloads: {self.counts}")
        if self.steps_back_s:
            lines.append(f"record timestamps stepped back by (s): {self.steps_back_s}")
        lines.append("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items()))
        lines.append(f"client errors by kind: {self.errors}")
        lines.append(f"{len(self.failures)} checker failure(s)" + (":" if self.failures else ""))
        lines += [f"  - {failure}" for failure in self.failures]
        if self.failures:
            lines.append(f"librdkafka's last log lines (all in {self.librdkafka_log}):")
            lines += [f"  {line}" for line in LIBRDKAFKA_TAIL]
        return "\n".join(lines)

    def fault_counts(self) -> dict[str, int]:
        return dict(Counter(event.step.kind for event in self.events if event.nodes))


def _whole(cluster: BrokerCluster, bound_s: float) -> float:
    """Seconds until the cluster is whole and has one live controller; AssertionError past ``bound_s``."""
    start = time.monotonic()
    heal(cluster, timeout_s=bound_s)
    while True:
        meta = cluster_metadata(cluster)
        holder = meta.controller_holder
        if holder in meta.unfenced() and cluster.nodes[holder].running:
            return time.monotonic() - start
        if time.monotonic() - start > bound_s:
            raise AssertionError(f"no live controller {bound_s:g} s after the last fault (holder {holder})")
        time.sleep(0.05)


def run(
    cluster: BrokerCluster,
    seed: int,
    steps: int,
    *,
    name: str = "nemesis",
    kinds: tuple[str, ...] = KINDS,
    network: Network | None = None,
    disks: Disks | None = None,
    clocks: Clocks | None = None,
    **timings: tuple[float, float],
) -> Report:
    """One run of ``steps`` faults drawn from ``seed``; see the module docstring. ``timings``: the ranges of
    :func:`~.schedule.make_schedule` (``hold_s``, ``net_hold_s``, ``gap_s``) other than its defaults."""
    schedule = make_schedule(
        seed, steps, nodes=len(cluster.nodes), partitions=PARTITIONS, kinds=kinds, **timings
    )
    report = Report(seed, schedule)
    clock = [time.monotonic()]

    def phase(name: str) -> None:
        now = time.monotonic()
        report.phases[name] = now - clock[0]
        clock[0] = now

    print(describe(seed, report.schedule), flush=True)
    idem, txn = f"{name}-idempotent", f"{name}-transactional"
    configs = {"min.insync.replicas": "2", "retention.ms": str(RETENTION_MS)}
    create_replicated(
        cluster, idem, PARTITIONS, configs={**configs, **(CLOCK_TOPIC_CONFIGS if clocks else {})}
    )
    create_replicated(cluster, txn, PARTITIONS, configs=configs)

    def bootstrap() -> str:  # read from the workloads' threads: the nodes' addresses as they are now
        return cluster.bootstrap

    producer = Idempotent(bootstrap, idem, PARTITIONS)
    transactional = Transactional(bootstrap, txn, PARTITIONS, seed, f"{name}-txn")
    member = GroupMember(bootstrap, idem, PARTITIONS, f"{name}-group")
    workloads = (producer, transactional, member)
    report.librdkafka_log = Path(cluster.data_dir) / f"{name}-librdkafka.log"
    log_file = logging.FileHandler(report.librdkafka_log)
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    LIBRDKAFKA_LOG.addHandler(log_file)
    for workload in workloads:
        workload.start()
    try:
        warm = time.monotonic() + 30
        while not producer.acked and time.monotonic() < warm:
            time.sleep(0.05)
        phase("setup")
        began = time.monotonic()
        for step in report.schedule:
            report.events.append(inflict(cluster, step, idem, began, network, disks, clocks))
            time.sleep(step.gap_s)
        phase("faults")
        try:
            report.heal_s = _whole(cluster, HEAL_BOUND_S)
        except AssertionError as exc:
            report.failures.append(f"heal: {exc}")
            heal(cluster, timeout_s=60)  # the checks below still need a cluster to read from
        phase("heal")
        time.sleep(1.0)
    finally:
        for workload in workloads:
            workload.stop()
        for workload in workloads:
            workload.join(DRAIN_S + FINISH_S + 10)
        LIBRDKAFKA_LOG.removeHandler(log_file)
        log_file.close()
    phase("drain")
    stuck = [w.name_prefix for w in workloads if w.is_alive()]
    if stuck:
        frames = sys._current_frames()
        where = {
            w.name_prefix: "".join(traceback.format_stack(frames[w.ident])[-4:])
            for w in workloads
            if w.is_alive() and w.ident in frames
        }
        report.failures.append(f"workloads {stuck} did not stop; where they are: {where}")
    outcomes = Counter(outcome for _, outcome in list(transactional.transactions.values()))
    report.counts = {
        "sent": producer.sent,
        "acked": len(producer.acked),
        **{f"txn_{k}": v for k, v in sorted(outcomes.items())},
        "commits": len(member.commits),
    }
    report.errors = checkers.error_counts(workloads)
    if stuck:
        return report
    report.failures += checkers.client_errors(workloads)
    bootstrap = cluster.bootstrap
    report.failures += checkers.stable(bootstrap, txn, PARTITIONS, STABLE_BOUND_S)
    report.failures += checkers.acknowledged(
        producer, checkers.read(bootstrap, idem, PARTITIONS, "read_uncommitted")
    )
    report.failures += checkers.transactions(
        transactional, checkers.read(bootstrap, txn, PARTITIONS, "read_committed")
    )
    committed = checkers.committed_offsets(bootstrap, member.group, idem, PARTITIONS)
    report.failures += checkers.group_offsets(member, committed)
    topics = [(idem, PARTITIONS), (txn, PARTITIONS)]
    report.failures += checkers.replicas(cluster, topics)
    phase("checks")
    report.failures += checkers.log_starts(cluster, topics)
    report.failures += checkers.time_indexes(cluster, topics)
    report.failures += checkers.offsets_for_times(cluster, idem, PARTITIONS)
    if clocks is not None:  # what the jumps did to the log: how far its timestamps went back, in seconds
        report.steps_back_s = [round(ms / 1000) for ms in checkers.steps_back(cluster, idem, PARTITIONS)]
    phase("time checks")
    return report
