"""A nemesis schedule: the faults of one run, drawn from a seed, so that the same seed gives the same schedule.

A schedule is a list of :class:`Step`; each step is one fault held for ``hold_s`` seconds, then undone, then
``gap_s`` seconds of quiet before the next step. Kinds (:data:`KINDS`):

==================  ==========================================================================================
``kill``            SIGKILL node ``nodes[0]``; started again (same node id, log dir and settings) after the hold
``kill_leader``     SIGKILL the node leading partition ``partition`` of the workload's idempotent topic
``kill_controller`` SIGKILL the node holding the controller role
``pause``           SIGSTOP node ``nodes[0]``, SIGCONT after the hold (a hold over the session timeout fences it)
``pause_leader``    SIGSTOP the leader of ``partition``
``two_down``        SIGKILL ``nodes[0]`` and ``nodes[1]`` at once; both started again after the hold
``isolate``         cut node ``nodes[0]`` from the other nodes and from the clients (:mod:`.network`)
``leader_cut``      cut the leader of ``partition`` from every other node, not from the clients
``bridge``          cut ``nodes[0]`` from ``nodes[1]``; the third node still reaches both (Jepsen's bridge)
``disk_full``       fill node ``nodes[0]``'s log dir (:mod:`.disks`) until the node halts on its full disk, hold,
                    free the space and start the node again
``slow_disk``       make every write and fsync of node ``nodes[0]``'s disk slow (:mod:`.slowfs`) for the hold
``clock_jump``      step the wall clock of the leader of ``partition`` by ``jump_s`` seconds (forward or
                    backward, :mod:`.clocks`), hold, step it back: two steps, the second the opposite of the
                    first (a leader: the idempotent topic's records carry its clock, ``LogAppendTime``)
==================  ==========================================================================================

The last three (:data:`NETWORK_KINDS`) need the cluster's nodes in network namespaces of their own
(:class:`~.network.Network`), :data:`DISK_KINDS` their log dirs on file systems of their own
(:class:`~.disks.Disks`), :data:`CLOCK_KINDS` their processes under libfaketime (:class:`~.clocks.Clocks`);
:data:`KINDS` are the process faults, which any local cluster takes. A network
or slow-disk step holds for ``net_hold_s`` (longer: a cut or a slow disk shorter than ``replica.lag.time.max.ms``
changes no ISR). A clock jump holds for ``hold_s`` from the moment the node has seen it
(:data:`.clocks.VISIBLE_S` after the step).

A jump's size is drawn from ``jump_s`` (default :data:`JUMP_S`), its sign at random. Its bound: the step back
after a backward jump is a forward jump of the same size, and a forward jump on a transaction coordinator's node
ages every open transaction by that much (the coordinator compares a wall-clock start with the wall clock, as
Kafka's ``TransactionStateManager.timedOutTransactions`` does), so jumps stay well under the workload's
``transaction.timeout.ms`` (30 s): larger ones would abort its transactions and fence it, in Kafka as in pylog.

What a schedule fixes is what the seed can: the kinds, the random nodes, the partition whose leader is aimed at,
the hold and gap times. Which node leads or controls when a targeted step runs is the cluster's state at that
moment, so a targeted step's node is found then and reported in the run's log (:mod:`.runner`), beside the
schedule. Every fault is undone before the next step starts: at most two nodes are down at a time, yet a node
started again may not have caught up when the next fault comes, which is the point.

Pure functions of the seed; no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "ALL_KINDS",
    "CLOCK_KINDS",
    "DISK_KINDS",
    "JUMP_S",
    "KINDS",
    "NETWORK_KINDS",
    "Step",
    "describe",
    "make_schedule",
]

KINDS = ("kill", "kill_leader", "kill_controller", "pause", "pause_leader", "two_down")
NETWORK_KINDS = ("isolate", "leader_cut", "bridge")
DISK_KINDS = ("disk_full", "slow_disk")
CLOCK_KINDS = ("clock_jump",)
ALL_KINDS = KINDS + NETWORK_KINDS + DISK_KINDS + CLOCK_KINDS
#: The range of a clock jump's size, in seconds (see the module docstring for its bound).
JUMP_S = (2.0, 15.0)
#: The kinds held for ``net_hold_s``: their effect (a follower out of the ISR) needs ``replica.lag.time.max.ms``.
_LONG = (*NETWORK_KINDS, "slow_disk")
#: The kinds whose nodes the schedule draws (one, or two for these).
_DRAWN = {
    "kill": 1,
    "pause": 1,
    "isolate": 1,
    "two_down": 2,
    "bridge": 2,
    "disk_full": 1,
    "slow_disk": 1,
}


@dataclass(frozen=True)
class Step:
    kind: str
    #: Random nodes drawn for ``kill``, ``pause`` (one) and ``two_down`` (two); empty for targeted kinds.
    nodes: tuple[int, ...]
    #: The partition of the idempotent topic whose leader ``kill_leader``, ``pause_leader``, ``leader_cut`` and
    #: ``clock_jump`` aim at.
    partition: int
    hold_s: float
    gap_s: float
    #: ``clock_jump``: the step of the node's wall clock, seconds (negative: backward); 0 for other kinds.
    jump_s: int = 0

    def __str__(self) -> str:
        target = f" nodes {list(self.nodes)}" if self.nodes else ""
        if self.kind.endswith("_leader") or self.kind in ("leader_cut", "clock_jump"):
            target = f" leader of partition {self.partition}"
        jump = f" by {self.jump_s:+d} s" if self.jump_s else ""
        return f"{self.kind}{target}{jump} hold {self.hold_s:.1f} s gap {self.gap_s:.1f} s"


def make_schedule(
    seed: int,
    steps: int,
    *,
    nodes: int = 3,
    partitions: int = 3,
    kinds: tuple[str, ...] = KINDS,
    hold_s: tuple[float, float] = (0.5, 3.0),
    gap_s: tuple[float, float] = (0.5, 2.0),
    net_hold_s: tuple[float, float] = (2.0, 4.5),
    jump_s: tuple[float, float] = JUMP_S,
) -> list[Step]:
    """``steps`` faults drawn from ``seed``: each kind of ``kinds`` equally likely, holds and gaps uniform in
    their ranges (rounded to 0.1 s so that a printed schedule is the schedule; a jump to whole seconds, its sign
    at random). The first ``len(kinds)`` steps are each kind once, in a seeded order, so that a short run still
    meets every kind. Schedules without ``clock_jump`` are the ones the same seed gave before it existed."""
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {unknown}: known are {list(ALL_KINDS)}")
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    schedule = []
    for index in range(steps):
        kind = order[index] if index < len(order) else rng.choice(kinds)
        drawn = tuple(rng.sample(range(nodes), _DRAWN.get(kind, 1)))
        jump = 0
        if kind == "clock_jump":  # drawn only for this kind: the other kinds' schedules stay as they were
            jump = round(rng.uniform(*jump_s)) * rng.choice((-1, 1))
        schedule.append(
            Step(
                kind=kind,
                nodes=drawn if kind in _DRAWN else (),
                partition=rng.randrange(partitions),
                hold_s=round(rng.uniform(*(net_hold_s if kind in _LONG else hold_s)), 1),
                gap_s=round(rng.uniform(*gap_s), 1),
                jump_s=jump,
            )
        )
    return schedule


def describe(seed: int, schedule: list[Step]) -> str:
    """The schedule as printed on a failure: one line per step, after the seed that makes it again."""
    lines = [f"nemesis seed {seed}: {len(schedule)} step(s) (PYLOG_NEMESIS_SEED={seed} runs it again)"]
    lines += [f"  {i:2d}. {step}" for i, step in enumerate(schedule)]
    return "\n".join(lines)
