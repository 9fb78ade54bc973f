"""The controller: one broker at a time fences dead brokers, elects leaders and rebalances leadership.

Every broker of a cluster runs a :class:`Controller` and calls :meth:`Controller.tick` every
``CONTROLLER_TICK_MS``; only the broker holding the role acts. The role is recorded in the metadata document
(:attr:`~.metadata.ClusterMetadata.controller`, a :class:`~.metadata.ControllerRecord`: id and controller
epoch):

* **claiming**: a broker that finds no controller recorded, or the recorded one not live (the store's
  ``broker_alive``; on a single host :mod:`.liveness`: its process gone, or its session expired), takes the
  store's update, checks again, and writes itself with ``epoch + 1``. The first to get the lock wins; the others then find a live controller. A broker
  runs its first round before it serves, so a cluster that has started has a controller.
* **fencing the controller itself**: every write the controller makes happens inside the store's lock after
  checking that the document still names it with its epoch; a controller that was stopped and replaced finds a
  newer epoch there and steps down without writing (Kafka fences a stale controller by its epoch the same way).

What the active controller does, per tick (asking the store about liveness, writing only when something
changes; the operations are :mod:`.cluster_control`'s and :mod:`.replication_control`'s, as for a broker's
requests through :mod:`.channel`):

1. a registered, unfenced broker that is not live is **fenced**: ``fenced`` in its registration, and
   every partition it hosts goes through :func:`~.election.fence_broker` -- it leaves the ISRs, and partitions it
   led get a new leader from the ISR (or -1; or, with ``unclean.leader.election.enable``, any live replica, logged
   at WARNING because acknowledged records may be lost) with the leader epoch incremented. All brokers found
   dead in one tick are fenced in one write, each seeing the others as not live.
2. a fenced broker that is live again (SIGCONT after SIGSTOP) is **unfenced**: leaderless partitions whose ISR
   holds it get it as leader (:func:`~.election.unfence_broker`). A broker that restarts re-registers (a new
   broker epoch), which fences its old incarnation and unfences the new one in the same write
   (:func:`~.cluster_control.register_broker`).
3. every ``leader.imbalance.check.interval.seconds``, with ``auto.leader.rebalance.enable``, a broker whose
   share of preferred-but-not-led partitions exceeds ``leader.imbalance.per.broker.percentage`` gets them back
   (:func:`~.replication_control.rebalance_leaders`), as Kafka's auto leader rebalance.

The brokers see every change by polling the document; the Metadata answer, the leaders and the followers'
fetchers follow from it.

Thread-safety: a Controller belongs to its broker's event-loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker_runtime.controller import cluster_control
from broker_runtime.controller.metadata import BrokerInfo, ClusterMetadata
from broker_runtime.controller.replication_control import rebalance_leaders
from broker_runtime.controller.store import MetadataStore, Session
from broker_runtime.errors import WaitTimeoutError

__all__ = ["CONTROLLER_TICK_MS", "Controller", "ControllerConfig"]

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


class Controller:
    """See the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        session: Session,
        config: ControllerConfig,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._store = store
        self.node_id = session.node_id
        self._config = config
        self._clock = store.clock if clock is None else clock
        #: The controller epoch this broker holds, or None when it is not the controller.
        self.epoch: int | None = None
        self._next_rebalance = self._clock() + config.leader_imbalance_check_interval_ms / 1000
        self._cached: tuple[object, ClusterMetadata] = (None, ClusterMetadata())
        #: Counters for tests and metrics.
        self.fenced_total = 0
        self.unclean_elections_total = 0

    @property
    def active(self) -> bool:
        return self.epoch is not None

    # -- liveness -------------------------------------------------------------------------------------------

    def broker_live(self, registration: BrokerInfo, now: float) -> tuple[bool, str]:
        """(live, why not) for a registered broker, as the store tells (this broker is live by definition)."""
        if registration.node_id == self.node_id:
            return True, ""
        return self._store.broker_alive(
            registration.node_id, registration.broker_epoch, self._config.session_timeout_ms, now
        )

    def _other_controller_live(self, meta: ClusterMetadata, now: float) -> bool:
        """True when the metadata names another broker as controller and that broker is live."""
        if meta.controller is None or meta.controller.id == self.node_id:
            return False
        registration = meta.brokers.get(meta.controller.id)
        return registration is not None and self.broker_live(registration, now)[0]

    # -- the tick -------------------------------------------------------------------------------------------

    def tick(self) -> bool:
        """One round (see the module docstring); True when the metadata was written."""
        try:
            version = self._store.version()
            if version != self._cached[0] or version is None:
                self._cached = (version, self._store.read())
            meta = self._cached[1]
        except (OSError, ValueError) as exc:
            _log.warning("node %d: cannot read the cluster metadata: %s", self.node_id, exc)
            return False
        now = self._clock()
        record = meta.controller
        if record is None or record.id != self.node_id or record.epoch != self.epoch:
            if self.epoch is not None:
                _log.warning(
                    "node %d: no longer the controller (epoch %s); node %s holds epoch %s",
                    self.node_id,
                    self.epoch,
                    None if record is None else record.id,
                    None if record is None else record.epoch,
                )
                self.epoch = None
            if self._other_controller_live(meta, now):
                return False
            return self._claim(now)
        return self._control(meta, now)

    def _claim(self, now: float) -> bool:
        try:
            with self._store.update() as meta:
                holder = None if meta.controller is None else meta.controller.id
                if self._other_controller_live(meta, now):
                    return False
                if self.node_id not in meta.brokers:
                    return False  # not registered yet
                epoch = cluster_control.claim_controller(meta, self.node_id)
        except (WaitTimeoutError, OSError) as exc:
            _log.warning("node %d: could not claim the controller role: %s", self.node_id, exc)
            return False
        self.epoch = epoch
        _log.info(
            "node %d: now the controller in epoch %d (previous controller %s)", self.node_id, epoch, holder
        )
        return True

    def _transitions(self, meta: ClusterMetadata, now: float) -> tuple[dict[int, str], list[int]]:
        to_fence: dict[int, str] = {}
        to_unfence: list[int] = []
        for node, info in meta.brokers.items():
            live, why = self.broker_live(info, now)
            if info.fenced:
                if live:
                    to_unfence.append(node)
            elif not live:
                to_fence[node] = why
        return to_fence, sorted(to_unfence)

    def _control(self, meta: ClusterMetadata, now: float) -> bool:
        to_fence, to_unfence = self._transitions(meta, now)
        rebalance = self._config.auto_leader_rebalance_enable and now >= self._next_rebalance
        if not to_fence and not to_unfence and not rebalance:
            return False
        if rebalance:
            self._next_rebalance = now + self._config.leader_imbalance_check_interval_ms / 1000
        try:
            with self._store.update() as current:
                record = current.controller
                if record is None or record.id != self.node_id or record.epoch != self.epoch:
                    return False  # replaced meanwhile: the next tick steps down
                to_fence, to_unfence = self._transitions(current, self._clock())
                changed = self._apply(current, to_fence, to_unfence)
                if rebalance:
                    changed += rebalance_leaders(current, self._config.leader_imbalance_per_broker_percentage)
        except (WaitTimeoutError, OSError) as exc:
            _log.warning("node %d: controller could not write the cluster metadata: %s", self.node_id, exc)
            return False
        return changed > 0 or bool(to_fence) or bool(to_unfence)

    def _apply(self, meta: ClusterMetadata, to_fence: Mapping[int, str], to_unfence: list[int]) -> int:
        default = self._config.unclean_leader_election_enable
        live = (set(meta.unfenced()) - set(to_fence)) | set(to_unfence)
        changed = 0
        for node, why in sorted(to_fence.items()):
            _log.warning("controller %d: fencing broker %d: %s", self.node_id, node, why)
            self.fenced_total += 1
            changed += cluster_control.fence(
                meta, node, live, default, f"broker {node} fenced", on_unclean=self._count_unclean
            )
        for node in to_unfence:
            _log.info("controller %d: broker %d is live again; unfencing it", self.node_id, node)
            changed += cluster_control.unfence(meta, node, default, f"broker {node} unfenced")
        return changed

    def _count_unclean(self) -> None:
        self.unclean_elections_total += 1
