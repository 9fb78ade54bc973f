"""Runtime reconfiguration: the dynamic broker configs of the cluster metadata applied to this broker without a
restart (Kafka's ``DynamicBrokerConfig`` reconfigurables, for what pylog has).

:meth:`Reconfiguration.apply` takes the dynamic configs (``{"": cluster-wide, "<node id>": per broker}``),
computes the properties this broker runs with (:func:`~broker_runtime.server.dynamic_config.effective_props`:
per-broker dynamic > cluster-wide dynamic > static > default) and, for what changed since the last apply:

  * the log defaults (``message.max.bytes``, ``log.retention.ms``, ... the storage's broker keys): every open log
    at once (``TopicManager.set_base``), so a produce over a lowered ``message.max.bytes`` is refused from the
    next request on;
  * ``max.connections``, ``max.connections.per.ip``, ``max.connections.per.ip.overrides``: the connection
    limits (:meth:`ConnectionQuotas.update`: open connections stay, new ones meet the new limits);
  * ``log.cleaner.backoff.ms``: the cleaner's sleep (:meth:`LogManager.set_cleaner_backoff`);
  * a TLS listener's key and trust stores (``listener.name.<l>.ssl.keystore.location``, ...): a new
    ``SSLContext`` built from the files serves the listener's *new* connections (:meth:`tls_context` is read
    when a connection is accepted); connections already open keep the context of their handshake. A key store
    key named by an AlterConfigs re-reads the files even when its value did not change (Kafka's
    ``reloadUpdatedFilesWithoutConfigChange``: rotating a certificate written over the same file);
  * keys declared without effect (``sasl.kerberos.min.time.before.relogin``, ``num.io.threads``, ...):
    stored and described only; a value other than the default logs one WARNING naming the key
    (:func:`~broker_runtime.configdef.no_effect_warnings`), never silence.

Every value was validated before it was written (``check_broker_configs``); an apply that still fails (a
hand-edited file, a key store changed since) logs a WARNING and keeps the previous state. Values are logged
redacted (:func:`~broker_runtime.security.secrets.redacted`).

Thread-safety: event-loop thread only (AlterConfigs, the cluster metadata refresh).
"""

from __future__ import annotations

import logging
import ssl
from collections import Counter
from collections.abc import Iterable, Mapping

from broker_runtime.configdef import no_effect_warnings
from broker_runtime.errors import ConfigError
from broker_runtime.security.secrets import base_config_name, redacted
from broker_runtime.security.tls import server_context
from broker_runtime.server.config import BROKER_CONFIG_KEYS, KNOWN_BROKER_KEYS, BrokerConfig
from broker_runtime.server.connection_quotas import ConnectionQuotas
from broker_runtime.server.dynamic_config import (
    LISTENER_SSL_CONFIGS,
    effective_props,
    listener_of,
    listener_ssl_settings,
)
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager

__all__ = ["Reconfiguration"]

_log = logging.getLogger(__name__)

_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_CONNECTION_LIMITS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")


class Reconfiguration:
    """This broker's reconfigurable parts and the effective properties they were last set from."""

    def __init__(self, config: BrokerConfig, topics: TopicManager, logs: LogManager) -> None:
        self._config = config
        self._topics = topics
        self._logs = logs
        self._props: dict[str, str] = config.storage_properties()
        self._tls: dict[str, ssl.SSLContext] = {
            x.name: server_context(self._props, x.name)
            for x in config.listeners
            if x.security_protocol in _TLS_PROTOCOLS
        }
        self._quotas: ConnectionQuotas | None = None
        #: Listener -> how many times its TLS context was rebuilt at runtime.
        self.tls_reloads: Counter[str] = Counter()

    @property
    def props(self) -> Mapping[str, str]:
        """The properties this broker runs with now (static overlaid by the dynamic configs)."""
        return self._props

    def tls_context(self, listener: str) -> ssl.SSLContext | None:
        """The TLS context a new connection of ``listener`` starts with (None: not a TLS listener)."""
        return self._tls.get(listener)

    def attach_quotas(self, quotas: ConnectionQuotas) -> None:
        """The listeners' connection limits, set now from the effective properties and on every change."""
        self._quotas = quotas
        self._update_quotas()

    def apply(self, dynamic: Mapping[str, Mapping[str, str]], named: Iterable[str] = ()) -> None:
        """Apply the dynamic configs ``dynamic``; ``named``: the keys an AlterConfigs just set (a listener key
        store among them is reloaded even if unchanged)."""
        cfg = self._config
        try:
            props = effective_props(cfg.storage_properties(), dynamic, cfg.node_id)
            base = LogConfig.from_properties(props)
        except ConfigError as exc:  # validated before it was written; a hand-edited file may still be bad
            _log.warning("node %d: dynamic broker configs not applied: %s", cfg.node_id, exc)
            return
        before, named = self._props, list(named)
        changed = sorted(k for k in before.keys() | props.keys() if before.get(k) != props.get(k))
        if not changed and not any(base_config_name(n) in LISTENER_SSL_CONFIGS for n in named):
            return
        self._props = props
        if changed:
            _log.info(
                "node %d: applying dynamic broker configs %s",
                cfg.node_id,
                {res: redacted(values, known=KNOWN_BROKER_KEYS) for res, values in dynamic.items()},
            )
        if base != self._topics.base:
            self._topics.set_base(base)
        if any(k in _CONNECTION_LIMITS for k in changed):
            self._update_quotas()
        if "log.cleaner.backoff.ms" in changed and cfg.log_cleaner_enable:
            self._logs.set_cleaner_backoff(BROKER_CONFIG_KEYS["log.cleaner.backoff.ms"].value(props))
        reload = {listener_of(n) for n in named if base_config_name(n) in LISTENER_SSL_CONFIGS}
        for name in self._tls:
            if name.lower() in reload or listener_ssl_settings(before, name) != listener_ssl_settings(
                props, name
            ):
                self._reload_tls(name)
        set_now = {base_config_name(k): props[k] for k in changed if k in props}
        for warning in no_effect_warnings(BROKER_CONFIG_KEYS, set_now):
            _log.warning("node %d: %s", cfg.node_id, warning)

    def _update_quotas(self) -> None:
        if self._quotas is None:
            return
        keys = BROKER_CONFIG_KEYS
        self._quotas.update(
            keys["max.connections"].value(self._props),
            keys["max.connections.per.ip"].value(self._props),
            keys["max.connections.per.ip.overrides"].value(self._props),
        )

    def _reload_tls(self, listener: str) -> None:
        try:
            context = server_context(self._props, listener)
        except ConfigError as exc:
            _log.warning(
                "listener %s: its TLS key and trust stores were not reloaded (%s); new connections keep the "
                "previous ones",
                listener,
                exc,
            )
            return
        self._tls[listener] = context
        self.tls_reloads[listener] += 1
        _log.info(
            "listener %s: TLS key and trust stores reloaded; new connections use them, open ones keep theirs",
            listener,
        )
