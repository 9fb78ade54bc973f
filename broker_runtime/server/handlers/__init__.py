"""One request handler module per Kafka API key, and the table the dispatcher routes by.

Every handler module names the ``REQUEST`` message it answers (from :mod:`broker_runtime.protocol.messages`,
whose definition carries the API key), ``MIN_VERSION``, ``MAX_VERSION`` (the range this broker advertises
in ApiVersions: exactly what it answers) and ``handle(ctx, header, body)``; see
:mod:`broker_runtime.server.context` for the result protocol. Handlers are stateless functions; state lives in
the :class:`~broker_runtime.server.context.BrokerContext`. Event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from broker_runtime.server.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)

__all__ = ["HANDLER_MODULES", "Handler", "handler_table", "supported_versions"]

Handler = Callable[..., Any]

HANDLER_MODULES: tuple[ModuleType, ...] = (
    produce,
    fetch,
    list_offsets,
    metadata,
    find_coordinator,
    api_versions,
    create_topics,
    init_producer_id,
    describe_configs,
    elect_leaders,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    offset_for_leader_epoch,
    describe_transactions,
    list_transactions,
    write_txn_markers,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    offset_delete,
    txn_offset_commit,
    delete_topics,
    delete_records,
    create_partitions,
    alter_configs,
    incremental_alter_configs,
    describe_log_dirs,
    describe_cluster,
    describe_producers,
    describe_topic_partitions,
    sasl_handshake,
    sasl_authenticate,
    describe_acls,
    create_acls,
    delete_acls,
    describe_client_quotas,
    alter_client_quotas,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    consumer_group_heartbeat,
    consumer_group_describe,
)


def handler_table() -> dict[int, Handler]:
    """API key -> handle function."""
    return {m.REQUEST.api_key: m.handle for m in HANDLER_MODULES}


def supported_versions() -> dict[int, tuple[int, int]]:
    """API key -> (min, max) version this broker answers, as advertised in ApiVersions."""
    return {m.REQUEST.api_key: (m.MIN_VERSION, m.MAX_VERSION) for m in HANDLER_MODULES}
