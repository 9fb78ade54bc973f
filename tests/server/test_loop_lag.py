"""The event-loop lag probe (``pylog.metrics.event.loop.lag.interval.ms``, ``pylog_event_loop_lag_ms``): a loop
held busy for a known time shows a sample at least that late; the probe needs the metrics endpoint."""

from __future__ import annotations

import time
from typing import Any

import pytest

from broker_runtime.errors import ConfigError
from broker_runtime.server.config import BrokerConfig
from tests.server.test_metrics import scrape
from tests.support.cluster import wait_for

pytestmark = pytest.mark.timeout(60)

STALL_S = 0.06


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {"pylog.metrics.listener": "127.0.0.1:0", "pylog.metrics.event.loop.lag.interval.ms": "1"}


def _lag(samples: dict[Any, float], suffix: str, **labels: str) -> float:
    return samples.get((f"pylog_event_loop_lag_ms_{suffix}", tuple(sorted(labels.items()))), 0.0)


def test_a_stalled_loop_shows_as_one_late_probe(broker: Any) -> None:
    wait_for(lambda: _lag(scrape(broker), "count") > 0, 10, "the first lag probe")
    before = scrape(broker)
    # Hold the event loop's thread for STALL_S, as a long handler or a collection would.
    broker._loop.call_soon_threadsafe(time.sleep, STALL_S)

    def stalled() -> bool:
        now = scrape(broker)
        late = _lag(now, "count") - _lag(now, "bucket", le="50.0")
        return late > _lag(before, "count") - _lag(before, "bucket", le="50.0")

    wait_for(stalled, 10, "a probe sample above 50 ms after a 60 ms stall")
    after = scrape(broker)
    assert _lag(after, "sum") - _lag(before, "sum") >= 50


def test_the_probe_needs_the_metrics_endpoint() -> None:
    with pytest.raises(
        ConfigError, match=r"pylog\.metrics\.event\.loop\.lag\.interval\.ms=10: .*pylog\.metrics"
    ):
        BrokerConfig.from_properties({"pylog.metrics.event.loop.lag.interval.ms": "10"})
    assert BrokerConfig.from_properties({}).metrics_event_loop_lag_interval_ms == 0
