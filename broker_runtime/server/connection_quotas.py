"""Connection limits of the listener (Kafka's ``ConnectionQuotas``) and idle-connection expiry.

Settings (Kafka's names and defaults):
  * ``max.connections`` (default Int.MaxValue): client connections open at once on this broker;
  * ``max.connections.per.ip`` (default Int.MaxValue) and ``max.connections.per.ip.overrides``
    (``host:limit,...``; a host name is resolved to every address it has when the limits are set);
  * the three are dynamic (:meth:`ConnectionQuotas.update`): open connections stay, new ones meet the new limits;
  * ``connections.max.idle.ms`` (default 600000): a connection without a read, a write or a request in flight for
    this long is closed (Kafka's Selector idle expiry);
  * the client quota ``connection_creation_rate`` of the address (an ``ip`` entity, or the default ip; see
    :mod:`.quota_manager`), checked first, on every listener (as Kafka's ``recordIpConnectionMaybeThrottle``): a connection
    over the rate is counted in ``refused`` under that key, nothing is read from it, and it is closed after
    the throttle time (Kafka's acceptor delays the close of a throttled socket the same way), so a client
    reconnecting in a loop is slowed down rather than answered faster.

A connection is counted from the moment its TCP socket is accepted (on TLS listeners before the handshake, see
:mod:`.network`) until it is closed, as Kafka's acceptor counts it. What happens when a limit is hit: a connection over ``max.connections.per.ip`` is accepted and closed at once, as
Kafka does (its client sees the connection closed and reconnects after its backoff). Over ``max.connections``
Kafka's acceptor stops accepting until a slot frees (the client's connection waits in the listen backlog); pylog's
asyncio listener cannot stop accepting, so it closes the connection at once as well: the client retries after its
``reconnect.backoff.ms``, the same outcome a little sooner. Every refusal is counted (:attr:`ConnectionQuotas.refused`
by key) and logged at WARNING -- the first one, then at most one line per :data:`LOG_INTERVAL_S` with the number
refused since, so a connection storm cannot flood the log. Idle closes are counted in
:attr:`ConnectionQuotas.idle_closed` and logged at INFO (an expected close, as Kafka logs it at DEBUG).

Thread-safety: event-loop thread only (called from the connections' callbacks and a periodic task).
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Mapping

from broker_runtime.server.network import Connection

__all__ = ["LOG_INTERVAL_S", "ConnectionQuotas"]

_log = logging.getLogger(__name__)

#: At most one WARNING line about refused connections per this many seconds (the first refusal always logs).
LOG_INTERVAL_S = 10.0


def _resolve(host: str) -> list[str]:
    """Every address ``host`` stands for (an IP literal stands for itself); empty when it cannot be resolved."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as exc:
        _log.warning(
            "max.connections.per.ip.overrides: host %r cannot be resolved (%s); its override is not applied",
            host,
            exc,
        )
        return []
    return sorted({str(info[4][0]) for info in infos})


def _normalize(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


class ConnectionQuotas:
    """Counts open connections per broker and per client address; admits or refuses new ones."""

    def __init__(
        self,
        max_connections: int,
        max_connections_per_ip: int,
        per_ip_overrides: Mapping[str, int] | None = None,
        connections_max_idle_ms: int = 600000,
    ) -> None:
        self.idle_seconds = connections_max_idle_ms / 1000
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._overrides: dict[str, int] = {}
        self.update(max_connections, max_connections_per_ip, per_ip_overrides)
        self._open: set[Connection] = set()
        self._per_ip: collections.Counter[str] = collections.Counter()
        #: Connections refused, by the key whose limit they hit.
        self.refused: collections.Counter[str] = collections.Counter()
        #: Connections closed by ``connections.max.idle.ms``.
        self.idle_closed = 0
        self._last_log = -LOG_INTERVAL_S
        self._refused_since_log = 0
        #: address -> throttle ms of a new connection from it (``connection_creation_rate``); None: no quota.
        self.creation_throttle: Callable[[str], int] | None = None

    def update(
        self, max_connections: int, max_connections_per_ip: int, per_ip_overrides: Mapping[str, int] | None
    ) -> None:
        """New limits (at start, and when AlterConfigs changes them): connections already open stay open, new
        ones are admitted against these (Kafka's ``updateBrokerMaxConnections`` and friends); override host
        names are resolved now."""
        overrides: dict[str, int] = {}
        for host, limit in (per_ip_overrides or {}).items():
            for address in _resolve(host):
                overrides[address] = limit
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._overrides = overrides

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def limit_for(self, ip: str) -> int:
        return self._overrides.get(_normalize(ip), self.max_connections_per_ip)

    def admit(self, conn: Connection) -> bool:
        """Count ``conn`` in, or refuse it (False: the connection closes itself) with a counted WARNING."""
        ip = _normalize(conn.peer_host)
        limit = self.limit_for(ip)
        throttle = 0
        if self.creation_throttle is not None:
            throttle = self.creation_throttle(ip)
        if throttle:
            key = "connection_creation_rate"
            detail = f"{ip} is over its {key} client quota; closing it in {throttle} ms"
            conn.refused_close_delay_s = throttle / 1000
        elif self._per_ip[ip] >= limit:
            key = "max.connections.per.ip"
            detail = f"{ip} already has the configured maximum of {limit} connection(s) ({key})"
        elif len(self._open) >= self.max_connections:
            key = "max.connections"
            detail = f"the broker has the configured maximum of {self.max_connections} connection(s) ({key})"
        else:
            self._open.add(conn)
            self._per_ip[ip] += 1
            return True
        self.refused[key] += 1
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._last_log >= LOG_INTERVAL_S:
            _log.warning(
                "refused connection from %s: %s; %d connection(s) refused since the last such line, %d in all",
                conn.peer,
                detail,
                self._refused_since_log,
                sum(self.refused.values()),
            )
            self._last_log = now
            self._refused_since_log = 0
        return False

    def release(self, conn: Connection) -> None:
        """Count ``conn`` out (a connection that was refused was never counted in)."""
        if conn in self._open:
            self._open.discard(conn)
            ip = _normalize(conn.peer_host)
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]

    def close_idle(self) -> int:
        """Close every admitted connection idle for ``connections.max.idle.ms``; returns how many."""
        now = time.monotonic()
        idle = [c for c in self._open if c.is_open and c.idle_seconds(now) >= self.idle_seconds]
        for conn in idle:
            conn.close(
                f"idle for more than connections.max.idle.ms={int(self.idle_seconds * 1000)}",
                level=logging.INFO,
            )
        self.idle_closed += len(idle)
        return len(idle)

    def idle_check_interval_ms(self) -> int:
        """How often :meth:`close_idle` should run: a quarter of the idle time, between 100 ms and 10 s."""
        return max(100, min(int(self.idle_seconds * 1000) // 4, 10000))
