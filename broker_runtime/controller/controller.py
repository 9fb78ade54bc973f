"""The controller: one broker at a time fences dead brokers, elects leaders and rebalances leadership.

Every broker of a cluster runs a :class:`Controller` and calls :meth:`Controller.tick` every
``CONTROLLER_TICK_MS``; only the broker holding the role acts. The role is recorded in the metadata document
(see :mod:`broker_runtime.server.cluster`) as ``"controller": {"id": 1, "epoch": 6}``:

* **claiming**: a broker that finds no controller recorded, or the recorded one not live (see
  :mod:`.liveness`: its process gone, or its session expired), takes the store's lock, checks again, and writes
  itself with ``epoch + 1``. The first to get the lock wins; the others then find a live controller. A broker
  runs its first round before it serves, so a cluster that has started has a controller.
* **fencing the controller itself**: every write the controller makes happens inside the store's lock after
  checking that the document still names it with its epoch; a controller that was stopped and replaced finds a
  newer epoch there and steps down without writing (Kafka fences a stale controller by its epoch the same way).

What the active controller does, per tick (reading the liveness files, writing only when something changes):

1. a registered, unfenced broker that is not live is **fenced**: ``"fenced": true`` in its registration, and
   every partition it hosts goes through :func:`~.election.fence_broker` -- it leaves the ISRs, and partitions it
   led get a new leader from the ISR (or -1; or, with ``unclean.leader.election.enable``, any live replica, logged
   at WARNING because acknowledged records may be lost) with the leader epoch incremented. All brokers found
   dead in one tick are fenced in one write, each seeing the others as not live.
2. a fenced broker that is live again (SIGCONT after SIGSTOP) is **unfenced**: leaderless partitions whose ISR
   holds it get it as leader (:func:`~.election.unfence_broker`). A broker that restarts re-registers (a new
   broker epoch), which fences its old incarnation and unfences the new one in the same write
   (:func:`register_broker`).
3. every ``leader.imbalance.check.interval.seconds``, with ``auto.leader.rebalance.enable``, a broker whose
   share of preferred-but-not-led partitions exceeds ``leader.imbalance.per.broker.percentage`` gets them back
   (:func:`~.election.preferred_election`), as Kafka's auto leader rebalance.

The brokers see every change by polling the document; the Metadata answer, the leaders and the followers'
fetchers follow from it.

Thread-safety: a Controller belongs to its broker's event-loop thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_runtime.controller.election import (
    NO_LEADER,
    Election,
    fence_broker,
    preferred_election,
    unfence_broker,
)
from broker_runtime.controller.liveness import BrokerSession, process_alive, read_heartbeat
from broker_runtime.controller.store import MetadataStore
from broker_runtime.errors import WaitTimeoutError

__all__ = [
    "CONTROLLER_TICK_MS",
    "Controller",
    "ControllerConfig",
    "apply_elections",
    "register_broker",
    "unclean_allowed",
]

_log = logging.getLogger(__name__)

#: How often every broker checks the controller's liveness, and the controller every broker's.
CONTROLLER_TICK_MS = 200


@dataclass(frozen=True)
class ControllerConfig:
    """The broker settings the controller reads (Kafka's names)."""

    session_timeout_ms: int = 9000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10


def unclean_allowed(topic: Mapping[str, Any], default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the broker default."""
    value = topic.get("configs", {}).get("unclean.leader.election.enable")
    return default if value is None else str(value).strip().lower() == "true"


def _log_elections(
    topic: str, index: int, old: Mapping[str, Any], done: Election, why: str, offline_level: int
) -> None:
    new = done.entry
    if done.unclean:
        _log.warning(
            "%s-%d: UNCLEAN leader election (%s): node %d leads epoch %d from outside the ISR %s; records "
            "acknowledged by the old ISR but never fetched by node %d are lost",
            topic,
            index,
            why,
            new["leader"],
            new["leader_epoch"],
            old["isr"],
            new["leader"],
        )
    elif new["leader"] != old["leader"]:
        level = offline_level if new["leader"] == NO_LEADER else logging.INFO
        _log.log(
            level,
            "%s-%d: leader %d -> %d, epoch %d, ISR %s (%s)",
            topic,
            index,
            old["leader"],
            new["leader"],
            new["leader_epoch"],
            new["isr"],
            why,
        )
    else:
        _log.info("%s-%d: ISR %s -> %s (%s)", topic, index, old["isr"], new["isr"], why)


def apply_elections(
    data: dict[str, Any],
    rule: Callable[[str, Mapping[str, Any]], Election | None],
    why: str,
    *,
    offline_level: int = logging.WARNING,
) -> int:
    """Apply ``rule(topic, entry)`` to every partition of the document; the number of partitions changed.

    A partition left without a leader is logged at ``offline_level`` (WARNING, except for a clean shutdown
    of the last in-sync replica, which is expected); an unclean election always at WARNING."""
    changed = 0
    for name, topic in data.get("topics", {}).items():
        parts = topic.get("partitions", [])
        for index, entry in enumerate(parts):
            done = rule(name, entry)
            if done is not None:
                _log_elections(name, index, entry, done, why, offline_level)
                parts[index] = done.entry
                changed += 1
    return changed


def register_broker(
    data: dict[str, Any], node_id: int, host: str, port: int, *, unclean_default: bool, now: float
) -> int:
    """Record broker ``node_id`` at ``host:port`` with a new broker epoch (inside the store's update).

    A previous incarnation is fenced first (it left the ISRs, its leaderships moved), then the new one is
    unfenced; returns the new broker epoch. The heartbeat file must be written in the same update (the caller
    does), so no controller sees the new registration without its first heartbeat.
    """
    brokers: dict[str, Any] = data.setdefault("brokers", {})
    data.setdefault("topics", {})
    old = brokers.get(str(node_id))
    epoch = int(old.get("broker_epoch", 0)) + 1 if old else 1
    topics = data["topics"]
    if old is not None and not old.get("fenced", False):
        live = {int(b) for b, info in brokers.items() if not info.get("fenced", False)} - {node_id}
        apply_elections(
            data,
            lambda name, entry: fence_broker(
                entry, node_id, live, unclean=unclean_allowed(topics[name], unclean_default)
            ),
            f"node {node_id} restarted",
        )
    brokers[str(node_id)] = {"host": host, "port": port, "broker_epoch": epoch, "fenced": False}
    apply_elections(
        data,
        lambda name, entry: unfence_broker(
            entry, node_id, unclean=unclean_allowed(topics[name], unclean_default)
        ),
        f"node {node_id} registered",
    )
    return epoch


class Controller:
    """See the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        session: BrokerSession,
        config: ControllerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._session = session
        self._dir: Path = session.dir
        self.node_id = session.node_id
        self._config = config
        self._clock = clock
        #: The controller epoch this broker holds, or None when it is not the controller.
        self.epoch: int | None = None
        self._next_rebalance = clock() + config.leader_imbalance_check_interval_ms / 1000
        self._cached: tuple[object, dict[str, Any]] = (None, {})
        #: Counters for tests and metrics.
        self.fenced_total = 0
        self.unclean_elections_total = 0

    @property
    def active(self) -> bool:
        return self.epoch is not None

    # -- liveness -------------------------------------------------------------------------------------------

    def broker_live(self, node_id: int, registration: Mapping[str, Any], now: float) -> tuple[bool, str]:
        """(live, why not) for a registered broker; see :mod:`.liveness`."""
        if node_id == self.node_id:
            return True, ""
        if not process_alive(self._dir, node_id):
            return False, "its process is gone"
        beat = read_heartbeat(self._dir, node_id)
        epoch = int(registration.get("broker_epoch", 0))
        if beat is None or beat.broker_epoch != epoch:
            return False, f"no heartbeat of broker epoch {epoch}"
        age_ms = (now - beat.at) * 1000
        if age_ms > self._config.session_timeout_ms:
            return False, (
                f"its session expired: last heartbeat {age_ms:.0f} ms ago > broker.session.timeout.ms="
                f"{self._config.session_timeout_ms}"
            )
        return True, ""

    def _other_controller_live(self, data: Mapping[str, Any], now: float) -> bool:
        """True when the document names another broker as controller and that broker is live."""
        holder = (data.get("controller") or {}).get("id")
        if holder is None or holder == self.node_id:
            return False
        registration = data.get("brokers", {}).get(str(holder))
        return registration is not None and self.broker_live(int(holder), registration, now)[0]

    # -- the tick -------------------------------------------------------------------------------------------

    def tick(self) -> bool:
        """One round (see the module docstring); True when the metadata was written."""
        try:
            version = self._store.version()
            if version != self._cached[0] or version is None:
                self._cached = (version, self._store.read())
            data = self._cached[1]
        except (OSError, ValueError) as exc:
            _log.warning("node %d: cannot read the cluster metadata: %s", self.node_id, exc)
            return False
        now = self._clock()
        record = data.get("controller") or {}
        holder = record.get("id")
        if holder != self.node_id or record.get("epoch") != self.epoch:
            if self.epoch is not None:
                _log.warning(
                    "node %d: no longer the controller (epoch %s); node %s holds epoch %s",
                    self.node_id,
                    self.epoch,
                    holder,
                    record.get("epoch"),
                )
                self.epoch = None
            if self._other_controller_live(data, now):
                return False
            return self._claim(now)
        return self._control(data, now)

    def _claim(self, now: float) -> bool:
        try:
            with self._store.update() as data:
                record = data.get("controller") or {}
                holder = record.get("id")
                if self._other_controller_live(data, now):
                    return False
                if str(self.node_id) not in data.get("brokers", {}):
                    return False  # not registered yet
                epoch = int(record.get("epoch", 0)) + 1
                data["controller"] = {"id": self.node_id, "epoch": epoch}
                data["controller_id"] = self.node_id
        except (WaitTimeoutError, OSError) as exc:
            _log.warning("node %d: could not claim the controller role: %s", self.node_id, exc)
            return False
        self.epoch = epoch
        _log.info(
            "node %d: now the controller in epoch %d (previous controller %s)", self.node_id, epoch, holder
        )
        return True

    def _transitions(self, data: Mapping[str, Any], now: float) -> tuple[dict[int, str], list[int]]:
        to_fence: dict[int, str] = {}
        to_unfence: list[int] = []
        for key, info in data.get("brokers", {}).items():
            node = int(key)
            live, why = self.broker_live(node, info, now)
            if info.get("fenced", False):
                if live:
                    to_unfence.append(node)
            elif not live:
                to_fence[node] = why
        return to_fence, sorted(to_unfence)

    def _control(self, data: Mapping[str, Any], now: float) -> bool:
        to_fence, to_unfence = self._transitions(data, now)
        rebalance = self._config.auto_leader_rebalance_enable and now >= self._next_rebalance
        if not to_fence and not to_unfence and not rebalance:
            return False
        if rebalance:
            self._next_rebalance = now + self._config.leader_imbalance_check_interval_ms / 1000
        try:
            with self._store.update() as doc:
                record = doc.get("controller") or {}
                if record.get("id") != self.node_id or record.get("epoch") != self.epoch:
                    return False  # replaced meanwhile: the next tick steps down
                to_fence, to_unfence = self._transitions(doc, self._clock())
                changed = self._apply(doc, to_fence, to_unfence)
                if rebalance:
                    changed += self._rebalance(doc)
        except (WaitTimeoutError, OSError) as exc:
            _log.warning("node %d: controller could not write the cluster metadata: %s", self.node_id, exc)
            return False
        return changed > 0 or bool(to_fence) or bool(to_unfence)

    def _apply(self, doc: dict[str, Any], to_fence: Mapping[int, str], to_unfence: list[int]) -> int:
        brokers = doc.get("brokers", {})
        topics = doc.get("topics", {})
        default = self._config.unclean_leader_election_enable
        live = {int(b) for b, info in brokers.items() if not info.get("fenced", False)} - set(to_fence)
        live |= set(to_unfence)
        changed = 0
        for node, why in sorted(to_fence.items()):
            _log.warning("controller %d: fencing broker %d: %s", self.node_id, node, why)
            brokers[str(node)]["fenced"] = True
            self.fenced_total += 1

            def fence(name: str, entry: Mapping[str, Any], node: int = node) -> Election | None:
                done = fence_broker(entry, node, live, unclean=unclean_allowed(topics[name], default))
                if done is not None and done.unclean:
                    self.unclean_elections_total += 1
                return done

            changed += apply_elections(doc, fence, f"broker {node} fenced")
        for node in to_unfence:
            _log.info("controller %d: broker %d is live again; unfencing it", self.node_id, node)
            brokers[str(node)]["fenced"] = False

            def unfence(name: str, entry: Mapping[str, Any], node: int = node) -> Election | None:
                return unfence_broker(entry, node, unclean=unclean_allowed(topics[name], default))

            changed += apply_elections(doc, unfence, f"broker {node} unfenced")
        return changed

    def _rebalance(self, doc: dict[str, Any]) -> int:
        brokers = doc.get("brokers", {})
        live = {int(b) for b, info in brokers.items() if not info.get("fenced", False)}
        preferred: dict[int, int] = {}
        displaced: dict[int, int] = {}
        for topic in doc.get("topics", {}).values():
            for entry in topic.get("partitions", []):
                first = int(entry["replicas"][0])
                preferred[first] = preferred.get(first, 0) + 1
                if int(entry["leader"]) != first:
                    displaced[first] = displaced.get(first, 0) + 1
        percent = self._config.leader_imbalance_per_broker_percentage
        imbalanced = {
            b for b, n in displaced.items() if b in live and n * 100 > percent * preferred.get(b, 1)
        }
        if not imbalanced:
            return 0

        def rule(name: str, entry: Mapping[str, Any]) -> Election | None:
            if int(entry["replicas"][0]) not in imbalanced:
                return None
            return preferred_election(entry, live)[0]

        return apply_elections(doc, rule, "auto leader rebalance")
