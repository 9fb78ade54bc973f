"""The restart policy of ``pylog-broker cluster`` as pure bookkeeping: back-off doubling to its maximum, reset
after a node stayed up, the limit within a sliding window, and argument checks."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from broker_runtime.errors import InvalidArgumentError
from broker_runtime.launch.supervisor import RestartHistory, RestartPolicy, describe_exit
from tests.support.launch import pylog_broker


def test_backoff_doubles_up_to_the_maximum() -> None:
    policy = RestartPolicy(backoff_s=1.0, backoff_max_s=30.0)
    assert [policy.delay_s(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.delay_s(10_000) == 30


def test_the_limit_counts_deaths_within_the_window_only() -> None:
    history = RestartHistory(RestartPolicy(limit=2, window_s=10, backoff_s=1, backoff_max_s=8))
    assert history.on_death(0.0, None) == 1
    assert history.on_death(1.0, None) == 2
    assert history.on_death(2.0, None) is None  # the third death within 10 s: give up
    history.clear()
    assert history.on_death(100.0, None) == 1
    assert history.on_death(105.0, 1.0) == 2
    assert history.on_death(111.0, 1.0) == 4  # the death at 100 s has left the window: 2 within it


def test_a_node_that_stayed_up_starts_over_at_the_first_backoff() -> None:
    history = RestartHistory(
        RestartPolicy(limit=100, window_s=1000, backoff_s=1, backoff_max_s=30, reset_s=60)
    )
    delays = [history.on_death(float(t), 5.0) for t in range(4)]
    assert delays == [1, 2, 4, 8]
    assert history.on_death(200.0, 60.0) == 1


def test_limit_0_never_restarts() -> None:
    assert RestartHistory(RestartPolicy(limit=0)).on_death(0.0, None) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": -1}, {"window_s": 0}, {"backoff_s": 0}, {"backoff_s": 2, "backoff_max_s": 1}, {"reset_s": -1}],
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgumentError):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"


def test_a_bad_restart_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "b.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\n")
    result = subprocess.run(
        pylog_broker("cluster", "-n", "1", "-c", str(config), "--restart-backoff-ms", "0"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("pylog-broker: restart back-off 0 s") and result.stderr.count("\n") == 1
