"""Broker configuration: Kafka's property names, each declared once, parsed once into a frozen
:class:`BrokerConfig`.

Sources, later wins: built-in defaults (Kafka's where Kafka has one), a ``.properties`` file (Java
properties syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments, backslash line continuation),
then explicit overrides (``--override key=value`` on the command line, ``overrides=`` in code).

Declarations (:mod:`broker_runtime.configdef`): a :class:`BrokerConfig` field declared with ``_field`` *is* its
key's declaration -- name, type, default, validator, doc -- and gives typed access (``config.num_partitions``);
keys consulted per listener or by the security modules (``ssl.*``, ``sasl.*``, the authorizer's) are declared in
:mod:`~broker_runtime.server.listener_config` and read through ``props``; the storage's broker keys (``log.segment.bytes``, ...) are declared
by :mod:`broker_runtime.storage.config` and parsed into :attr:`BrokerConfig.log`. :data:`BROKER_CONFIGS` lists
them all, in the README's order: DescribeConfigs (defaults, types, sensitivity), dynamic config validation and the
README's table (``python -m broker_runtime.server.config_docs``) derive from it.

Invariants:
  * every value is validated here; a bad value raises :class:`~broker_runtime.errors.ConfigError` naming the
    key, the value found and what is allowed -- except a secret's value (a password, a JAAS entry, a key:
    :func:`sensitive_broker_config`), which no message, warning, log line or repr ever shows;
  * keys this broker does not know are kept (``props``) but reported once, by name only, through the
    ``warnings`` tuple, so the CLI can print one warning line each and carry on, as Kafka does;
  * listeners are Kafka's: ``listeners`` names any number of ``NAME://host:port`` endpoints, each NAME mapped
    to a security protocol by ``listener.security.protocol.map``; ``advertised.listeners`` and
    ``inter.broker.listener.name`` refer to those names. TLS (``ssl.*``) and SASL (``sasl.*``) settings may be
    given per listener as ``listener.name.<name lower case>.<key>`` (:meth:`BrokerConfig.listener_setting`);
    every TLS key store and JAAS entry a listener needs is loaded once here, so a bad one fails the start with
    one line naming the key (:func:`~broker_runtime.server.listener_config.check_security`).

Immutable after construction, hence safe to share between threads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.configdef import (
    INT_MAX,
    ConfigKey,
    ConfigType,
    declare,
    declared,
    define,
    integer,
    no_effect_warnings,
    non_empty,
    optional,
    overrides_dict,
    parse_fields,
    read_properties,
    upper,
)
from broker_runtime.errors import ConfigError
from broker_runtime.security.acl import authorizer_from_properties
from broker_runtime.security.client_security import ClientSecurity
from broker_runtime.security.secrets import is_sensitive
from broker_runtime.security.tls import SSL_KEYS
from broker_runtime.server.listener_config import (
    DEFAULT_PROTOCOLS,
    LISTENER_PREFIX,
    LISTENER_SETTINGS,
    LISTENERS_AT_START,
    REAUTH,
    SASL_DEFAULT,
    Listener,
    check_security,
    inter_broker_listener,
    metrics_listener,
    parse_listener,
    parse_listeners,
    per_ip_overrides,
    protocol_map,
    reauth_setting,
)
from broker_runtime.storage.config import BROKER_LOG_CONFIGS, LogConfig

__all__ = [
    "BROKER_CONFIGS",
    "BROKER_CONFIG_KEYS",
    "GROUPS",
    "KNOWN_BROKER_KEYS",
    "LISTENER_PREFIX",
    "THREAD_COUNTS",
    "BrokerConfig",
    "Listener",
    "parse_listener",
    "read_properties",
    "sensitive_broker_config",
]

#: The README's sections of the broker table, in order (each key's ``group``; the storage's keys are "log").
GROUPS: tuple[tuple[str, str], ...] = (
    ("server", "Identity and topics"),
    ("listeners", "Listeners"),
    ("security", "SASL, TLS and authorization"),
    ("connections", "Connections and requests"),
    ("log", "Logs (topic defaults and storage)"),
    ("replication", "Replication and the controller"),
    ("transactions", "Transaction coordinator"),
    ("groups", "Group coordinator"),
    ("pylog", "pylog's own"),
)

_INT, _LONG, _SHORT = ConfigType.INT, ConfigType.LONG, ConfigType.SHORT
_STRING, _LIST, _BOOLEAN, _PASSWORD = (
    ConfigType.STRING,
    ConfigType.LIST,
    ConfigType.BOOLEAN,
    ConfigType.PASSWORD,
)
_CLASS = ConfigType.CLASS


def _field(name: str, type: ConfigType, default: str | None, group: str, doc: str, **kw: Any) -> Any:
    """A :class:`BrokerConfig` field holding broker config ``name``'s typed value: its declaration
    (``kw``: :func:`~broker_runtime.configdef.define`'s ``minimum``, ``parse``, ``shown_default``)."""
    return declare(define(name, type, default, doc, group=group, **kw))


def _derived(
    name: str, type: ConfigType, default: str | None, group: str, doc: str, value: Any, **kw: Any
) -> Any:
    """A field whose value :meth:`BrokerConfig._build` computes from this key and others (default ``value``)."""
    return declare(define(name, type, default, doc, group=group, **kw), derived=value)


def _setting(name: str, type: ConfigType, default: str | None, group: str, doc: str, **kw: Any) -> ConfigKey:
    """A key read through ``props``, declared without a field of its own."""
    return define(name, type, default, doc, group=group, **kw)


def _one_cleaner_thread(name: str, raw: str) -> int:
    value = integer(1)(name, raw)
    if value != 1:
        raise ConfigError(f"{name}={value}: pylog runs one cleaner thread, set 1")
    return value


#: Kafka's class names of the consumer group assignors, by the short names pylog answers them under.
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignors(name: str, raw: str) -> tuple[str, ...]:
    found = []
    for item in (part.strip() for part in raw.split(",")):
        short = _ASSIGNOR_CLASSES.get(item, item)
        if short not in ("uniform", "range"):
            raise ConfigError(
                f"{name}: assignor {item!r} is not served by pylog; use uniform and/or range (or Kafka's class "
                "names of the two)"
            )
        if short not in found:
            found.append(short)
    if not found:
        raise ConfigError(f"{name} is empty: name at least one of uniform, range")
    return tuple(found)


_LISTENERS_DEFAULT = "PLAINTEXT://127.0.0.1:9092"
_SEE_SECURITY = "(see [Security](#security))"
_SEE_HARDENING = "see [Hardening](#hardening-limits-and-what-happens-when-one-is-hit)"


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings: one field per declared key (its declaration; see :data:`BROKER_CONFIGS`), and
    :attr:`log`, the storage's settings (its broker keys declared by :mod:`broker_runtime.storage.config`).

    ``props`` holds every key given (file + overrides), including storage keys and unknown ones;
    ``warnings`` lists one human-readable line per unknown key.
    """

    node_id: int = _field("node.id", _INT, "0", "server", "this broker's id in Metadata", minimum=0)
    cluster_id: str = _field(
        "cluster.id",
        _STRING,
        "pylog-cluster",
        "server",
        "ClusterId in Metadata; a node refuses to join a `cluster.json` of another id",
        parse=non_empty,
    )
    num_partitions: int = _field(
        "num.partitions", _INT, "1", "server", "partitions of auto-created topics", minimum=1
    )
    default_replication_factor: int = _field(
        "default.replication.factor",
        _INT,
        "1",
        "server",
        "replication factor of auto-created topics",
        minimum=1,
    )
    auto_create_topics_enable: bool = _field(
        "auto.create.topics.enable",
        _BOOLEAN,
        "true",
        "server",
        "Metadata requests may create unknown topics (Produce never creates one, as Kafka)",
    )
    listeners: tuple[Listener, ...] = _derived(
        "listeners",
        _STRING,
        _LISTENERS_DEFAULT,
        "listeners",
        "`NAME://host:port,...`: every listener; port 0 = any free port; the first is announced as "
        f"`listening on` {_SEE_SECURITY}",
        (Listener("PLAINTEXT", "127.0.0.1", 9092),),
        restart_reason=LISTENERS_AT_START,
    )
    advertised_listeners: Mapping[str, Listener] = _derived(
        "advertised.listeners",
        _STRING,
        None,
        "listeners",
        "`NAME://host:port,...` announced in Metadata / FindCoordinator to clients of that listener (port 0: the "
        "bound port)",
        {},
        shown_default="(listeners)",
    )
    listener_security_protocol_map: Mapping[str, str] = _field(
        "listener.security.protocol.map",
        _STRING,
        DEFAULT_PROTOCOLS,
        "listeners",
        "listener name -> security protocol",
        parse=protocol_map,
        restart_reason=LISTENERS_AT_START,
    )
    inter_broker_listener_name: str = _derived(
        "inter.broker.listener.name",
        _STRING,
        None,
        "listeners",
        "the listener other brokers (followers, the transaction coordinator's markers) connect to, with its TLS "
        "and SASL settings; without a listener named PLAINTEXT this or `security.inter.broker.protocol` must be "
        "set (the start fails naming `inter.broker.listener.name`, as Kafka)",
        "PLAINTEXT",
        shown_default="the listener named PLAINTEXT",
    )
    sasl_mechanism_inter_broker_protocol: str = _field(
        "sasl.mechanism.inter.broker.protocol",
        _STRING,
        "PLAIN",
        "security",
        "the mechanism a broker logs in with on a SASL inter-broker listener (username/password from that "
        "listener's JAAS entry)",
        parse=upper,
        restart_reason="the inter-broker logins are set up at start",
    )
    connection_failed_authentication_delay_ms: int = _field(
        "connection.failed.authentication.delay.ms",
        _INT,
        "100",
        "security",
        "a refused login's connection is closed this long after the answer (KIP-306)",
        minimum=0,
    )
    sasl_server_max_receive_size: int = _field(
        "sasl.server.max.receive.size",
        _INT,
        "524288",
        "security",
        "on a SASL listener, a frame announced larger than this before the login completes (re-authentication "
        "included) closes the connection at once, unanswered, decided from its size prefix (Kafka's "
        "CVE-2022-34917 fix); after the login `socket.request.max.bytes` applies",
        minimum=1,
    )
    log_dirs: tuple[str, ...] = _derived(
        "log.dirs",
        _STRING,
        None,
        "log",
        "partition directories live here (`<topic>-<partition>/`), comma-separated",
        ("kafka-logs",),
        shown_default="(`log.dir`)",
    )
    socket_request_max_bytes: int = _field(
        "socket.request.max.bytes",
        _INT,
        "104857600",
        "connections",
        "largest request frame; bigger frames close the connection (a frame's buffer grows with the bytes "
        "received, never from its size prefix alone)",
        minimum=1,
    )
    max_connections: int = _field(
        "max.connections",
        _INT,
        str(INT_MAX),
        "connections",
        f"open connections per broker; {_SEE_HARDENING}",
        minimum=0,
        shown_default="unlimited (Kafka's Int.MaxValue)",
        dynamic=True,
    )
    max_connections_per_ip: int = _field(
        "max.connections.per.ip",
        _INT,
        str(INT_MAX),
        "connections",
        "open connections per client address",
        minimum=0,
        shown_default="unlimited (Kafka's Int.MaxValue)",
        dynamic=True,
    )
    max_connections_per_ip_overrides: Mapping[str, int] = _field(
        "max.connections.per.ip.overrides",
        _STRING,
        "",
        "connections",
        "per-address limits, `host:limit,...` (a host name is resolved when the limits are set)",
        parse=per_ip_overrides,
        dynamic=True,
    )
    connections_max_idle_ms: int = _field(
        "connections.max.idle.ms",
        _LONG,
        "600000",
        "connections",
        "a connection with no traffic and no request in flight this long is closed",
        minimum=1,
    )
    max_incremental_fetch_session_cache_slots: int = _field(
        "max.incremental.fetch.session.cache.slots",
        _INT,
        "1000",
        "connections",
        "the most incremental fetch sessions (KIP-227) the broker keeps; 0: every fetch is sessionless. One cache "
        "holds exactly this many (Kafka splits them over 8 shards); a full cache evicts as Kafka does (see "
        "[The broker](#the-broker))",
        minimum=0,
    )
    queued_max_requests: int = _field(
        "queued.max.requests",
        _INT,
        "500",
        "connections",
        "a connection stops reading while this many of its requests wait to be handled",
        minimum=1,
    )
    quota_window_num: int = _field(
        "quota.window.num",
        _INT,
        "11",
        "connections",
        "client quotas: how many samples a rate is measured over (the current one included); see "
        "[Client quotas](#client-quotas)",
        minimum=1,
    )
    quota_window_size_seconds: int = _field(
        "quota.window.size.seconds",
        _INT,
        "1",
        "connections",
        "client quotas: the time span of one sample",
        minimum=1,
    )
    log_retention_check_interval_ms: int = _field(
        "log.retention.check.interval.ms",
        _LONG,
        "300000",
        "log",
        "how often retention runs (on the broker's storage-task thread, not the event loop)",
        minimum=1,
    )
    log_cleaner_enable: bool = _field(
        "log.cleaner.enable", _BOOLEAN, "true", "log", "run the log cleaner thread (compacted topics)"
    )
    log_cleaner_backoff_ms: int = _field(
        "log.cleaner.backoff.ms",
        _LONG,
        "15000",
        "log",
        "the cleaner's sleep between two passes",
        minimum=0,
        dynamic=True,
    )
    log_flush_offset_checkpoint_interval_ms: int = _field(
        "log.flush.offset.checkpoint.interval.ms",
        _INT,
        "60000",
        "log",
        "how often the recovery-point, log-start and high-watermark checkpoints are written (on the "
        "storage-task thread, as retention)",
        minimum=1,
    )
    replica_lag_time_max_ms: int = _field(
        "replica.lag.time.max.ms",
        _LONG,
        "30000",
        "replication",
        "a follower not caught up for this long leaves the ISR; a follower whose fetches keep failing this long "
        "logs at WARNING (before that, and while the broker stops, at INFO)",
        minimum=1,
    )
    replica_fetch_wait_max_ms: int = _field(
        "replica.fetch.wait.max.ms", _INT, "500", "replication", "the followers' Fetch MaxWaitMs", minimum=0
    )
    replica_fetch_min_bytes: int = _field(
        "replica.fetch.min.bytes", _INT, "1", "replication", "the followers' Fetch MinBytes", minimum=1
    )
    replica_fetch_max_bytes: int = _field(
        "replica.fetch.max.bytes",
        _INT,
        "1048576",
        "replication",
        "the followers' Fetch PartitionMaxBytes",
        minimum=0,
    )
    replica_fetch_response_max_bytes: int = _field(
        "replica.fetch.response.max.bytes",
        _INT,
        "10485760",
        "replication",
        "the followers' Fetch MaxBytes",
        minimum=0,
    )
    replica_fetch_backoff_ms: int = _field(
        "replica.fetch.backoff.ms", _INT, "1000", "replication", "follower back-off after an error", minimum=0
    )
    replica_socket_timeout_ms: int = _field(
        "replica.socket.timeout.ms", _INT, "30000", "replication", "a follower's socket timeout", minimum=1
    )
    broker_heartbeat_interval_ms: int = _field(
        "broker.heartbeat.interval.ms",
        _INT,
        "2000",
        "replication",
        "a cluster node beats this often",
        minimum=1,
    )
    broker_session_timeout_ms: int = _field(
        "broker.session.timeout.ms",
        _INT,
        "9000",
        "replication",
        "the controller fences a node whose last beat is older than this (a node whose process is gone is fenced "
        "at once); larger than `broker.heartbeat.interval.ms`",
        minimum=1,
    )
    unclean_leader_election_enable: bool = _field(
        "unclean.leader.election.enable",
        _BOOLEAN,
        "false",
        "replication",
        "when no in-sync replica is live, let the first live replica lead (loses the records it lacks; topic "
        "config too)",
    )
    auto_leader_rebalance_enable: bool = _field(
        "auto.leader.rebalance.enable",
        _BOOLEAN,
        "true",
        "replication",
        "give preferred replicas their leadership back when a broker's share of preferred-but-not-led "
        "partitions exceeds `leader.imbalance.per.broker.percentage`",
    )
    leader_imbalance_check_interval_seconds: int = _field(
        "leader.imbalance.check.interval.seconds",
        _LONG,
        "300",
        "replication",
        "how often the controller checks the preferred leaders",
        minimum=1,
    )
    leader_imbalance_per_broker_percentage: int = _field(
        "leader.imbalance.per.broker.percentage",
        _INT,
        "10",
        "replication",
        "the share of a broker's preferred-but-not-led partitions above which leadership is moved back",
        minimum=0,
    )
    transaction_state_log_num_partitions: int = _field(
        "transaction.state.log.num.partitions",
        _INT,
        "50",
        "transactions",
        "partitions of `__transaction_state` (created on first transactional use)",
        minimum=1,
    )
    transaction_state_log_replication_factor: int = _field(
        "transaction.state.log.replication.factor",
        _SHORT,
        "3",
        "transactions",
        "cluster: replicas of each `__transaction_state` partition (at most the brokers registered, WARNING "
        "when fewer)",
        minimum=1,
    )
    transaction_state_log_min_isr: int = _field(
        "transaction.state.log.min.isr",
        _INT,
        "2",
        "transactions",
        "cluster: `min.insync.replicas` of `__transaction_state` (state writes need that many in-sync replicas, "
        "at most the replication factor)",
        minimum=1,
    )
    transaction_max_timeout_ms: int = _field(
        "transaction.max.timeout.ms",
        _INT,
        "900000",
        "transactions",
        "a producer's `transaction.timeout.ms` above this gets INVALID_TRANSACTION_TIMEOUT",
        minimum=1,
    )
    transaction_partition_verification_enable: bool = _field(
        "transaction.partition.verification.enable",
        _BOOLEAN,
        "true",
        "transactions",
        "a partition leader asks the transaction coordinator whether a partition is in the producer's transaction "
        "before the producer's first transactional batch there, and refuses it otherwise (KIP-890 part 1: no "
        "hanging transaction from a late produce); the partitions of a transactions v2 producer (Produce v12, "
        "TxnOffsetCommit v5) are added through the coordinator whatever this says: nothing else adds them",
        restart_reason="pylog reads it when the broker starts",
    )
    transactional_id_expiration_ms: int = _field(
        "transactional.id.expiration.ms",
        _INT,
        "604800000",
        "transactions",
        "a transactional id with no open transaction, untouched this long, is forgotten",
        minimum=1,
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _field(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        _INT,
        "10000",
        "transactions",
        "how often transactions past their timeout are aborted (their producer fenced)",
        minimum=1,
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _field(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        _INT,
        "3600000",
        "transactions",
        "how often expired transactional ids are removed",
        minimum=1,
    )
    offsets_topic_num_partitions: int = _field(
        "offsets.topic.num.partitions",
        _INT,
        "50",
        "groups",
        "partitions of `__consumer_offsets` (single node: created on the first commit or stable generation; "
        "cluster: on the first group FindCoordinator)",
        minimum=1,
    )
    offsets_topic_replication_factor: int = _field(
        "offsets.topic.replication.factor",
        _SHORT,
        "3",
        "groups",
        "cluster: replicas of each `__consumer_offsets` partition; the topic is not created "
        "(COORDINATOR_NOT_AVAILABLE) until that many brokers are live",
        minimum=1,
    )
    offsets_commit_timeout_ms: int = _field(
        "offsets.commit.timeout.ms",
        _INT,
        "5000",
        "groups",
        "cluster: how long a commit (any group write) waits for its replication before COORDINATOR_NOT_AVAILABLE",
        minimum=1,
    )
    offset_metadata_max_bytes: int = _field(
        "offset.metadata.max.bytes",
        _INT,
        "4096",
        "groups",
        "a commit's metadata string above this gets OFFSET_METADATA_TOO_LARGE",
        minimum=0,
    )
    offsets_retention_minutes: int = _field(
        "offsets.retention.minutes",
        _INT,
        "10080",
        "groups",
        "offsets of a group without members expire this long after their last commit",
        minimum=1,
    )
    offsets_retention_check_interval_ms: int = _field(
        "offsets.retention.check.interval.ms",
        _LONG,
        "600000",
        "groups",
        "how often expired offsets are removed",
        minimum=1,
    )
    group_min_session_timeout_ms: int = _field(
        "group.min.session.timeout.ms",
        _INT,
        "6000",
        "groups",
        "the shortest session timeout a member may ask for (else INVALID_SESSION_TIMEOUT)",
        minimum=1,
    )
    group_max_session_timeout_ms: int = _field(
        "group.max.session.timeout.ms",
        _INT,
        "1800000",
        "groups",
        "the longest session timeout a member may ask for (else INVALID_SESSION_TIMEOUT)",
        minimum=1,
    )
    group_initial_rebalance_delay_ms: int = _field(
        "group.initial.rebalance.delay.ms",
        _INT,
        "3000",
        "groups",
        "a group with no member waits this long (extended by each new member, at most its rebalance timeout) "
        "before its first generation",
        minimum=0,
    )
    group_consumer_heartbeat_interval_ms: int = _field(
        "group.consumer.heartbeat.interval.ms",
        _INT,
        "5000",
        "groups",
        "how often a member of a consumer group (KIP-848, `group.protocol=consumer`) is told to heartbeat; "
        "below `group.consumer.session.timeout.ms`, else the broker does not start",
        minimum=1,
    )
    group_consumer_session_timeout_ms: int = _field(
        "group.consumer.session.timeout.ms",
        _INT,
        "45000",
        "groups",
        "a consumer group member without a heartbeat for this long is fenced and its partitions move",
        minimum=1,
    )
    group_consumer_assignors: tuple[str, ...] = _field(
        "group.consumer.assignors",
        ConfigType.LIST,
        "uniform,range",
        "groups",
        "the server-side assignors of consumer groups, the first the default (`uniform`, `range`, or Kafka's "
        "class names of the two)",
        parse=_assignors,
    )
    group_consumer_max_size: int = _field(
        "group.consumer.max.size",
        _INT,
        "2147483647",
        "groups",
        "the most members a consumer group admits (GROUP_MAX_SIZE_REACHED above it)",
        minimum=1,
    )
    group_consumer_regex_refresh_interval_ms: int = _field(
        "group.consumer.regex.refresh.interval.ms",
        _INT,
        "600000",
        "groups",
        "a consumer group's subscribed regular expressions are resolved again at least this often (topics the "
        "member may now describe are picked up; new topics are at the next heartbeat, see the next key)",
        minimum=10_000,
    )
    group_consumer_regex_refresh_min_interval_ms: int = _field(
        "pylog.group.consumer.regex.refresh.min.interval.ms",
        _INT,
        "10000",
        "pylog",
        "a consumer group's regular expressions are not resolved again sooner than this after their last "
        "resolution (Kafka's fixed 10 s): a topic created meanwhile is picked up by the next heartbeat after it "
        "(Kafka has no such key)",
        minimum=0,
    )
    max_partitions_per_topic: int = _field(
        "pylog.max.partitions.per.topic",
        _INT,
        "1000",
        "pylog",
        "pylog's cap on the partitions one CreateTopics asks for (POLICY_VIOLATION above it); `num.partitions` "
        "must not exceed it (Kafka has no such key)",
        minimum=1,
    )
    log_recover_all: bool = _field(
        "pylog.log.recover.all",
        _BOOLEAN,
        "false",
        "pylog",
        "validate every segment of every partition at startup (`pylog-broker start --recover-all`); see "
        "[Recovery](#recovery-after-a-crash)",
    )
    fetch_sendfile: bool = _field(
        "pylog.fetch.sendfile",
        _BOOLEAN,
        "true",
        "pylog",
        "plaintext Fetch answers send record ranges of 16 KiB or more from the page cache with `sendfile` (zero "
        "copy, as Kafka's `transferTo`); TLS listeners always read them (see [The broker](#the-broker)); false: "
        "read them everywhere",
    )
    metrics_listener: tuple[str, int] | None = _field(
        "pylog.metrics.listener",
        _STRING,
        "",
        "pylog",
        "`HOST:PORT` (or `PORT` alone: loopback) of the Prometheus endpoint, `GET /metrics`; port 0 picks a free "
        "one (see [Metrics](#metrics))",
        parse=metrics_listener,
        shown_default="(empty: no metrics)",
    )
    metrics_consumer_lag_max_partitions: int = _field(
        "pylog.metrics.consumer.lag.max.partitions",
        _INT,
        "10000",
        "pylog",
        "the most (group, partition) series of the consumer-group lag gauges one scrape shows; above it the rest "
        "is left out, with a WARNING and `pylog_consumergroup_lag_truncated_scrapes_total` (see [Metrics](#metrics))",
        minimum=0,
    )
    metrics_event_loop_lag_interval_ms: int = _field(
        "pylog.metrics.event.loop.lag.interval.ms",
        _INT,
        "0",
        "pylog",
        "how often (ms) a probe measures how late the event loop runs what is due, into the "
        "`pylog_event_loop_lag_ms` histogram; 0: no probe. Needs `pylog.metrics.listener` (see [Metrics](#metrics))",
        minimum=0,
    )
    cluster_dir: str | None = _field(
        "pylog.cluster.dir",
        _STRING,
        "",
        "pylog",
        "the directory holding the shared `cluster.json`; set by `pylog-broker cluster`",
        parse=optional,
        shown_default="(empty: one broker)",
    )
    test_validation_header_only: bool = _field(
        "pylog.test.validation.header.only",
        _BOOLEAN,
        "false",
        "pylog",
        "benchmarks only: check produced batches by their header alone (no record walk), the baseline of the "
        "validation cost",
    )
    test_transaction_markers_hold_file: str | None = _field(
        "pylog.test.transaction.markers.hold.file",
        _STRING,
        "",
        "pylog",
        "tests only: while this file exists, a cluster coordinator holds its transaction markers back (after the "
        "Prepare record is replicated), so a failure test can kill a node at that point; a single node's marker writes fail "
        "(KAFKA_STORAGE_ERROR) and its periodic check retries them",
        parse=optional,
        shown_default="(empty)",
    )
    log: LogConfig = field(default_factory=LogConfig)
    #: Never in the repr: it holds the secrets (passwords, JAAS entries, keys).
    props: Mapping[str, str] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def listener(self) -> Listener:
        """The first listener (announced on stdout; the address a single broker is known by)."""
        return self.listeners[0]

    @property
    def inter_broker_listener(self) -> Listener:
        return next(x for x in self.listeners if x.name == self.inter_broker_listener_name)

    def inter_broker_security(self) -> ClientSecurity:
        """How this broker connects to the others: the inter-broker listener's protocol, the broker's ``ssl.*``
        (that listener's overrides first) and, on SASL, ``sasl.mechanism.inter.broker.protocol`` with the
        ``username``/``password`` of that listener's JAAS entry for the mechanism (as Kafka)."""
        listener = self.inter_broker_listener
        props: dict[str, str] = {"security.protocol": listener.security_protocol}
        for key in SSL_KEYS:
            value = self.listener_setting(listener.name, key)
            if value is not None:
                props[key] = value
        props.pop("ssl.client.auth", None)
        if listener.security_protocol.startswith("SASL_"):
            mechanism = self.sasl_mechanism_inter_broker_protocol
            props["sasl.mechanism"] = mechanism
            props["sasl.jaas.config"] = self.sasl_jaas(listener.name, mechanism) or ""
        return ClientSecurity.from_properties(props, name_prefix=f"inter-broker listener {listener.name}: ")

    def listener_setting(self, listener: str, key: str) -> str | None:
        """``listener.name.<listener>.<key>`` if given, else ``<key>`` (Kafka's per-listener override)."""
        scoped = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if scoped in self.props:
            return self.props[scoped]
        return self.props.get(key)

    def sasl_mechanisms(self, listener: str) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` of ``listener``."""
        text = self.listener_setting(listener, "sasl.enabled.mechanisms")
        if text is None:
            text = SASL_DEFAULT
        return tuple(m.strip().upper() for m in text.split(",") if m.strip())

    def connections_max_reauth_ms(self, listener: str, mechanism: str) -> int:
        """``connections.max.reauth.ms`` of ``mechanism`` on ``listener`` (Kafka's lookup, KIP-368):
        ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``, else ``listener.name.<l>.connections.max.
        reauth.ms``, else ``connections.max.reauth.ms``; 0: the session never expires."""
        key, text = reauth_setting(self.props, listener, mechanism)
        return int(REAUTH.parse(key, text))

    def sasl_jaas(self, listener: str, mechanism: str) -> str | None:
        """The JAAS entry of ``mechanism`` on ``listener``: ``listener.name.<l>.<mechanism>.sasl.jaas.config``,
        else ``listener.name.<l>.sasl.jaas.config``, else ``sasl.jaas.config``."""
        for key in (
            f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
            f"{LISTENER_PREFIX}{listener.lower()}.sasl.jaas.config",
            "sasl.jaas.config",
        ):
            value = self.props.get(key, "").strip()
            if value:
                return value
        return None

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | Iterable[str] | None = None,
    ) -> BrokerConfig:
        """Build from a property mapping plus overrides (a mapping or ``key=value`` strings)."""
        merged: dict[str, str] = dict(props or {})
        merged.update(overrides_dict(overrides))
        return cls._build(merged)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        overrides: Mapping[str, str] | Iterable[str] | None = None,
    ) -> BrokerConfig:
        """Read a ``.properties`` file, then apply overrides."""
        return cls.from_properties(read_properties(path), overrides)

    @classmethod
    def _build(cls, props: dict[str, str]) -> BrokerConfig:
        warnings = tuple(
            f"unknown config key {key!r} is ignored"  # never its value: it may be a secret (as Kafka)
            for key in sorted(props)
            if key not in KNOWN_BROKER_KEYS and not key.startswith(LISTENER_PREFIX)
        ) + no_effect_warnings(BROKER_CONFIG_KEYS, props)
        values = parse_fields(cls, props)
        protocols = values["listener_security_protocol_map"]
        listeners = parse_listeners("listeners", props.get("listeners", _LISTENERS_DEFAULT), protocols)
        advertised_text = props.get("advertised.listeners", "").strip()
        advertised: dict[str, Listener] = {}
        if advertised_text:
            for entry in parse_listeners("advertised.listeners", advertised_text, protocols):
                if all(x.name != entry.name for x in listeners):
                    raise ConfigError(
                        f"advertised.listeners={advertised_text!r}: {entry.name} is not one of the listeners"
                    )
                advertised[entry.name] = entry
        inter_broker = inter_broker_listener(props, listeners)
        check_security(props, listeners, inter_broker, values["sasl_mechanism_inter_broker_protocol"])
        authorizer_from_properties(props)  # a bad authorizer.class.name / super.users fails the start here
        dirs_text = props.get("log.dirs", "").strip() or _LOG_DIR.value(props).strip()
        log_dirs = tuple(d.strip() for d in dirs_text.split(",") if d.strip())
        if not log_dirs:
            raise ConfigError(f"log.dirs={dirs_text!r}: at least one directory is required")
        _CLEANER_THREADS.value(props)
        heartbeat_ms, session_ms = values["broker_heartbeat_interval_ms"], values["broker_session_timeout_ms"]
        if session_ms <= heartbeat_ms:
            raise ConfigError(
                f"broker.session.timeout.ms={session_ms}: must be larger than broker.heartbeat.interval.ms="
                f"{heartbeat_ms} (a session must survive at least one missed heartbeat)"
            )
        heartbeat_ms = values["group_consumer_heartbeat_interval_ms"]
        session_ms = values["group_consumer_session_timeout_ms"]
        if heartbeat_ms >= session_ms:
            # Kafka's GroupCoordinatorConfig refuses it the same way
            raise ConfigError(
                f"group.consumer.heartbeat.interval.ms={heartbeat_ms} must be less than "
                f"group.consumer.session.timeout.ms={session_ms} (a consumer group member would be fenced "
                "between two heartbeats)"
            )
        if values["metrics_event_loop_lag_interval_ms"] and values["metrics_listener"] is None:
            raise ConfigError(
                f"pylog.metrics.event.loop.lag.interval.ms={values['metrics_event_loop_lag_interval_ms']}: the "
                "probe reports to the metrics endpoint, which is off; set pylog.metrics.listener too, or set 0"
            )
        num_partitions, max_partitions = values["num_partitions"], values["max_partitions_per_topic"]
        if num_partitions > max_partitions:
            raise ConfigError(
                f"num.partitions={num_partitions}: above pylog.max.partitions.per.topic={max_partitions}, so "
                "auto-created topics could not be created"
            )
        config = cls(
            **values,
            listeners=listeners,
            advertised_listeners=advertised,
            inter_broker_listener_name=inter_broker,
            log_dirs=log_dirs,
            log=LogConfig.from_properties({**props, "log.dirs": ",".join(log_dirs)}),
            props=dict(props),
            warnings=warnings,
        )
        if config.cluster_dir is not None:
            config.inter_broker_security()  # a cluster's brokers must be able to log in to each other
        return config

    def storage_properties(self) -> dict[str, str]:
        """The properties handed to the storage's ``LogConfig.from_properties`` (log.dirs resolved)."""
        return {**self.props, "log.dirs": ",".join(self.log_dirs)}


_LOG_DIR = _setting("log.dir", _STRING, "kafka-logs", "log", "the log directory when `log.dirs` is not set")
_CLEANER_THREADS = _setting(
    "log.cleaner.threads",
    _INT,
    "1",
    "log",
    "the log cleaner's threads: pylog runs one, only 1 is accepted",
    parse=_one_cleaner_thread,
    dynamic=True,
)


def _threads(name: str, default: str, why: str) -> ConfigKey:
    """A thread count Kafka resizes at runtime (``DynamicThreadPool``); pylog has no such pool."""
    return _setting(
        name,
        _INT,
        default,
        "connections",
        f"accepted, no effect: {why}",
        minimum=1,
        dynamic=True,
        effect=False,
    )


#: Kafka's thread counts AlterConfigs may change (half to double the current value, as Kafka checks them).
THREAD_COUNTS: tuple[ConfigKey, ...] = (
    _threads("num.network.threads", "3", "pylog reads and writes every connection on its event loop thread"),
    _threads("num.io.threads", "8", "pylog handles requests on its event loop thread"),
    _threads("background.threads", "10", "pylog's background work runs on its own few task threads"),
    _threads("num.replica.fetchers", "1", "pylog's followers fetch on its event loop thread"),
)


def _in_readme_order(keys: Iterable[ConfigKey]) -> tuple[ConfigKey, ...]:
    rank = {group: i for i, (group, _) in enumerate(GROUPS)}
    return tuple(sorted(keys, key=lambda key: rank[key.group or "log"]))


#: Every broker config pylog knows, declared once each, in the README's order (by :data:`GROUPS`).
BROKER_CONFIGS: tuple[ConfigKey, ...] = _in_readme_order(
    (
        *(key for _, key in declared(BrokerConfig)),
        *LISTENER_SETTINGS,
        *THREAD_COUNTS,
        _LOG_DIR,
        _CLEANER_THREADS,
        *BROKER_LOG_CONFIGS,
    )
)

#: The declarations by name.
BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in BROKER_CONFIGS}

#: Every broker config name pylog knows (a listener-prefixed name is known when its base name is).
KNOWN_BROKER_KEYS: frozenset[str] = frozenset(BROKER_CONFIG_KEYS)


def sensitive_broker_config(name: str, value: str | None = None) -> bool:
    """True when broker config ``name`` is a secret (:mod:`broker_runtime.security.secrets`: a password-type
    config, a JAAS entry or key in its value, or a name this broker does not know): DescribeConfigs answers it
    with a null value and ``IsSensitive=true``, logs show ``[hidden]``."""
    return is_sensitive(name, value, known=KNOWN_BROKER_KEYS)
