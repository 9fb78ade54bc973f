"""A broker alone: the :class:`~.context.Deployment` of a single node, a cluster of one.

Files (in the first log directory): :data:`DYNAMIC_CONFIGS_FILE` (the dynamic broker configs, JSON
``{"": {cluster-wide defaults}, "<node id>": {this broker's}}``), :data:`ACLS_FILE` (the ACL bindings, a JSON list
of ``AclBinding.to_json`` rows), :data:`CLIENT_QUOTAS_FILE` (the client quotas, JSON rows of
:func:`~broker_runtime.server.client_quotas.to_rows`), :data:`PRODUCER_ID_STATE_FILE` (the last producer-id block
handed out); a cluster keeps the first three in its metadata and takes its blocks from there.

Invariants: this node is the only replica, leader and ISR of every partition at leader epoch 0; it coordinates
every group and transactional id (every partition of ``__consumer_offsets`` and ``__transaction_state``, at
coordinator epoch 0) and its internal topics are made in the local log directories on first use; nothing
changes the metadata but this node's own requests, so there is nothing to poll, prove or hand over.

Threading: event-loop thread only, as every deployment.
"""

from __future__ import annotations

from pathlib import Path

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.coordinator.internal_topic import InternalTopic
from broker_runtime.coordinator.transaction import MarkerDone, MarkerRequest
from broker_runtime.errors import ErrorCode
from broker_runtime.server.cluster import SingleNodeCluster
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.context import BrokerContext, Periodic, Placement
from broker_runtime.server.groups import complete_offsets_txn
from broker_runtime.server.node.internal_topics import LocalInternalTopic
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.producer_state import ProducerIdManager

__all__ = [
    "ACLS_FILE",
    "CLIENT_QUOTAS_FILE",
    "DYNAMIC_CONFIGS_FILE",
    "PRODUCER_ID_STATE_FILE",
    "LocalMarkers",
    "SingleNode",
]

#: File in the first log directory recording the last producer id block handed out.
PRODUCER_ID_STATE_FILE = "producer-id-block.json"
#: File in the first log directory holding the dynamic broker configs of a single node (a cluster keeps them
#: in its metadata): ``{"": {cluster-wide defaults}, "<node id>": {this broker's}}``.
DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
#: File in the first log directory holding the ACL bindings of a single node (a cluster keeps them in its
#: metadata): a JSON list of ``AclBinding.to_json`` rows.
ACLS_FILE = "acls.json"
#: File in the first log directory holding the client quotas of a single node (a cluster keeps them in its
#: metadata).
CLIENT_QUOTAS_FILE = "client-quotas.json"


class SingleNode:
    """The deployment of a broker alone (see the module docstring)."""

    def __init__(self, cfg: BrokerConfig, topics: TopicManager) -> None:
        first = Path(cfg.log_dirs[0])
        self._node_id = cfg.node_id
        self._store = SingleNodeCluster(
            cfg.node_id, topics, first / DYNAMIC_CONFIGS_FILE, first / ACLS_FILE, first / CLIENT_QUOTAS_FILE
        )

    @property
    def store(self) -> SingleNodeCluster:
        return self._store

    @property
    def replicated(self) -> bool:
        return False

    @property
    def controller_active(self) -> bool:
        return True

    def alter_isr(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        return self._store.alter_isr(topic, partition, isr, leader_epoch)

    def confirm_leadership(self, why: str = "before appending") -> str | None:
        return None

    def heartbeat(self) -> None:
        return None

    def producer_ids(self, state_file: Path) -> ProducerIdManager:
        return ProducerIdManager(state_file)

    def attach(self, ctx: BrokerContext) -> None:
        return None

    def refresh(self) -> bool:
        return False

    def internal_topic(
        self, ctx: BrokerContext, name: str, num_partitions: int, *, fsync: bool, timeout_ms: int, what: str
    ) -> InternalTopic:
        return LocalInternalTopic(ctx.topics, name, num_partitions, fsync=fsync)

    def marker_sender(self, ctx: BrokerContext) -> LocalMarkers:
        return LocalMarkers(ctx)

    def find_coordinator(self, ctx: BrokerContext, key_type: int, key: str) -> Placement:
        return ErrorCode.NONE, None, self._node_id, *ctx.own_endpoint()

    def offsets_partition(self, ctx: BrokerContext, group_id: str) -> tuple[int | None, str | None]:
        try:
            return ctx.group_coordinator.offsets_partition(group_id), None
        except Exception as exc:  # noqa: BLE001 - a failing disk: the client retries, the reason is logged
            return None, f"cannot create {CONSUMER_OFFSETS_TOPIC}: {exc}"

    def start_coordinators(self, ctx: BrokerContext) -> None:
        # Transactions first: a transaction a crash left in a Prepare state gets its markers now, and the group
        # coordinator's replay then reads them on __consumer_offsets.
        ctx.txn_coordinator.load()
        ctx.group_coordinator.load()

    def periodic_tasks(self) -> list[Periodic]:
        return []

    def controlled_shutdown(self) -> None:
        return None

    def close(self) -> None:
        return None


class LocalMarkers:
    """A single node's transaction markers: appended to the local partition logs before ``send`` returns."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx

    def send(self, request: MarkerRequest, done: MarkerDone) -> None:
        replicas, r = self._ctx.replicas, request
        hold = self._ctx.config.test_transaction_markers_hold_file
        # Fault injection for tests: while the hold file exists the writes fail and the periodic check retries them.
        if hold and Path(hold).exists():
            done(dict.fromkeys(r.partitions, ErrorCode.KAFKA_STORAGE_ERROR))
            return
        results = {
            (topic, p): replicas.write_txn_marker(
                topic, p, r.producer_id, r.producer_epoch, r.coordinator_epoch, r.control_type
            ).error
            for topic, p in r.partitions
        }
        # A marker on __consumer_offsets ends the producer's pending offsets there (Kafka's onTransactionCompleted);
        # at start, before the group coordinator loaded, its replay reads the marker instead.
        complete_offsets_txn(self._ctx, r.producer_id, r.control_type, results)
        done(results)

    async def stop(self) -> None:
        return None
