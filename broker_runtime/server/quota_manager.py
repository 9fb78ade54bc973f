"""Client quotas, the enforcement: per-entity rates over Kafka's sample windows, throttle times, and the
connection creation rate per IP (Kafka's ``ClientQuotaManager``, ``ClientRequestQuotaManager`` and the IP part of
``ConnectionQuotas``).

Rates (Kafka's ``Rate`` over a ``SampledStat``): ``quota.window.num`` samples of ``quota.window.size.seconds``
each; a sample starts with the first value recorded after the previous one ended, samples older than all of them
together are reset, and the rate is the sum of the samples over the elapsed window, counted as at least
``quota.window.num - 1`` whole samples (so a new client is not judged on its first milliseconds).

Throttling (Kafka's ``ClientQuotaManager.recordAndGetThrottleTimeMs``): a value is recorded, then, if the rate ``O``
is above the quota ``T``, the throttle time is ``(O - T) / T * W`` ms (``W`` the window the rate was measured
over): the time that brings the rate back to the quota if nothing more is recorded. As Kafka's, the byte-rate
throttles (``producer_byte_rate``, ``consumer_byte_rate``: ``ClientQuotaManager.throttleTime``) are not capped: a
1 MB produce under a 1000 B/s quota holds the client off for about 1000 s, so its rate stays at its quota.
``request_percentage`` (Kafka's ``ClientRequestQuotaManager``) and ``connection_creation_rate`` (Kafka's
``ConnectionQuotas``) are capped at ONE window, ``quota.window.size.seconds`` (Kafka's ``maxThrottleTimeMs``,
``QuotaUtils.boundedThrottleTime``); that cap also bounds how long a refused connection is held open. Every
throttle is at most :data:`MAX_THROTTLE_MS`, the most the wire's int32 ``ThrottleTimeMs`` can say; a quota of 0
(where the formula is infinite) throttles by that maximum, the capped quotas by their window.

What each quota records (:class:`ClientQuotas`):
  * ``producer_byte_rate``: the size of each Produce request;
  * ``consumer_byte_rate``: the bytes of each consumer Fetch response (a throttled response is sent without
    records and its bytes are taken back, as Kafka's ``unrecordQuotaSensor``), and a consumer's fetch is limited
    to what the quota allows in one window (Kafka's ``getMaxValueInQuotaWindow``);
  * ``request_percentage``: the time the event loop spent handling each request, as a percentage of one second
    (Kafka's request thread time; pylog has one request thread, the event loop);
  * ``connection_creation_rate``: one per accepted connection from the address (a throttled connection is taken
    back, as Kafka's ``unrecordIpConnectionMaybeThrottle``).

Only clients some entity sets a quota for get a rate, keyed by the matched entity's (user, client id) pair
(:func:`~broker_runtime.server.client_quotas.resolve`); client ids are chosen by clients, so the rates kept are
bounded (:data:`MAX_SENSORS` per quota type, the least recently used dropped first and counted in
:attr:`QuotaSensors.evicted`), and so are the metric label sets made from them.

Thread-safety: event-loop thread only. Time: monotonic milliseconds from the clock given.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker_runtime.server.client_quotas import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaMap,
    resolve,
)

__all__ = [
    "MAX_SENSORS",
    "MAX_THROTTLE_MS",
    "ClientQuotas",
    "QuotaSensors",
    "Rate",
    "SensorSnapshot",
    "user_of",
]

#: Rates kept per quota type (distinct (user, client id) pairs, or addresses); the least recently used go first.
MAX_SENSORS = 1000
#: The longest throttle (ms): ``ThrottleTimeMs`` is an int32 on the wire (a quota of 0 throttles by this much).
MAX_THROTTLE_MS = 2**31 - 1
#: Kafka's ``NanosToPercentagePerSecond``: request time in ns -> percent of one second.
NANOS_TO_PERCENT = 100.0 / 1_000_000_000
#: The throttle-time average of the metrics: Kafka's default ``MetricConfig`` (2 samples of 30 s).
_AVG_SAMPLES, _AVG_WINDOW_MS = 2, 30_000


def user_of(principal: str) -> str:
    """The quota user of a principal: its name (``User:alice`` -> ``alice``), as Kafka's ``principal.getName``."""
    return principal.partition(":")[2] if ":" in principal else principal


class Rate:
    """Values summed per sample window, and their rate per second (see the module docstring)."""

    __slots__ = ("_current", "_samples", "_starts", "_values", "_window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self._samples = samples
        self._window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
        i = self._current
        if now_ms - self._starts[i] >= self._window_ms:
            i = (i + 1) % self._samples
            if i >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[i], self._values[i] = now_ms, 0.0
            self._current = i
        self._values[i] += value

    def _purge(self, now_ms: float) -> None:
        expire = self._samples * self._window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i], self._values[i] = now_ms, 0.0

    def total(self, now_ms: float) -> float:
        """The sum of the samples still in the window."""
        self._purge(now_ms)
        return sum(self._values)

    def window_ms(self, now_ms: float) -> float:
        """The span the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts, default=now_ms)
        full = int(elapsed // self._window_ms)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window_ms
        return max(elapsed, 1.0)

    def per_second(self, now_ms: float) -> float:
        window = self.window_ms(now_ms)
        return sum(self._values) * 1000.0 / window


@dataclass
class _Sensor:
    rate: Rate
    throttle_ms: Rate
    throttles: Rate


@dataclass(frozen=True)
class SensorSnapshot:
    """One rate for the metrics: its (user, client id) tags (or ("", address) for connections), its current rate
    and quota, and the average throttle time of the last minute."""

    user: str
    client_id: str
    rate: float
    quota: float
    throttle_time_ms: float


class QuotaSensors:
    """The rates of one quota key (``producer_byte_rate``, ...) and the throttle times they give, at most
    ``max_throttle_ms`` (None: :data:`MAX_THROTTLE_MS`, the byte rates; see the module docstring)."""

    def __init__(
        self,
        key: str,
        samples: int,
        window_s: int,
        max_sensors: int = MAX_SENSORS,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.key = key
        self._samples = samples
        self._window_ms = window_s * 1000
        self.max_throttle_ms = (
            MAX_THROTTLE_MS if max_throttle_ms is None else min(max_throttle_ms, MAX_THROTTLE_MS)
        )
        self._max = max_sensors
        self._quotas: QuotaMap = {}
        self.enabled = False
        #: (user, client id) -> (tags, limit) or None; cleared when the quotas change; bounded like the sensors.
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}
        self._sensors: OrderedDict[tuple[str, str], _Sensor] = OrderedDict()
        #: Sensors dropped because :data:`MAX_SENSORS` others were used more recently.
        self.evicted = 0

    def update(self, quotas: QuotaMap) -> None:
        self._quotas = quotas
        self.enabled = any(self.key in values for values in quotas.values())
        self._resolved.clear()

    def limit(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The matched entity's tags and the quota, or None (no quota applies)."""
        pair = (user, client_id)
        try:
            return self._resolved[pair]
        except KeyError:
            pass
        found = self._lookup(user, client_id)
        if len(self._resolved) >= self._max:
            self._resolved.clear()
        self._resolved[pair] = found
        return found

    def _lookup(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        return resolve(self._quotas, self.key, user, client_id)

    def _sensor(self, tags: tuple[str, str]) -> _Sensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = _Sensor(
                Rate(self._samples, self._window_ms),
                Rate(_AVG_SAMPLES, _AVG_WINDOW_MS),
                Rate(_AVG_SAMPLES, _AVG_WINDOW_MS),
            )
            self._sensors[tags] = sensor
            if len(self._sensors) > self._max:
                self._sensors.popitem(last=False)
                self.evicted += 1
        else:
            self._sensors.move_to_end(tags)
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Record ``value``; the throttle time in ms it earns (0: within the quota, or no quota)."""
        if not self.enabled:
            return 0
        found = self.limit(user, client_id)
        if found is None:
            return 0
        tags, bound = found
        sensor = self._sensor(tags)
        sensor.rate.record(value, now_ms)
        observed = sensor.rate.per_second(now_ms)
        if observed <= bound:
            return 0
        if bound <= 0:
            return self.max_throttle_ms
        window = sensor.rate.window_ms(now_ms)
        return int(min(round((observed - bound) / bound * window), self.max_throttle_ms))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: float) -> None:
        """Take back a recorded ``value`` (a throttled fetch sends no records)."""
        found = self.limit(user, client_id) if self.enabled else None
        if found is not None:
            self._sensor(found[0]).rate.record(-value, now_ms)

    def throttled(self, user: str, client_id: str, throttle_ms: int, now_ms: float) -> None:
        """Count a throttle of ``throttle_ms`` in the entity's throttle-time average."""
        found = self.limit(user, client_id) if self.enabled else None
        if found is not None:
            sensor = self._sensor(found[0])
            sensor.throttle_ms.record(throttle_ms, now_ms)
            sensor.throttles.record(1, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may record without being throttled for sure (Kafka's
        ``getMaxValueInQuotaWindow``: the quota over ``quota.window.num - 1`` samples); None: no quota."""
        found = self.limit(user, client_id) if self.enabled else None
        if found is None:
            return None
        return found[1] * (self._samples - 1) * (self._window_ms / 1000)

    def snapshot(self, now_ms: float) -> list[SensorSnapshot]:
        out = []
        for (user, client_id), sensor in self._sensors.items():
            count = sensor.throttles.total(now_ms)
            quota = (
                resolve(self._quotas, self.key, user, client_id)
                if self.key != CONNECTION_CREATION_RATE
                else None
            )
            out.append(
                SensorSnapshot(
                    user,
                    client_id,
                    sensor.rate.per_second(now_ms),
                    quota[1] if quota is not None else float("nan"),
                    sensor.throttle_ms.total(now_ms) / count if count else 0.0,
                )
            )
        return out


class _IpSensors(QuotaSensors):
    """``connection_creation_rate`` per address: the address's own entity, else the default ip entity."""

    def update(self, quotas: QuotaMap) -> None:
        self._quotas = quotas
        self.enabled = any(
            self.key in values and entity and entity[0][0] == IP for entity, values in quotas.items()
        )
        self._resolved.clear()

    def _lookup(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        for entity in (((IP, client_id),), ((IP, None),)):
            values = self._quotas.get(entity)
            if values is not None and self.key in values:
                return ("", client_id), float(values[self.key])
        return None


class ClientQuotas:
    """The broker's client quotas: one :class:`QuotaSensors` per key, set from the cluster metadata's quotas."""

    def __init__(self, samples: int, window_s: int, clock_ms: Callable[[], float] | None = None) -> None:
        self.produce = QuotaSensors(PRODUCER_BYTE_RATE, samples, window_s)
        self.fetch = QuotaSensors(CONSUMER_BYTE_RATE, samples, window_s)
        one_window = window_s * 1000  # Kafka's maxThrottleTimeMs of the request and connection quotas
        self.request = QuotaSensors(REQUEST_PERCENTAGE, samples, window_s, max_throttle_ms=one_window)
        self.connections = _IpSensors(CONNECTION_CREATION_RATE, samples, window_s, max_throttle_ms=one_window)
        self.now_ms: Callable[[], float] = clock_ms or (lambda: time.monotonic_ns() / 1e6)
        self._quotas: QuotaMap | None = None

    def update(self, quotas: QuotaMap) -> None:
        """The quotas of the latest cluster view (a no-op when they did not change)."""
        if quotas == self._quotas:
            return
        self._quotas = quotas
        for sensors in (self.produce, self.fetch, self.request, self.connections):
            sensors.update(quotas)

    @property
    def sensors(self) -> tuple[QuotaSensors, ...]:
        return self.produce, self.fetch, self.request, self.connections

    def connection_throttle_ms(self, address: str) -> int:
        """Count a new connection from ``address``; the throttle time (ms) when that is over its
        ``connection_creation_rate`` (the connection is then taken back: it is refused)."""
        sensors = self.connections
        if not sensors.enabled:
            return 0
        now = self.now_ms()
        throttle = sensors.record("", address, 1, now)
        if throttle:
            sensors.unrecord("", address, 1, now)
            sensors.throttled("", address, throttle, now)
        return throttle
