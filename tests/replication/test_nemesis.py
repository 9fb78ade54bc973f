"""The nemesis (:mod:`tests.support.nemesis`) over a 3-node process cluster: a seeded schedule of SIGKILLs and
restarts, SIGSTOP/SIGCONT, leader- and controller-targeted kills, two nodes down at once and network partitions
(one node isolated, a leader cut from its followers, a bridge), under an idempotent acks=all producer, a
transactional producer and a group consumer; then every checker.

The cluster's nodes run each in a network namespace of its own (:class:`~tests.support.nemesis.network.Network`).
Where namespaces cannot be made (not root, no iproute2), the cluster runs on loopback and the schedules leave the
network faults out, with a warning saying why.

Two forms:

* the bounded run (the default suite, ``process`` tier): seed :data:`SEED`, each kind of :data:`BOUNDED_KINDS`
  once (the targeted kills and pause, two down, the three partitions; a restart costs seconds, so the random-node
  kill and pause are left to the soak), short holds, on a cluster of its own (about 55 s);
* the soak form (``bash jobs/dev.sh soak -k nemesis``): random seeds, one run of :data:`SOAK_STEPS` steps after
  the other on one cluster, for ``PYLOG_NEMESIS_MINUTES`` minutes (default 30); it stops at the first run with a
  failure, whose report names its seed.

``PYLOG_NEMESIS_SEED=N`` makes either form run seed ``N`` once (the seed a failure printed), with its schedule.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from broker_runtime.launch import BrokerCluster, cluster_process
from tests.support.nemesis import network, runner
from tests.support.nemesis.schedule import ALL_KINDS, KINDS

SEED = 36
BOUNDED_KINDS = (
    "kill_leader",
    "kill_controller",
    "pause_leader",
    "two_down",
    "isolate",
    "leader_cut",
    "bridge",
)
#: The bounded run's holds and gaps: short, so that every kind fits in about a minute; a network cut still
#: outlasts ``replica.lag.time.max.ms`` sometimes.
BOUNDED = {"hold_s": (0.3, 1.5), "net_hold_s": (1.5, 3.5), "gap_s": (0.3, 1.0)}
SOAK_STEPS = 12


@dataclass
class Nemesis:
    cluster: BrokerCluster
    network: network.Network | None
    kinds: tuple[str, ...]


@pytest.fixture(scope="module")
def nemesis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nemesis]:
    data = tmp_path_factory.mktemp("nemesis")
    why = network.unavailable()
    with contextlib.ExitStack() as stack:
        if why is None:
            net = stack.enter_context(network.Network(3))
            cluster = stack.enter_context(
                cluster_process(data, nodes=3, overrides=runner.OVERRIDES, placement=net.placement)
            )
            yield Nemesis(cluster, net, ALL_KINDS)
        else:
            warnings.warn(f"nemesis without network partitions: {why}", stacklevel=1)
            ports = _free_ports(3)
            cluster = stack.enter_context(
                cluster_process(
                    data, nodes=3, overrides=runner.OVERRIDES, placement=lambda i: ((), "127.0.0.1", ports[i])
                )
            )
            yield Nemesis(cluster, None, KINDS)


def _free_ports(count: int) -> list[int]:
    """Ports free now, one per node: a node keeps its port across restarts (clients that knew it find it again;
    with new ports, a client could lose every address it knew when all nodes restarted before it refreshed)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _seed() -> int | None:
    chosen = os.environ.get("PYLOG_NEMESIS_SEED")
    return int(chosen) if chosen else None


@pytest.mark.timeout(300)
def test_nemesis_bounded_run_keeps_every_guarantee(nemesis: Nemesis) -> None:
    seed = _seed() or SEED
    kinds = tuple(k for k in BOUNDED_KINDS if k in nemesis.kinds) or nemesis.kinds
    steps = len(kinds)
    report = runner.run(
        nemesis.cluster,
        seed,
        steps,
        name=f"nemesis-{seed}",
        kinds=kinds,
        network=nemesis.network,
        **BOUNDED,
    )
    print(report.summary())
    assert not report.failures, report.summary()
    assert set(report.fault_counts()) == set(kinds), report.summary()  # each kind hit something


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_nemesis_soak(nemesis: Nemesis) -> None:
    minutes = float(os.environ.get("PYLOG_NEMESIS_MINUTES", "30"))
    end = time.monotonic() + minutes * 60
    chosen = _seed()
    faults: Counter[str] = Counter()
    done: list[str] = []
    while time.monotonic() < end:
        seed = chosen or random.randrange(2**31)
        report = runner.run(
            nemesis.cluster,
            seed,
            SOAK_STEPS,
            name=f"soak-{len(done)}",
            kinds=nemesis.kinds,
            network=nemesis.network,
        )
        faults.update(report.fault_counts())
        done.append(
            f"seed {seed}: faults {report.fault_counts()}, healed in {report.heal_s:.1f} s, {report.counts}"
        )
        print(done[-1], flush=True)
        assert not report.failures, report.summary()
        if chosen:
            break
    print(f"nemesis soak: {len(done)} run(s) in {minutes:g} min, faults {dict(faults)}, 0 checker failures")
