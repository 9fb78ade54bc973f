"""Faults of a nemesis step (:mod:`.schedule`) done to a local process cluster, and undone.

:func:`inflict` resolves a step's targets (a targeted step reads who leads or controls from the cluster's own
metadata file, the truth a single-host cluster decides on), does the fault, holds it, undoes it and returns what
it did as an :class:`Event`. Undoing is in a ``finally``: a stopped process is always continued and a killed node
always started again, also when the hold is interrupted, so a failed run never leaves a node stopped behind it.

Processes: SIGKILL waits for the exit (:meth:`~broker_runtime.launch.BrokerCluster.kill`); SIGSTOP waits until
the process is really stopped (``/proc``'s state ``T``) before the hold starts. Nodes come back through
:meth:`~broker_runtime.launch.BrokerCluster.start`: the same command as ``pylog-broker cluster`` runs, same node
id, settings and log dir, a new port.

Network steps (``isolate``, ``leader_cut``, ``bridge``) cut links of the cluster's :class:`~.network.Network`
and heal them after the hold; they need one (the cluster's nodes placed in its namespaces).

Disk steps (``disk_full``) need the nodes' log dirs on :class:`~.disks.Disks`: the node's tmpfs is filled, the
node must halt on it (a write refused with ENOSPC stops a pylog broker, as Kafka's broker halts when its only
log dir fails) within :data:`HALT_BOUND_S` (the event's note says so when it did not: nothing was written to it),
the hold runs from the halt, then the space is freed and the node started again (it recovers its logs).
``slow_disk`` makes every write, truncate and fsync of the node's disk take :data:`SLOW_DISK_DELAY_MS` more
for the hold (:mod:`.slowfs`), then fast again, also when the hold is interrupted.

Clock steps (``clock_jump``) need the nodes under :class:`~.clocks.Clocks`: the node's wall clock is set
``jump_s`` seconds off the real one, held for :data:`~.clocks.VISIBLE_S` (until the node has seen it) plus the
step's hold, and set right again (in a ``finally``), which is a second step of the opposite sign. The node need
not run (a node started during the hold starts with the jumped clock, as a machine whose clock is wrong).

Threading: called from the runner's thread only (the cluster handle belongs to it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from broker_runtime.launch import BrokerCluster
from tests.support.cluster import cluster_metadata, wait_for
from tests.support.nemesis.clocks import VISIBLE_S, Clocks
from tests.support.nemesis.disks import Disks
from tests.support.nemesis.network import CLIENTS, Network
from tests.support.nemesis.schedule import CLOCK_KINDS, DISK_KINDS, NETWORK_KINDS, Step
from tests.support.processes import process_state

__all__ = ["HALT_BOUND_S", "SLOW_DISK_DELAY_MS", "Event", "fill_until_halted", "inflict"]

#: How long a node whose disk was filled may take to halt under the workloads (they write to every node).
HALT_BOUND_S = 20.0
#: What a slow disk adds to each write and fsync: a follower appending a fetch answer for a dozen partitions
#: falls seconds behind, more than the nemesis's ``replica.lag.time.max.ms``.
SLOW_DISK_DELAY_MS = 1000


@dataclass
class Event:
    """What one step did: its kind, the nodes it hit (resolved), when (seconds since the run began), and any
    note (e.g. a targeted step that found no leader and hit nothing)."""

    step: Step
    nodes: tuple[int, ...] = ()
    at_s: float = 0.0
    note: str = ""

    def __str__(self) -> str:
        hit = f"nodes {list(self.nodes)}" if self.nodes else "nothing"
        return (
            f"t={self.at_s:6.1f}s {self.step.kind:15s} hit {hit}{' (' + self.note + ')' if self.note else ''}"
        )


def _targets(cluster: BrokerCluster, step: Step, topic: str) -> tuple[tuple[int, ...], str]:
    if step.nodes:
        return step.nodes, ""
    meta = cluster_metadata(cluster)
    if step.kind == "kill_controller":
        holder = meta.controller_holder
        return ((holder,), "") if holder >= 0 else ((), "no controller")
    info = meta.topic(topic)
    if info is None:
        return (), f"no topic {topic}"
    leader = info.partitions[step.partition].leader
    return ((leader,), "") if leader >= 0 else ((), f"partition {step.partition} has no leader")


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: process_state(pid) in ("T", "t"), timeout_s=5, what=f"process {pid} stopped")


def _cut(network: Network, step: Step, nodes: tuple[int, ...], everyone: int) -> None:
    if step.kind == "bridge":
        network.cut(nodes[0], nodes[1])
        return
    for other in range(everyone):
        if other != nodes[0]:
            network.cut(nodes[0], other)
    if step.kind == "isolate":
        network.cut(nodes[0], CLIENTS)


def fill_until_halted(cluster: BrokerCluster, disks: Disks, node: int, bound_s: float = HALT_BOUND_S) -> bool:
    """Fill node ``node``'s disk and wait until its process has exited; False if it still runs after
    ``bound_s``. The caller frees the disk (:meth:`~.disks.Disks.free`) in any case."""
    disks.fill(node)
    deadline = time.monotonic() + bound_s
    while cluster.nodes[node].running:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _disk_full(cluster: BrokerCluster, disks: Disks, step: Step, event: Event) -> None:
    node = step.nodes[0]
    if not cluster.nodes[node].running:
        event.nodes, event.note = (), f"node {node} not running"
        return
    try:
        if not fill_until_halted(cluster, disks, node):
            event.note = f"still running {HALT_BOUND_S:g} s after its disk filled"
            return
        time.sleep(step.hold_s)
    finally:
        disks.free(node)
        if not cluster.nodes[node].running:
            cluster.start(node)


def inflict(
    cluster: BrokerCluster,
    step: Step,
    topic: str,
    began: float,
    network: Network | None = None,
    disks: Disks | None = None,
    clocks: Clocks | None = None,
) -> Event:
    """Do ``step`` to ``cluster``, hold it, undo it; ``topic`` is the topic whose leaders targeted steps aim at."""
    nodes, note = _targets(cluster, step, topic)
    event = Event(step, nodes, time.monotonic() - began, note)
    if step.kind in CLOCK_KINDS:
        if clocks is None:
            raise ValueError(f"a {step.kind} step needs the cluster's nodes under Clocks of their own")
        if not nodes:
            return event
        event.note = f"wall clock {step.jump_s:+d} s, then back"
        try:
            clocks.set(nodes[0], step.jump_s)
            time.sleep(VISIBLE_S + step.hold_s)
        finally:
            clocks.set(nodes[0], 0)
        return event
    if step.kind in DISK_KINDS:
        if disks is None:
            raise ValueError(f"a {step.kind} step needs the cluster's log dirs on Disks of their own")
        if step.kind == "slow_disk":
            try:
                disks.slow(nodes[0], SLOW_DISK_DELAY_MS)
                time.sleep(step.hold_s)
            finally:
                disks.fast(nodes[0])
        else:
            _disk_full(cluster, disks, step, event)
        return event
    if step.kind in NETWORK_KINDS:
        if network is None:
            raise ValueError(f"a {step.kind} step needs the cluster's nodes in a Network of their own")
        if not nodes:
            return event
        try:
            _cut(network, step, nodes, len(cluster.nodes))
            time.sleep(step.hold_s)
        finally:
            network.heal()
        return event
    nodes = tuple(n for n in nodes if cluster.nodes[n].running)
    killed: list[int] = []
    stopped: list[int] = []
    try:
        for node in nodes:
            if step.kind in ("pause", "pause_leader"):
                stopped.append(cluster.nodes[node].pid)
                _stop(stopped[-1])
            else:
                cluster.kill(node)
                killed.append(node)
        time.sleep(step.hold_s)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for node in killed:
            cluster.start(node)
    return event
