"""Broker configuration: Kafka's property names, parsed once into a frozen :class:`BrokerConfig`.

Sources, later wins: built-in defaults (Kafka's where Kafka has one), a ``.properties`` file (Java
properties syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments, backslash line continuation),
then explicit overrides (``--override key=value`` on the command line, ``overrides=`` in code).

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
    one line naming the key (:func:`_check_security`);
  * storage settings (``log.segment.bytes``, ``log.retention.ms``, ...) are not interpreted here: the raw
    ``props`` go to the storage's ``LogConfig.from_properties``, which owns those names.

Immutable after construction, hence safe to share between threads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.errors import ConfigError
from broker_runtime.security.acl import authorizer_from_properties
from broker_runtime.security.client_security import SECURITY_PROTOCOLS, ClientSecurity
from broker_runtime.security.jaas import parse_jaas
from broker_runtime.security.sasl_server import SASL_MECHANISMS
from broker_runtime.security.secrets import is_sensitive
from broker_runtime.security.tls import SSL_KEYS, server_context

__all__ = [
    "BROKER_KEYS",
    "KNOWN_BROKER_KEYS",
    "LISTENER_PREFIX",
    "STORAGE_KEYS",
    "BrokerConfig",
    "Listener",
    "parse_listener",
    "read_properties",
    "sensitive_broker_config",
]

#: Names this module interprets (with their defaults, as text, Kafka's where Kafka has one).
BROKER_KEYS: dict[str, str] = {
    "node.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": "",
    "security.inter.broker.protocol": "PLAINTEXT",
    # SASL (Kafka's names; pylog's default mechanisms are the ones it implements, Kafka's is GSSAPI).
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": "",
    "connection.failed.authentication.delay.ms": "100",
    # Kafka's bound on every frame a SASL listener reads before the login completes (CVE-2022-34917's fix).
    "sasl.server.max.receive.size": "524288",
    # Authorization (Kafka's names and defaults; see security/acl.py for the accepted authorizer names).
    "authorizer.class.name": "",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
    # KIP-368: a SASL session's lifetime; 0 = sessions never expire (also per listener and mechanism, see
    # BrokerConfig.connections_max_reauth_ms).
    "connections.max.reauth.ms": "0",
    "log.dirs": "",
    "log.dir": "kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "min.insync.replicas": "1",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    # Connection limits (Kafka's names and defaults; Kafka's "no limit" is Int.MaxValue).
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "connections.max.idle.ms": "600000",
    "queued.max.requests": "500",
    # pylog: the most partitions one CreateTopics or auto-creation may ask for (Kafka has no such key).
    "pylog.max.partitions.per.topic": "1000",
    # pylog: validate every segment of every partition at the next start (a full recovery on request).
    "pylog.log.recover.all": "false",
    # pylog: plaintext Fetch answers send record bytes from the page cache with sendfile (false: read them).
    "pylog.fetch.sendfile": "true",
    "compression.type": "producer",
    "log.retention.check.interval.ms": "300000",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.threads": "1",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "cluster.id": "pylog-cluster",
    # Replication (Kafka's names and defaults).
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    # Controller and broker liveness (Kafka's KRaft names and defaults).
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    # Transaction coordinator (Kafka's names and defaults).
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    # Group coordinator (Kafka's names and defaults).
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.commit.timeout.ms": "5000",
    "offset.metadata.max.bytes": "4096",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "3000",
    # pylog: directory of the shared cluster metadata file (cluster.json + its lock); empty = single node.
    "pylog.cluster.dir": "",
    # pylog: the Prometheus endpoint, HOST:PORT or PORT (loopback); empty = no metrics (see server/metrics.py).
    "pylog.metrics.listener": "",
    # pylog, tests only: while this file exists, a cluster coordinator holds its transaction markers back.
    "pylog.test.transaction.markers.hold.file": "",
    # pylog, benchmarks only: validate produced batches by their header alone (no record walk).
    "pylog.test.validation.header.only": "false",
}

#: Storage names accepted without a warning; interpreted by the storage's LogConfig.
STORAGE_KEYS: frozenset[str] = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.index.size.max.bytes",
        "log.index.interval.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.segment.delete.delay.ms",
        "log.preallocate",
        "log.message.timestamp.type",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "log.message.format.version",
        "log.message.downconversion.enable",
        "num.recovery.threads.per.data.dir",
        "log.initial.task.delay.ms",
        "producer.id.expiration.ms",
        "producer.id.expiration.check.interval.ms",
    }
)

#: Per-listener settings: ``listener.name.<listener, lower case>.<key>`` overrides ``<key>`` on that listener.
LISTENER_PREFIX = "listener.name."

#: Every broker config name pylog knows (a listener-prefixed name is known when its base name is).
KNOWN_BROKER_KEYS: frozenset[str] = frozenset(BROKER_KEYS) | STORAGE_KEYS | frozenset(SSL_KEYS)


def sensitive_broker_config(name: str, value: str | None = None) -> bool:
    """True when broker config ``name`` is a secret (:mod:`broker_runtime.security.secrets`: a password-type
    config, a JAAS entry or key in its value, or a name this broker does not know): DescribeConfigs answers it
    with a null value and ``IsSensitive=true``, logs show ``[hidden]``."""
    return is_sensitive(name, value, known=KNOWN_BROKER_KEYS)


_LISTENER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` endpoint and its security protocol. ``port`` 0 means: bind any free port."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def _protocol_map(text: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise ConfigError(f"{key}={text!r}: expected NAME:PROTOCOL,... e.g. CLIENT:SASL_SSL,BROKER:SSL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}={text!r}: {protocol!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.strip().upper()] = protocol
    return out


def parse_listeners(key: str, text: str, protocols: Mapping[str, str] | None = None) -> tuple[Listener, ...]:
    """Parse a Kafka ``listeners`` / ``advertised.listeners`` value: ``NAME://host:port`` entries, names unique,
    each name's security protocol from ``protocols`` (``listener.security.protocol.map``)."""
    protocols = (
        protocols if protocols is not None else _protocol_map(BROKER_KEYS["listener.security.protocol.map"])
    )
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ConfigError(f"{key}={text!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
    out: list[Listener] = []
    for entry in entries:
        match = _LISTENER.match(entry)
        if match is None:
            raise ConfigError(f"{key}={text!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
        name = match["name"].upper()
        if name not in protocols:
            raise ConfigError(
                f"{key}={text!r}: listener {name} has no security protocol; map it in "
                f"listener.security.protocol.map (e.g. {name}:SASL_SSL)"
            )
        if any(listener.name == name for listener in out):
            raise ConfigError(f"{key}={text!r}: listener name {name} appears twice")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}={text!r}: port {port} is outside 0..65535")
        out.append(Listener(name, match["host"].strip("[]"), port, protocols[name]))
    return tuple(out)


def parse_listener(key: str, text: str) -> Listener:
    """The first listener of a ``listeners`` value (default protocol map)."""
    return parse_listeners(key, text)[0]


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java ``.properties`` file (the subset Kafka's config files use) into a dict."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        props[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        props[key] = value
    return props


def _split_property(line: str) -> tuple[str, str]:
    match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
    if match is None:
        return line.strip(), ""
    return match.group(1), match.group(2).strip()


def _int(props: Mapping[str, str], key: str, *, minimum: int | None = None) -> int:
    text = props.get(key, BROKER_KEYS.get(key, "")).strip()
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{key}={text!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}={value}: must be >= {minimum}")
    return value


def _bool(props: Mapping[str, str], key: str) -> bool:
    text = props.get(key, BROKER_KEYS.get(key, "")).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{key}={text!r}: expected true or false")
    return text == "true"


def _per_ip_overrides(props: Mapping[str, str]) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:limit`` pairs, comma-separated (Kafka's syntax, e.g.
    ``127.0.0.1:200,broker-host:50``; an IPv6 address is everything before the last ``:``)."""
    key = "max.connections.per.ip.overrides"
    text = props.get(key, "").strip()
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, limit = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            value = int(limit)
        except ValueError:
            value = -1
        if not sep or not host or value < 0:
            raise ConfigError(f"{key}={text!r}: expected host:limit pairs, e.g. 127.0.0.1:200, got {entry!r}")
        out[host] = value
    return out


def _metrics_listener(text: str) -> tuple[str, int] | None:
    """``pylog.metrics.listener``: ``HOST:PORT``, or ``PORT`` alone for loopback; empty = off; port 0 = any free."""
    text = text.strip()
    if not text:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"pylog.metrics.listener={text!r}: expected HOST:PORT or PORT (0..65535), e.g. 127.0.0.1:9404"
        )
    return host, port


_COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings (see :data:`BROKER_KEYS` for names and defaults).

    ``props`` holds every key given (file + overrides), including storage keys and unknown ones;
    ``warnings`` lists one human-readable line per unknown key.
    """

    node_id: int = 0
    #: ``listeners``: every endpoint this broker binds, in the order given (the first is the one announced on
    #: stdout as ``listening on HOST:PORT``).
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    #: ``advertised.listeners`` by listener name (a listener missing here advertises its bound address).
    advertised_listeners: Mapping[str, Listener] = field(default_factory=dict)
    #: ``inter.broker.listener.name``: the listener other brokers (followers, coordinators) connect to.
    inter_broker_listener_name: str = "PLAINTEXT"
    #: ``sasl.mechanism.inter.broker.protocol``: the mechanism this broker logs in with on that listener.
    sasl_mechanism_inter_broker_protocol: str = "PLAIN"
    #: ``connection.failed.authentication.delay.ms``: a refused login's connection closes this long after the
    #: answer (KIP-306; also lets clients read the answer before the close).
    connection_failed_authentication_delay_ms: int = 100
    #: ``sasl.server.max.receive.size``: on a SASL listener, a frame announced larger than this before the login
    #: completes (re-authentication included) closes the connection, decided from its size prefix (see network).
    sasl_server_max_receive_size: int = 524288
    log_dirs: tuple[str, ...] = ("kafka-logs",)
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    min_insync_replicas: int = 1
    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    #: ``max.connections``: open client connections the broker keeps; more are closed at once (see network).
    max_connections: int = 2147483647
    #: ``max.connections.per.ip`` and its ``max.connections.per.ip.overrides`` (host or IP -> limit).
    max_connections_per_ip: int = 2147483647
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    #: ``connections.max.idle.ms``: a connection with no traffic and no request in flight this long is closed.
    connections_max_idle_ms: int = 600000
    #: ``queued.max.requests``: a connection stops reading while this many of its requests wait to be dispatched.
    queued_max_requests: int = 500
    #: ``pylog.max.partitions.per.topic``: CreateTopics asking for more gets POLICY_VIOLATION.
    max_partitions_per_topic: int = 1000
    #: ``pylog.log.recover.all``: validate every segment at startup (``pylog-broker start --recover-all``).
    log_recover_all: bool = False
    #: ``pylog.fetch.sendfile``: plaintext Fetch answers send their records with sendfile (see server/network.py).
    fetch_sendfile: bool = True
    compression_type: str = "producer"
    log_retention_check_interval_ms: int = 300000
    #: ``log.cleaner.enable``: run the log cleaner thread (compacts topics whose cleanup.policy holds compact).
    log_cleaner_enable: bool = True
    #: ``log.cleaner.backoff.ms``: the cleaner's sleep between two passes.
    log_cleaner_backoff_ms: int = 15000
    log_flush_offset_checkpoint_interval_ms: int = 60000
    cluster_id: str = "pylog-cluster"
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30000
    broker_heartbeat_interval_ms: int = 2000
    broker_session_timeout_ms: int = 9000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    transaction_state_log_num_partitions: int = 50
    #: Cluster: replicas of each ``__transaction_state`` partition (at most the brokers registered, WARNING).
    transaction_state_log_replication_factor: int = 3
    #: Cluster: the topic's ``min.insync.replicas`` (the effective minimum is at most its replication factor).
    transaction_state_log_min_isr: int = 2
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    offsets_topic_num_partitions: int = 50
    #: Cluster: replicas of each ``__consumer_offsets`` partition; the topic is not created (FindCoordinator
    #: answers COORDINATOR_NOT_AVAILABLE) until that many brokers are registered and unfenced, as Kafka.
    offsets_topic_replication_factor: int = 3
    #: Cluster: how long an offset commit (or any group write) waits for its replication before it fails.
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    #: Directory holding ``cluster.json`` shared by the brokers of a cluster on one machine; None = single node.
    cluster_dir: str | None = None
    #: ``pylog.metrics.listener``: (host, port) of the Prometheus endpoint; None = metrics off (the default).
    metrics_listener: tuple[str, int] | None = None
    #: Tests only: while this file exists, the cluster's transaction markers wait (fault injection).
    test_transaction_markers_hold_file: str | None = None
    #: Benchmarks only: validate produced batches by their header alone (the baseline of the validation cost).
    test_validation_header_only: bool = False
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
            text = BROKER_KEYS["sasl.enabled.mechanisms"]
        return tuple(m.strip().upper() for m in text.split(",") if m.strip())

    def connections_max_reauth_ms(self, listener: str, mechanism: str) -> int:
        """``connections.max.reauth.ms`` of ``mechanism`` on ``listener`` (Kafka's lookup, KIP-368):
        ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``, else ``listener.name.<l>.connections.max.
        reauth.ms``, else ``connections.max.reauth.ms``; 0: the session never expires."""
        key, text = _reauth_setting(self.props, listener, mechanism)
        return _non_negative(key, text)

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
        merged.update(_overrides_dict(overrides))
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
            if key not in BROKER_KEYS
            and key not in STORAGE_KEYS
            and not key.startswith(LISTENER_PREFIX)
            and key not in SSL_KEYS
        )
        protocols = _protocol_map(
            props.get("listener.security.protocol.map", BROKER_KEYS["listener.security.protocol.map"])
        )
        listeners = parse_listeners("listeners", props.get("listeners", BROKER_KEYS["listeners"]), protocols)
        advertised_text = props.get("advertised.listeners", "").strip()
        advertised: dict[str, Listener] = {}
        if advertised_text:
            for entry in parse_listeners("advertised.listeners", advertised_text, protocols):
                if all(x.name != entry.name for x in listeners):
                    raise ConfigError(
                        f"advertised.listeners={advertised_text!r}: {entry.name} is not one of the listeners"
                    )
                advertised[entry.name] = entry
        inter_broker = _inter_broker_listener(props, listeners)
        inter_mechanism = (
            props.get(
                "sasl.mechanism.inter.broker.protocol", BROKER_KEYS["sasl.mechanism.inter.broker.protocol"]
            )
            .strip()
            .upper()
        )
        _check_security(props, listeners, inter_broker, inter_mechanism)
        authorizer_from_properties(props)  # a bad authorizer.class.name / super.users fails the start here
        dirs_text = props.get("log.dirs", "").strip() or props.get("log.dir", BROKER_KEYS["log.dir"]).strip()
        log_dirs = tuple(d.strip() for d in dirs_text.split(",") if d.strip())
        if not log_dirs:
            raise ConfigError(f"log.dirs={dirs_text!r}: at least one directory is required")
        cleaner_threads = _int(props, "log.cleaner.threads", minimum=1)
        if cleaner_threads != 1:
            raise ConfigError(f"log.cleaner.threads={cleaner_threads}: pylog runs one cleaner thread, set 1")
        compression = props.get("compression.type", "producer").strip().lower()
        if compression not in _COMPRESSION_TYPES:
            raise ConfigError(
                f"compression.type={compression!r}: expected one of {', '.join(_COMPRESSION_TYPES)}"
            )
        cluster_id = props.get("cluster.id", BROKER_KEYS["cluster.id"]).strip()
        if not cluster_id:
            raise ConfigError("cluster.id='': must not be empty")
        heartbeat_ms = _int(props, "broker.heartbeat.interval.ms", minimum=1)
        session_ms = _int(props, "broker.session.timeout.ms", minimum=1)
        if session_ms <= heartbeat_ms:
            raise ConfigError(
                f"broker.session.timeout.ms={session_ms}: must be larger than broker.heartbeat.interval.ms="
                f"{heartbeat_ms} (a session must survive at least one missed heartbeat)"
            )
        num_partitions = _int(props, "num.partitions", minimum=1)
        max_partitions = _int(props, "pylog.max.partitions.per.topic", minimum=1)
        if num_partitions > max_partitions:
            raise ConfigError(
                f"num.partitions={num_partitions}: above pylog.max.partitions.per.topic={max_partitions}, so "
                "auto-created topics could not be created"
            )
        config = cls(
            node_id=_int(props, "node.id", minimum=0),
            listeners=listeners,
            advertised_listeners=advertised,
            inter_broker_listener_name=inter_broker,
            sasl_mechanism_inter_broker_protocol=inter_mechanism,
            connection_failed_authentication_delay_ms=_int(
                props, "connection.failed.authentication.delay.ms", minimum=0
            ),
            sasl_server_max_receive_size=_int(props, "sasl.server.max.receive.size", minimum=1),
            log_dirs=log_dirs,
            num_partitions=num_partitions,
            default_replication_factor=_int(props, "default.replication.factor", minimum=1),
            auto_create_topics_enable=_bool(props, "auto.create.topics.enable"),
            min_insync_replicas=_int(props, "min.insync.replicas", minimum=1),
            message_max_bytes=_int(props, "message.max.bytes", minimum=0),
            socket_request_max_bytes=_int(props, "socket.request.max.bytes", minimum=1),
            max_connections=_int(props, "max.connections", minimum=0),
            max_connections_per_ip=_int(props, "max.connections.per.ip", minimum=0),
            max_connections_per_ip_overrides=_per_ip_overrides(props),
            connections_max_idle_ms=_int(props, "connections.max.idle.ms", minimum=1),
            queued_max_requests=_int(props, "queued.max.requests", minimum=1),
            max_partitions_per_topic=max_partitions,
            log_recover_all=_bool(props, "pylog.log.recover.all"),
            fetch_sendfile=_bool(props, "pylog.fetch.sendfile"),
            compression_type=compression,
            log_retention_check_interval_ms=_int(props, "log.retention.check.interval.ms", minimum=1),
            log_cleaner_enable=_bool(props, "log.cleaner.enable"),
            log_cleaner_backoff_ms=_int(props, "log.cleaner.backoff.ms", minimum=0),
            log_flush_offset_checkpoint_interval_ms=_int(
                props, "log.flush.offset.checkpoint.interval.ms", minimum=1
            ),
            cluster_id=cluster_id,
            replica_lag_time_max_ms=_int(props, "replica.lag.time.max.ms", minimum=1),
            replica_fetch_wait_max_ms=_int(props, "replica.fetch.wait.max.ms", minimum=0),
            replica_fetch_min_bytes=_int(props, "replica.fetch.min.bytes", minimum=1),
            replica_fetch_max_bytes=_int(props, "replica.fetch.max.bytes", minimum=0),
            replica_fetch_response_max_bytes=_int(props, "replica.fetch.response.max.bytes", minimum=0),
            replica_fetch_backoff_ms=_int(props, "replica.fetch.backoff.ms", minimum=0),
            replica_socket_timeout_ms=_int(props, "replica.socket.timeout.ms", minimum=1),
            broker_heartbeat_interval_ms=heartbeat_ms,
            broker_session_timeout_ms=session_ms,
            unclean_leader_election_enable=_bool(props, "unclean.leader.election.enable"),
            auto_leader_rebalance_enable=_bool(props, "auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_seconds=_int(
                props, "leader.imbalance.check.interval.seconds", minimum=1
            ),
            leader_imbalance_per_broker_percentage=_int(
                props, "leader.imbalance.per.broker.percentage", minimum=0
            ),
            transaction_state_log_num_partitions=_int(
                props, "transaction.state.log.num.partitions", minimum=1
            ),
            transaction_state_log_replication_factor=_int(
                props, "transaction.state.log.replication.factor", minimum=1
            ),
            transaction_state_log_min_isr=_int(props, "transaction.state.log.min.isr", minimum=1),
            transaction_max_timeout_ms=_int(props, "transaction.max.timeout.ms", minimum=1),
            transactional_id_expiration_ms=_int(props, "transactional.id.expiration.ms", minimum=1),
            transaction_abort_timed_out_transaction_cleanup_interval_ms=_int(
                props, "transaction.abort.timed.out.transaction.cleanup.interval.ms", minimum=1
            ),
            transaction_remove_expired_transaction_cleanup_interval_ms=_int(
                props, "transaction.remove.expired.transaction.cleanup.interval.ms", minimum=1
            ),
            offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions", minimum=1),
            offsets_topic_replication_factor=_int(props, "offsets.topic.replication.factor", minimum=1),
            offsets_commit_timeout_ms=_int(props, "offsets.commit.timeout.ms", minimum=1),
            offset_metadata_max_bytes=_int(props, "offset.metadata.max.bytes", minimum=0),
            offsets_retention_minutes=_int(props, "offsets.retention.minutes", minimum=1),
            offsets_retention_check_interval_ms=_int(props, "offsets.retention.check.interval.ms", minimum=1),
            group_min_session_timeout_ms=_int(props, "group.min.session.timeout.ms", minimum=1),
            group_max_session_timeout_ms=_int(props, "group.max.session.timeout.ms", minimum=1),
            group_initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms", minimum=0),
            cluster_dir=props.get("pylog.cluster.dir", "").strip() or None,
            metrics_listener=_metrics_listener(props.get("pylog.metrics.listener", "")),
            test_transaction_markers_hold_file=props.get(
                "pylog.test.transaction.markers.hold.file", ""
            ).strip()
            or None,
            test_validation_header_only=_bool(props, "pylog.test.validation.header.only"),
            props=dict(props),
            warnings=warnings,
        )
        if config.cluster_dir is not None:
            config.inter_broker_security()  # a cluster's brokers must be able to log in to each other
        return config

    def storage_properties(self) -> dict[str, str]:
        """The properties handed to the storage's ``LogConfig.from_properties`` (log.dirs resolved)."""
        out = dict(self.props)
        out["log.dirs"] = ",".join(self.log_dirs)
        out.setdefault("message.max.bytes", str(self.message_max_bytes))
        out.setdefault("compression.type", self.compression_type)
        out.setdefault("min.insync.replicas", str(self.min_insync_replicas))
        return out


def _inter_broker_listener(props: Mapping[str, str], listeners: tuple[Listener, ...]) -> str:
    names = [x.name for x in listeners]
    given = props.get("inter.broker.listener.name", "").strip().upper()
    if given:
        if given not in names:
            raise ConfigError(
                f"inter.broker.listener.name={given}: not one of the listeners ({', '.join(names)})"
            )
        if "security.inter.broker.protocol" in props:
            raise ConfigError(
                "inter.broker.listener.name and security.inter.broker.protocol are both set; set only one (as Kafka)"
            )
        return given
    protocol = props.get("security.inter.broker.protocol", "").strip().upper()
    if protocol:
        for x in listeners:
            if x.name == protocol:
                return x.name
        raise ConfigError(
            f"security.inter.broker.protocol={protocol}: no listener is named {protocol}; "
            "set inter.broker.listener.name"
        )
    # Kafka's default (security.inter.broker.protocol=PLAINTEXT) is the listener named PLAINTEXT; without one
    # Kafka refuses to start, and so does pylog: guessing would hand the inter-broker role to a client listener.
    if "PLAINTEXT" in names:
        return "PLAINTEXT"
    raise ConfigError(
        f"inter.broker.listener.name is not set and no listener is named PLAINTEXT (listeners: {', '.join(names)}): "
        "set inter.broker.listener.name to the listener the brokers use among themselves"
    )


def _check_security(
    props: Mapping[str, str], listeners: tuple[Listener, ...], inter_broker: str, inter_mechanism: str
) -> None:
    """Fail now on every listener whose TLS or SASL settings cannot work (files, PEM, mechanisms, users)."""
    for x in listeners:
        if x.security_protocol in ("SSL", "SASL_SSL"):
            server_context(props, x.name)
        if x.security_protocol.startswith("SASL_"):
            key = f"{LISTENER_PREFIX}{x.name.lower()}.sasl.enabled.mechanisms"
            text = props.get(
                key, props.get("sasl.enabled.mechanisms", BROKER_KEYS["sasl.enabled.mechanisms"])
            )
            name = key if key in props else "sasl.enabled.mechanisms"
            mechanisms = [m.strip().upper() for m in text.split(",") if m.strip()]
            if not mechanisms:
                raise ConfigError(f"{name}={text!r}: listener {x.name} needs at least one SASL mechanism")
            for m in mechanisms:
                if m not in SASL_MECHANISMS:
                    raise ConfigError(
                        f"{name}={text!r}: {m} is not supported; pylog implements {', '.join(SASL_MECHANISMS)} "
                        "(no GSSAPI, OAUTHBEARER or delegation tokens)"
                    )
            for m in mechanisms:
                for jkey in (
                    f"{LISTENER_PREFIX}{x.name.lower()}.{m.lower()}.sasl.jaas.config",
                    f"{LISTENER_PREFIX}{x.name.lower()}.sasl.jaas.config",
                    "sasl.jaas.config",
                ):
                    if props.get(jkey, "").strip():
                        parse_jaas(jkey, props[jkey])
                        break
            for m in mechanisms:
                _non_negative(*_reauth_setting(props, x.name, m))
            if x.name == inter_broker and inter_mechanism not in mechanisms:
                raise ConfigError(
                    f"sasl.mechanism.inter.broker.protocol={inter_mechanism}: not enabled on the inter-broker "
                    f"listener {x.name} ({', '.join(mechanisms)})"
                )


def _reauth_setting(props: Mapping[str, str], listener: str, mechanism: str) -> tuple[str, str]:
    """``(key, value)`` of the ``connections.max.reauth.ms`` that applies to ``mechanism`` on ``listener``."""
    for key in (
        f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.connections.max.reauth.ms",
        f"{LISTENER_PREFIX}{listener.lower()}.connections.max.reauth.ms",
        "connections.max.reauth.ms",
    ):
        if key in props:
            return key, props[key]
    return "connections.max.reauth.ms", BROKER_KEYS["connections.max.reauth.ms"]


def _non_negative(key: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{key}={text!r}: expected an integer (milliseconds)") from None
    if value < 0:
        raise ConfigError(f"{key}={value}: must be >= 0 (0: sessions never expire)")
    return value


def _overrides_dict(overrides: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): str(v) for k, v in overrides.items()}
    out: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out
