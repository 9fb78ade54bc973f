"""The deployment seam: everything the broker's composition needs from where it runs, behind one protocol.

A broker is built the same way wherever it runs (:mod:`.compose`); what differs is behind :class:`Deployment`:

============================  ==========================================  ===========================================
supplies                      :class:`~.single_node.SingleNode`           :class:`~.local_cluster.LocalCluster`
============================  ==========================================  ===========================================
metadata and admin writes     :class:`~.cluster.SingleNodeCluster`: the   :class:`~.cluster.SharedFileCluster`: the
(``store``, ``ctx.cluster``)  local topics, this node leads everything    shared ``cluster.json`` of one host
ISR changes (``alter_isr``)   only ``[this node]`` is accepted            AlterPartition on the shared metadata
liveness (``heartbeat``,      nothing to prove: always confirmed          a session renewed every
``confirm_leadership``)                                                   ``broker.heartbeat.interval.ms``; a leader
                                                                          whose session may have lapsed renews it
                                                                          before it appends
applying metadata             nothing changes behind the broker's back    each new view to topics, replicas, broker
(``refresh``)                                                             configs and both coordinators (Kafka's
                                                                          BrokerMetadataPublisher)
internal-topic records        the local log, topic made on first use      the leader's replicated append (acks=-1)
(``internal_topic``)
transaction markers           written to the local logs before EndTxn     sent to each partition's leader in the
(``marker_sender``)           answers                                     background (WriteTxnMarkers)
coordinator placement         this node, for every key                    the leader of the key's internal partition
(``find_coordinator``)                                                    (the topic made on the first lookup)
coordinator ownership         every partition at epoch 0, at start        the partitions led here, after each view
producer-id blocks            a local state file                          blocks taken from the shared metadata
periodic tasks                none                                        metadata polling, heartbeat, controller
============================  ==========================================  ===========================================

A single node is a cluster of one: the coordinators, handlers and replica manager have one code path each and
never ask which deployment they run in. A multi-host metadata store would be a third implementation.

Threading: every method is called on the broker's event-loop thread (``close`` after the loop stopped serving).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from broker_runtime.coordinator.internal_topic import InternalTopic
from broker_runtime.coordinator.transaction import MarkerDone, MarkerRequest
from broker_runtime.errors import ErrorCode
from broker_runtime.server.cluster import ClusterStore
from broker_runtime.storage.producer_state import ProducerIdManager

if TYPE_CHECKING:
    from broker_runtime.server.context import BrokerContext

__all__ = ["Deployment", "MarkerChannel", "Periodic", "Placement"]


@dataclass(frozen=True)
class Periodic:
    """A task the broker runs every ``interval_ms`` on its loop (or on its storage thread, ``storage``)."""

    interval_ms: int
    action: Callable[[], object]
    name: str
    storage: bool = False


#: FindCoordinator's answer for one key: (error, message, node id, host, port) of its coordinator.
Placement = tuple[ErrorCode, str | None, int, str, int]


class MarkerChannel(Protocol):
    """Where the transaction coordinator's markers go: ``send`` is its
    :data:`~broker_runtime.coordinator.transaction.MarkerSender`."""

    def send(self, request: MarkerRequest, done: MarkerDone) -> None: ...

    async def stop(self) -> None:
        """Stop sending (markers not written yet are completed by the next coordinator)."""
        ...


class Deployment(Protocol):
    """Where this broker runs; see the module docstring for what each implementation supplies."""

    @property
    def store(self) -> ClusterStore:
        """The cluster metadata and its admin writes (what handlers reach as ``ctx.cluster``)."""
        ...

    @property
    def replicated(self) -> bool:
        """Partitions may have other replicas: hosted as the metadata says, high watermarks from followers."""
        ...

    @property
    def controller_active(self) -> bool:
        """This node holds the controller role (a single node always does)."""
        ...

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        """The leader's ISR change (Kafka's AlterPartition); False when refused or not recorded."""
        ...

    def confirm_leadership(self, why: str = "before appending") -> str | None:
        """None when this node may act as a leader now, else why not (its session could not be renewed)."""
        ...

    def heartbeat(self) -> None:
        """Prove this node is alive (periodic)."""
        ...

    def producer_ids(self, state_file: Path) -> ProducerIdManager:
        """The producer-id blocks of this node, recorded in ``state_file``."""
        ...

    def attach(self, ctx: BrokerContext) -> None:
        """The components are built: from now on metadata changes are applied to them (once, before serving)."""
        ...

    def refresh(self) -> bool:
        """Re-read the metadata now and apply a new view to the components; True when it changed."""
        ...

    def internal_topic(
        self, ctx: BrokerContext, name: str, num_partitions: int, *, fsync: bool, timeout_ms: int, what: str
    ) -> InternalTopic:
        """Where a coordinator's records of internal topic ``name`` go (see the module docstring): ``fsync``
        each local append, wait at most ``timeout_ms`` for a replication, ``what`` names the writes in logs."""
        ...

    def marker_sender(self, ctx: BrokerContext) -> MarkerChannel:
        """The transaction coordinator's markers channel."""
        ...

    def find_coordinator(self, ctx: BrokerContext, key_type: int, key: str) -> Placement:
        """The coordinator of ``key`` (FindCoordinator's key type: 0 a group id, 1 a transactional id)."""
        ...

    def offsets_partition(self, ctx: BrokerContext, group_id: str) -> tuple[int | None, str | None]:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition once the topic exists (made now if
        needed), else (None, why not)."""
        ...

    def start_coordinators(self, ctx: BrokerContext) -> None:
        """Give the coordinators the internal partitions this node leads now (at start)."""
        ...

    def periodic_tasks(self) -> list[Periodic]:
        """The deployment's own periodic tasks."""
        ...

    def controlled_shutdown(self) -> None:
        """Before a clean stop: hand this node's leaderships over (Kafka's controlled shutdown)."""
        ...

    def close(self) -> None:
        """Release what the deployment holds (last step of a stop)."""
        ...
