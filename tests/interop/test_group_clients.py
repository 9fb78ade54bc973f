"""More real group clients against the real broker (single node): kafkajs (Node; installed from the npm registry
into ``.cache/node`` on first use), ``kcat -G`` (librdkafka's balanced consumer; the Debian package installed by
the session fixture when missing), aiokafka's group consumer, and confluent-kafka members with the
cooperative-sticky assignor (KIP-429: incremental rebalances) joining and leaving, every record committed once.
Each client commits, and a second run of the same group resumes at the committed offsets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import apt

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".cache" / "node"
KAFKAJS = "kafkajs@2"
GROUP_CONF = {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return dict(GROUP_CONF)


@pytest.fixture(scope="session")
def kafkajs_dir() -> Path:
    """A directory whose ``node_modules`` holds kafkajs (``npm install`` into ``.cache/node`` when missing)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js (node and npm) is not installed, so kafkajs cannot run")
    if not (NODE_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        done = subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(NODE_DIR),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                KAFKAJS,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(
                f"npm install {KAFKAJS} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
            )
    return NODE_DIR


@pytest.fixture(scope="session")
def kcat() -> str:
    """The ``kcat`` executable (``apt-get install -y kcat`` when missing, :func:`tests.support.apt.require`)."""
    apt.require(("kcat",), "kcat", lambda: shutil.which("kcat") is not None)
    found = shutil.which("kcat")
    assert found is not None
    return found


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, value=v, key=v)
    assert producer.flush(30) == 0


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe-ends"})
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
        }
    finally:
        probe.close()


# --- kafkajs ---------------------------------------------------------------------------------------------------


def _kafkajs_consume(node_dir: Path, bootstrap: str, group: str, topic: str, count: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            "node",
            str(Path(__file__).with_name("kafkajs_group_consumer.js")),
            bootstrap,
            group,
            topic,
            str(count),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NODE_PATH": str(node_dir / "node_modules"), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_kafkajs_consumes_in_a_group_commits_and_resumes(bootstrap: str, kafkajs_dir: Path) -> None:
    topic, group = "js-events", "js-group"
    _create(bootstrap, topic, 2)
    first = [f"a{i}".encode() for i in range(30)]
    _produce(bootstrap, topic, first)
    got = _kafkajs_consume(kafkajs_dir, bootstrap, group, topic, len(first))
    assert sorted(got["values"]) == sorted(v.decode() for v in first)
    assert _committed(bootstrap, group, topic, 2) == _ends(bootstrap, topic, 2)
    second = [f"b{i}".encode() for i in range(10)]
    _produce(bootstrap, topic, second)
    got = _kafkajs_consume(kafkajs_dir, bootstrap, group, topic, len(second))
    assert sorted(got["values"]) == sorted(v.decode() for v in second), "resumed at the committed offsets"


# --- kcat -G -------------------------------------------------------------------------------------------------------


def _kcat_group(kcat: str, bootstrap: str, group: str, topic: str) -> list[str]:
    """``kcat -G``: a balanced consumer until the end of every assigned partition (-e); commits on exit."""
    done = subprocess.run(
        [
            kcat,
            "-b",
            bootstrap,
            "-G",
            group,
            "-e",
            "-q",
            "-f",
            "%s\\n",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "auto.offset.reset=earliest",  # not -o: kcat -G applies -o on every assignment, over commits
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if line]


def test_kcat_balanced_consumer_commits_and_resumes(bootstrap: str, kcat: str) -> None:
    topic, group = "kcat-events", "kcat-group"
    _create(bootstrap, topic, 3)
    first = [f"k{i}" for i in range(40)]
    _produce(bootstrap, topic, [v.encode() for v in first])
    assert sorted(_kcat_group(kcat, bootstrap, group, topic)) == sorted(first)
    assert _committed(bootstrap, group, topic, 3) == _ends(bootstrap, topic, 3)
    second = [f"m{i}" for i in range(12)]
    _produce(bootstrap, topic, [v.encode() for v in second])
    assert sorted(_kcat_group(kcat, bootstrap, group, topic)) == sorted(second), (
        "resumed at the committed offsets"
    )


# --- aiokafka -------------------------------------------------------------------------------------------------------


async def _aiokafka_consume(bootstrap: str, group: str, topic: str, count: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < count:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    got += [r.value for r in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    return got


def test_aiokafka_group_consumer_commits_and_resumes(bootstrap: str) -> None:
    topic, group = "aio-events", "aio-group"
    _create(bootstrap, topic, 3)
    first = [f"x{i}".encode() for i in range(45)]
    _produce(bootstrap, topic, first)
    assert sorted(asyncio.run(_aiokafka_consume(bootstrap, group, topic, len(first)))) == sorted(first)
    assert _committed(bootstrap, group, topic, 3) == _ends(bootstrap, topic, 3)
    second = [f"y{i}".encode() for i in range(9)]
    _produce(bootstrap, topic, second)
    assert sorted(asyncio.run(_aiokafka_consume(bootstrap, group, topic, len(second)))) == sorted(second)


# --- cooperative-sticky (KIP-429) ---------------------------------------------------------------------------------


def _cooperative(bootstrap: str, group: str, assigned: list[int]) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )


def _take_and_commit(consumer: Consumer, committed: Counter[bytes], lock: threading.Lock) -> None:
    """Poll once; a record counts as consumed only if the synchronous commit after it succeeded."""
    msg = consumer.poll(0.05)
    if msg is None or msg.error():
        return
    try:
        consumer.commit(message=msg, asynchronous=False)
    except KafkaException as exc:
        assert exc.args[0].code() in (
            KafkaError.REBALANCE_IN_PROGRESS,
            KafkaError.ILLEGAL_GENERATION,
            KafkaError.UNKNOWN_MEMBER_ID,
            KafkaError._ASSIGNMENT_LOST,
        ), exc
        # With incremental rebalances the partition may stay with this member: read the record again
        # (if it moved, its new owner starts at the committed offset anyway).
        tp = TopicPartition(msg.topic(), msg.partition(), msg.offset())
        if any((a.topic, a.partition) == (tp.topic, tp.partition) for a in consumer.assignment()):
            with contextlib.suppress(KafkaException):
                consumer.seek(tp)
        return
    with lock:
        committed[bytes(msg.value())] += 1


class _Member:
    """One group member polled and committing on its own thread, as each consumer of a real group is.

    A single thread driving every member deadlocks a cooperative rebalance: a member that rejoined has its
    JoinGroup parked at the coordinator until every member rejoins, and its synchronous OffsetCommit waits behind
    that JoinGroup on the same connection (responses go out in request order; Kafka even mutes the channel), so
    the thread blocks there and never polls the member whose revocation callback must run before it can rejoin.
    """

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        revoked: list[int],
        committed: Counter[bytes],
        lock: threading.Lock,
    ) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        #: Partitions this member owns; written by its rebalance callbacks (on its own thread), read by the test.
        self.owned: frozenset[int] = frozenset()

        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            c.incremental_assign(parts)
            self.owned = self.owned | {p.partition for p in parts}

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            revoked.append(len(parts))
            c.incremental_unassign(parts)
            self.owned = self.owned - {p.partition for p in parts}

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(committed, lock), daemon=True)
        self._thread.start()

    def _run(self, committed: Counter[bytes], lock: threading.Lock) -> None:
        try:
            while not self._stop.is_set():
                _take_and_commit(self.consumer, committed, lock)
        except BaseException as exc:  # reported by the test thread (check)
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"member thread failed: {self.error!r}") from self.error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "member thread still polling 30 s after being told to stop"
        self.consumer.close()


@pytest.fixture
def members() -> Iterator[list[_Member]]:
    found: list[_Member] = []
    try:
        yield found
    finally:
        for m in found:
            m.close()


def test_cooperative_sticky_members_join_and_leave_every_record_committed_once(
    bootstrap: str, broker: Any, members: list[_Member]
) -> None:
    import time

    topic, group = "coop", "coop-group"
    _create(bootstrap, topic, 6)
    lock = threading.Lock()
    committed: Counter[bytes] = Counter()
    produced: list[bytes] = []
    revoked: list[int] = []  # partitions revoked per rebalance: incremental rebalances revoke only what moves
    for phase, action in enumerate(["join", "join", "join", "leave"]):
        if action == "join":
            members.append(_Member(_cooperative(bootstrap, group, []), topic, revoked, committed, lock))
        else:
            members.pop(0).close()
        batch = [f"p{phase}-{i}".encode() for i in range(30)]
        _produce(bootstrap, topic, batch)
        produced += batch
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in members:
                m.check()
            # The phase ends when every record is committed AND every member owns partitions (6 partitions, at
            # most 3 members): otherwise the records could all be taken before the new member's rebalance
            # even started, and the phase would prove nothing about the rebalance.
            with lock:
                if committed.keys() >= set(produced) and all(m.owned for m in members):
                    break
            time.sleep(0.05)
        with lock:
            missing = set(produced) - set(committed)
        assert not missing, f"phase {phase}: {len(missing)} missing"
        idle = [i for i, m in enumerate(members) if not m.owned]
        assert not idle, f"phase {phase}: members {idle} own no partition after 60 s"
    with lock:
        duplicates = {v: n for v, n in committed.items() if n > 1}
    assert not duplicates, f"committed more than once: {list(duplicates.items())[:5]}"
    state = broker.ctx.group_coordinator.group(group)
    assert state.protocol == "cooperative-sticky", state.protocol
    assert _committed(bootstrap, group, topic, 6) == _ends(bootstrap, topic, 6)
    # KIP-429: a member joining never makes the others give up everything (an eager rebalance revokes all 6)
    assert revoked and max(revoked) < 6, revoked
