"""The nemesis (:mod:`tests.support.nemesis`) over a 3-node process cluster: a seeded schedule of SIGKILLs and
restarts, SIGSTOP/SIGCONT, leader- and controller-targeted kills, two nodes down at once, network partitions
(one node isolated, a leader cut from its followers, a bridge), disk faults (a full disk; in the soak, a slow
one) and clock jumps (a node's wall clock stepped forward or backward, then back), under an idempotent acks=all
producer, a transactional producer and a group consumer; then every checker.

The cluster's nodes run each in a network namespace of its own (:class:`~tests.support.nemesis.network.Network`).
Where namespaces cannot be made (not root, no iproute2), the cluster runs on loopback and the schedules leave the
network faults out, with a warning saying why. Each node's log dir is a tmpfs of its own
(:class:`~tests.support.nemesis.disks.Disks`, mounted before the cluster starts, unmounted after it stopped); in
the soak, seen through the slow file system (:mod:`tests.support.nemesis.slowfs`, FUSE: libfuse 2 is installed
with apt-get when missing, and the fixture fails in one line when that fails). Where a tmpfs cannot be mounted
(not root), the disk faults are left out with a warning. Every node runs under libfaketime with a clock of its
own (:class:`~tests.support.nemesis.clocks.Clocks`; libfaketime is installed with apt-get when missing, and the
fixture fails in one line when that fails); not root and no libfaketime, the clock jumps are left out with a
warning. A clock jump of the bounded run must show in the log (record timestamps that go back), so a libfaketime
that fakes nothing fails it.

Deterministic disk tests on the same cluster, before the schedules: a full disk under the leader of a partition
(it halts, leadership moves, it recovers once the space is freed), and (soak) a slow disk under a follower (it
leaves the ISR and rejoins once the disk is fast again).

Two forms:

* the bounded run (the default suite, ``process`` tier): seed :data:`SEED`, each kind of :data:`BOUNDED_KINDS`
  once (the targeted kills and pause, two down, the three partitions, a full disk, a clock jump; a restart costs
  seconds, so the random-node kill and pause are left to the soak, and the slow disk too), short holds, on a
  cluster of its own (about 55 s);
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
from tests.support.cluster import cluster_metadata, create_replicated, heal, wait_for
from tests.support.nemesis import checkers, clocks, disks, network, runner, slowfs
from tests.support.nemesis.faults import SLOW_DISK_DELAY_MS, fill_until_halted
from tests.support.nemesis.schedule import CLOCK_KINDS, DISK_KINDS, KINDS, NETWORK_KINDS
from tests.support.nemesis.workload import Idempotent

SEED = 36
BOUNDED_KINDS = (
    "kill_leader",
    "kill_controller",
    "pause_leader",
    "two_down",
    "isolate",
    "leader_cut",
    "bridge",
    "disk_full",
    "clock_jump",
)
#: The bounded run's holds and gaps: short, so that every kind fits in about a minute; a network cut still
#: outlasts ``replica.lag.time.max.ms`` sometimes.
BOUNDED = {"hold_s": (0.3, 1.5), "net_hold_s": (1.5, 3.5), "gap_s": (0.3, 1.0)}
SOAK_STEPS = 12


@dataclass
class Nemesis:
    cluster: BrokerCluster
    network: network.Network | None
    disks: disks.Disks | None
    #: None: the clock jumps are left out (:attr:`no_clocks` says why).
    clocks: clocks.Clocks | None
    kinds: tuple[str, ...]
    #: Why the disk faults are left out (None: they are not).
    no_disks: str | None = None
    #: Why the slow disk is left out (None: it is not).
    no_slow: str | None = None
    #: Why the clock jumps are left out (None: they are not).
    no_clocks: str | None = None


@pytest.fixture(scope="module")
def nemesis(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Nemesis]:
    data = tmp_path_factory.mktemp("nemesis")
    no_net, no_disks = network.unavailable(), disks.unavailable()
    kinds = KINDS
    # Missing tools are installed as the console tests install chromium; an install that ran and failed fails the
    # run in one line, one that cannot run here (no apt-get, not root) leaves the faults out with a warning.
    no_clocks = clocks.unavailable()
    if no_clocks is not None:
        failed = clocks.install()
        if failed is not None and failed.tried:
            pytest.fail(f"the nemesis's clock jumps need libfaketime: {failed}", pytrace=False)
        no_clocks = failed.line if failed is not None else clocks.unavailable()
    # The slow file system (a FUSE daemon in Python under every node's I/O) serves the soak only.
    soak = bool(request.config.getoption("--soak"))
    no_slow = no_disks or (None if soak else "the slow disk runs in the soak only") or slowfs.unavailable()
    if no_slow is not None and soak and no_disks is None and os.path.exists("/dev/fuse"):
        failed = slowfs.install_libfuse()
        if failed is not None and failed.tried:
            pytest.fail(f"the nemesis's slow disk needs libfuse 2: {failed}", pytrace=False)
        no_slow = failed.line if failed is not None else slowfs.unavailable()
    with contextlib.ExitStack() as stack:
        tmpfs = None
        if no_disks is None:  # entered first: unmounted once the cluster's processes are gone
            tmpfs = stack.enter_context(disks.Disks(data, 3, slow=no_slow is None))
            kinds += DISK_KINDS if no_slow is None else ("disk_full",)
        else:
            warnings.warn(f"nemesis without disk faults: {no_disks}", stacklevel=1)
        if no_slow is not None and soak:
            warnings.warn(f"nemesis without a slow disk: {no_slow}", stacklevel=1)
        clock = None
        if no_clocks is None:
            clock = stack.enter_context(clocks.Clocks(data, 3))
            kinds += CLOCK_KINDS
        else:
            warnings.warn(f"nemesis without clock jumps: {no_clocks}", stacklevel=1)

        def clocked(i: int) -> list[str]:
            return [*clock.prefix(i)] if clock is not None else []

        if no_net is None:
            net = stack.enter_context(network.Network(3))

            def placement(i: int) -> tuple[list[str], str, int]:
                prefix, host, port = net.placement(i)
                return [*prefix, *clocked(i)], host, port

            cluster = stack.enter_context(
                cluster_process(data, nodes=3, overrides=runner.OVERRIDES, placement=placement)
            )
            yield Nemesis(cluster, net, tmpfs, clock, kinds + NETWORK_KINDS, no_disks, no_slow, no_clocks)
        else:
            warnings.warn(f"nemesis without network partitions: {no_net}", stacklevel=1)
            ports = _free_ports(3)
            cluster = stack.enter_context(
                cluster_process(
                    data,
                    nodes=3,
                    overrides=runner.OVERRIDES,
                    placement=lambda i: (clocked(i), "127.0.0.1", ports[i]),
                )
            )
            yield Nemesis(cluster, None, tmpfs, clock, kinds, no_disks, no_slow, no_clocks)


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


@pytest.mark.timeout(120)
def test_a_full_disk_halts_its_node_and_loses_nothing_acknowledged(nemesis: Nemesis) -> None:
    """The leader of a partition under an idempotent acks=all producer runs out of disk: it halts (as a Kafka
    broker whose only log dir failed), leadership moves to an in-sync follower, the producer carries on there;
    with the space freed the node starts again, recovers its logs and rejoins the ISR. Afterwards every
    acknowledged record is in the log once, in order, no error reached the producer, and the three replicas'
    files decode whole and are byte-equal up to the high watermark (no partial batch kept)."""
    if nemesis.disks is None:
        pytest.skip(f"no tmpfs for the nodes' log dirs: {nemesis.no_disks}")
    cluster, topic = nemesis.cluster, "disk-full"
    create_replicated(cluster, topic, 1, configs={"min.insync.replicas": "2"})
    producer = Idempotent(lambda: cluster.bootstrap, topic, 1, rate_per_s=400)
    producer.start()
    try:
        wait_for(lambda: len(producer.acked) >= 50, timeout_s=30, what="the first acknowledgements")
        leader = cluster_metadata(cluster).topic(topic).partitions[0].leader
        node = cluster.nodes[leader]
        log_start = node.log_path.stat().st_size
        try:
            assert fill_until_halted(cluster, nemesis.disks, leader), (
                f"node {leader} still runs on a full disk"
            )
            assert node.proc.returncode == 1, f"node {leader} exited with {node.proc.returncode}"
            with node.log_path.open(encoding="utf-8", errors="replace") as log:
                log.seek(log_start)
                said = log.read()
            assert f"Shutdown broker {leader} because all log dirs in" in said, said[-2000:]
            assert "No space left on device" in said, said[-2000:]
            wait_for(
                lambda: cluster_metadata(cluster).topic(topic).partitions[0].leader not in (leader, -1),
                timeout_s=15,
                what=f"a leader other than node {leader}",
            )
            acked = len(producer.acked)
            wait_for(lambda: len(producer.acked) > acked + 50, timeout_s=30, what="acks from the new leader")
        finally:
            nemesis.disks.free(leader)
        cluster.start(leader)
        heal(cluster, timeout_s=30)
    finally:
        producer.stop()
        producer.join(60)
    failures = checkers.client_errors([producer])
    failures += checkers.acknowledged(
        producer, checkers.read(cluster.bootstrap, topic, 1, "read_uncommitted")
    )
    failures += checkers.replicas(cluster, [(topic, 1)])
    assert not failures, failures


@pytest.mark.soak
@pytest.mark.timeout(120)
def test_a_slow_disk_drops_its_follower_from_the_isr_until_it_is_fast_again(nemesis: Nemesis) -> None:
    """A follower whose disk turns slow (every write and fsync a second longer, through the slow file system)
    leaves the ISR, acks=all goes on with the two in sync, and once the disk is fast again it catches up and
    rejoins. Nothing acknowledged is lost, no error reached the producer, the replicas end byte-equal.

    How it leaves: its event loop waits for each write, so it falls behind its leader (dropped after
    ``replica.lag.time.max.ms``) and, with the nemesis's short ``broker.session.timeout.ms`` (1.5 s), misses its
    heartbeats too and is fenced, whichever comes first (the README's "Failures and what survives them").
    Soak only: the slow file system costs every node's I/O a trip through a Python FUSE daemon."""
    if nemesis.disks is None or not nemesis.disks.slowable:
        pytest.skip(f"no slow file system for the nodes' log dirs: {nemesis.no_disks or nemesis.no_slow}")
    cluster, topic = nemesis.cluster, "slow-disk"
    create_replicated(cluster, topic, 1, configs={"min.insync.replicas": "2"})
    producer = Idempotent(lambda: cluster.bootstrap, topic, 1, rate_per_s=400)
    producer.start()

    def isr() -> list[int]:
        return list(cluster_metadata(cluster).topic(topic).partitions[0].isr)

    try:
        wait_for(lambda: len(producer.acked) >= 50, timeout_s=30, what="the first acknowledgements")
        leader = cluster_metadata(cluster).topic(topic).partitions[0].leader
        follower = next(n for n in isr() if n != leader)
        try:
            nemesis.disks.slow(follower, SLOW_DISK_DELAY_MS)
            wait_for(lambda: follower not in isr(), timeout_s=20, what=f"slow node {follower} out of the ISR")
            acked = len(producer.acked)
            wait_for(lambda: len(producer.acked) > acked + 50, timeout_s=15, what="acks=all with two in sync")
        finally:
            nemesis.disks.fast(follower)
        wait_for(lambda: follower in isr(), timeout_s=20, what=f"node {follower} back in the ISR")
    finally:
        producer.stop()
        producer.join(60)
    failures = checkers.client_errors([producer])
    failures += checkers.acknowledged(
        producer, checkers.read(cluster.bootstrap, topic, 1, "read_uncommitted")
    )
    failures += checkers.replicas(cluster, [(topic, 1)])
    assert not failures, failures


#: The deterministic clock test's step: minutes, more than any random jump (:data:`.schedule.JUMP_S`), less than
#: the topic's ``retention.ms`` (:data:`.runner.RETENTION_MS`).
STEP_BACK_S = 180


@pytest.mark.soak
@pytest.mark.timeout(120)
def test_a_leaders_clock_stepped_back_minutes_keeps_its_time_index_and_lookups(nemesis: Nemesis) -> None:
    """The leader of a LogAppendTime partition under an idempotent acks=all producer has its wall clock stepped
    back three minutes, then forward again. It stamps the batches of that while three minutes earlier than those
    before (a LogAppendTime is the leader's clock, in Kafka too), yet its time index gains no smaller entry
    (every entry is the segment's largest timestamp so far), ListOffsets by timestamp still answers the first
    offset at or after a time (those of the stepped-back batches included), the step forward deletes nothing
    (it is shorter than ``retention.ms``), and nothing acknowledged is lost. Soak only: the bounded run has a
    clock jump of its own, of seconds."""
    if nemesis.clocks is None:
        pytest.skip(f"no clock jumps: {nemesis.no_clocks}")
    cluster, topic = nemesis.cluster, "clock-step"
    configs = {
        "min.insync.replicas": "2",
        "retention.ms": str(runner.RETENTION_MS),
        **runner.CLOCK_TOPIC_CONFIGS,
    }
    create_replicated(cluster, topic, 1, configs=configs)
    producer = Idempotent(lambda: cluster.bootstrap, topic, 1, rate_per_s=400)
    producer.start()
    hold_s = clocks.VISIBLE_S + 1.5  # the node sees its clock's control file again within VISIBLE_S
    try:
        wait_for(lambda: len(producer.acked) >= 50, timeout_s=30, what="the first acknowledgements")
        leader = cluster_metadata(cluster).topic(topic).partitions[0].leader
        try:
            nemesis.clocks.set(leader, -STEP_BACK_S)
            time.sleep(hold_s)
        finally:
            nemesis.clocks.set(leader, 0)
        time.sleep(hold_s)
    finally:
        producer.stop()
        producer.join(60)
    failures = checkers.client_errors([producer])
    log = checkers.read(cluster.bootstrap, topic, 1, "read_uncommitted")
    failures += checkers.acknowledged(producer, log)
    failures += checkers.replicas(cluster, [(topic, 1)])
    failures += checkers.log_starts(cluster, [(topic, 1)])
    failures += checkers.time_indexes(cluster, [(topic, 1)])
    failures += checkers.offsets_for_times(cluster, topic, 1)
    assert not failures, failures
    steps = checkers.steps_back(cluster, topic, 1)
    assert any(step <= -(STEP_BACK_S - 10) * 1000 for step in steps), f"no step back in the log: {steps}"


def _assert_jumps_seen(report: runner.Report) -> None:
    """A clock jump (2 s or more, :data:`.schedule.JUMP_S`) on a leader of the LogAppendTime topic steps its
    records' timestamps back, when it steps back or when it is undone: a libfaketime that fakes nothing (not
    preloaded, or preloaded without effect) leaves none, and ``fault_counts()`` alone would not see it."""
    if "clock_jump" in report.fault_counts():
        assert report.steps_back_s, f"a clock jump ran, yet no record timestamp went back\n{report.summary()}"


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
        disks=nemesis.disks,
        clocks=nemesis.clocks,
        **BOUNDED,
    )
    print(report.summary())
    assert not report.failures, report.summary()
    assert set(report.fault_counts()) == set(kinds), report.summary()  # each kind hit something
    _assert_jumps_seen(report)


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_nemesis_soak(nemesis: Nemesis) -> None:
    minutes = float(os.environ.get("PYLOG_NEMESIS_MINUTES", "30"))
    end = time.monotonic() + minutes * 60
    chosen = _seed()
    faults: Counter[str] = Counter()
    done: list[str] = []
    jumps_seen = 0
    while time.monotonic() < end:
        seed = chosen or random.randrange(2**31)
        report = runner.run(
            nemesis.cluster,
            seed,
            SOAK_STEPS,
            name=f"soak-{len(done)}",
            kinds=nemesis.kinds,
            network=nemesis.network,
            disks=nemesis.disks,
            clocks=nemesis.clocks,
        )
        faults.update(report.fault_counts())
        done.append(
            f"seed {seed}: faults {report.fault_counts()}, healed in {report.heal_s:.1f} s, {report.counts}"
        )
        print(done[-1], flush=True)
        assert not report.failures, report.summary()
        # A short step can leave no timestamp back (seed 1284294088: a +3 s step held 1.2 s, between a pause and
        # a leader cut, showed none while every checker passed; whether its leader appended in that window was
        # not established), so the soak asks it of its runs together and of a replayed seed alone.
        jumps_seen += len(report.steps_back_s)
        if chosen:
            _assert_jumps_seen(report)
            break
    if faults["clock_jump"]:
        assert jumps_seen, (
            f"{faults['clock_jump']} clock jump(s) ran in {len(done)} run(s), no timestamp went back"
        )
    print(f"nemesis soak: {len(done)} run(s) in {minutes:g} min, faults {dict(faults)}, 0 checker failures")
