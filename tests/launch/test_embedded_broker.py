"""The embedded broker of a data directory (``broker_runtime.launch.embedded``) and ``pylog-broker status|stop``.

Every broker here is a real detached process started through :func:`ensure_embedded_broker`; the CLI runs as
``python -m broker_runtime`` in a subprocess. Each test stops what it started.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import spark_kafka_log
from broker_runtime.errors import ConfigError, EmbeddedBrokerError
from broker_runtime.fsutil import LOG_DIR_FAILURE_FILE, record_log_dir_failure
from broker_runtime.launch import (
    broker_log_dir,
    create_topic,
    embedded_broker_address,
    embedded_broker_status,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from broker_runtime.launch.command import parse_listening_line
from broker_runtime.launch.embedded import DISCOVERY_FILE, LOCK_FILE, OUT_FILE
from tests.support.console_forms import get
from tests.support.processes import running

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_runtime", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    if path.is_dir():
        info = embedded_broker_status(path)
        if info is not None:
            os.kill(info["pid"], signal.SIGCONT)  # in case a test left it stopped
        stop_embedded_broker(path, timeout_s=5)


def test_status_and_stop_through_the_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = ensure_embedded_broker(data_dir, overrides={"num.partitions": "2"})
    create_topic(bootstrap, "cli-topic", 2)
    # The connector's helper serves the web console of this broker on loopback and prints its URL.
    with spark_kafka_log.start_console(data_dir) as console:
        assert console.url.startswith("http://127.0.0.1:")
        assert f"pylog console at {console.url} (the embedded broker of {data_dir} at {bootstrap})" in (
            capsys.readouterr().out
        )
        with urllib.request.urlopen(console.url + "topics/cli-topic", timeout=30) as page:
            text = page.read().decode()
            assert page.status == 200 and 'id="partitions"' in text and 'id="delete-form"' not in text
    # allow_writes offers the state-changing actions (the web console's --allow-writes)
    with spark_kafka_log.start_console(data_dir, allow_writes=True) as writes:
        assert 'id="delete-form"' in get(writes.url + "topics/cli-topic")[1]
    info = embedded_broker_status(data_dir)
    assert info is not None and info["bootstrap"] == bootstrap
    pid = int(info["pid"])
    # One log-dir convention: the shared broker keeps its partitions in <data_dir>/logs.
    assert info["log_dir"] == str(broker_log_dir(data_dir.resolve())) == str(data_dir.resolve() / "logs")
    assert (data_dir / "logs" / "cli-topic-1").is_dir()

    status = _cli("status", "--data-dir", str(data_dir))
    assert status.returncode == 0, status.stderr
    assert f"bootstrap: {bootstrap}\n" in status.stdout
    assert f"pid: {pid}\n" in status.stdout
    assert f"log dir: {data_dir.resolve() / 'logs'}\n" in status.stdout
    as_json = _cli("status", "--data-dir", str(data_dir), "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["bootstrap"] == bootstrap

    stop = _cli("stop", "--data-dir", str(data_dir))
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"stopped the broker of {data_dir} (pid {pid}, {bootstrap})"
    assert not running(pid)
    assert not (data_dir / DISCOVERY_FILE).exists()
    # SIGTERM is a clean shutdown: the next start skips recovery.
    assert (data_dir / "logs" / ".kafka_cleanshutdown").exists()

    again = _cli("stop", "--data-dir", str(data_dir))
    assert again.returncode == 0 and again.stdout.strip() == f"no broker running for {data_dir}"
    gone = _cli("status", "--data-dir", str(data_dir))
    assert gone.returncode == 3 and gone.stdout.strip() == f"no broker running for {data_dir}"


def test_start_console_says_what_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmbeddedBrokerError, match="no embedded broker runs for .*ensure_embedded_broker"):
        spark_kafka_log.start_console(tmp_path / "never-used")
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # the console extra not installed
    monkeypatch.delitem(sys.modules, "broker_runtime.console.server", raising=False)
    with pytest.raises(
        ConfigError, match=r"console extra \(aiohttp is missing\): pip install 'pylog\[console\]'"
    ):
        spark_kafka_log.start_console(tmp_path / "never-used")


def test_cli_on_a_directory_without_a_broker(tmp_path: Path) -> None:
    missing = tmp_path / "never-used"
    stop = _cli("stop", "--data-dir", str(missing))
    assert stop.returncode == 0 and stop.stdout.strip() == f"no broker running for {missing}"
    status = _cli("status", "--data-dir", str(missing))
    assert status.returncode == 3 and "no broker running" in status.stdout
    assert not missing.exists()  # looking does not create the data directory


def test_cli_stop_failure_exits_1_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).mkdir()  # the lock file cannot be opened
    stop = _cli("stop", "--data-dir", str(tmp_path))
    assert stop.returncode == 1
    assert stop.stderr.startswith(f"pylog-broker: cannot stop the broker of {tmp_path}: "), stop.stderr
    assert LOCK_FILE in stop.stderr and stop.stdout == ""


def test_restart_after_stop_keeps_the_data_and_replaces_the_discovery_file(data_dir: Path) -> None:
    first = ensure_embedded_broker(data_dir)
    create_topic(first, "kept", 1)
    pid = int(json.loads((data_dir / DISCOVERY_FILE).read_text())["pid"])
    assert ensure_embedded_broker(data_dir) == first  # found, not started again
    os.kill(pid, signal.SIGKILL)  # the discovery file is now stale (dead pid, closed port)
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert embedded_broker_status(data_dir) is None and embedded_broker_address(data_dir) is None
    # Had it halted on a full disk (its record of the failure left in its log dir), no broker is started again
    # to recover and halt at each job: the error names the dir, the cause and the way out.
    log_dir = broker_log_dir(data_dir)
    critical = (
        f"Shutdown broker 0 because all log dirs in {log_dir} have failed: writing kept-0 raised OSError"
    )
    record_log_dir_failure(log_dir, critical, errno.ENOSPC)
    with pytest.raises(EmbeddedBrokerError) as refused:
        ensure_embedded_broker(data_dir)
    message = str(refused.value)
    assert str(log_dir) in message and critical in message and "No space left on device" in message
    assert (
        f"free space on that file system (or fix the disk), then remove {log_dir / LOG_DIR_FAILURE_FILE}"
        in message
    )
    assert embedded_broker_status(data_dir) is None
    (log_dir / LOG_DIR_FAILURE_FILE).unlink()
    second = ensure_embedded_broker(data_dir)
    info = embedded_broker_status(data_dir)
    assert info is not None and info["pid"] != pid and info["bootstrap"] == second
    from broker_runtime.errors import ErrorCode, KafkaError

    with pytest.raises(KafkaError) as exc:
        create_topic(second, "kept", 1)
    assert exc.value.code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_stop_never_signals_a_process_that_is_not_the_broker(data_dir: Path) -> None:
    data_dir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # A discovery file whose pid was reused by another program: stale, never trusted nor signalled.
        (data_dir / DISCOVERY_FILE).write_text(
            json.dumps({"host": "127.0.0.1", "port": 1, "pid": sleeper.pid})
        )
        assert embedded_broker_status(data_dir) is None
        stop = _cli("stop", "--data-dir", str(data_dir))
        assert stop.returncode == 0 and "no broker running" in stop.stdout
        assert sleeper.poll() is None
        assert not (data_dir / DISCOVERY_FILE).exists()  # the stale file is removed
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stop_kills_a_broker_that_ignores_sigterm(data_dir: Path) -> None:
    ensure_embedded_broker(data_dir)
    info = embedded_broker_status(data_dir)
    assert info is not None
    pid = int(info["pid"])
    os.kill(pid, signal.SIGSTOP)  # a stopped process cannot act on SIGTERM; SIGKILL still ends it
    started = time.monotonic()
    stop = _cli("stop", "--data-dir", str(data_dir), "--timeout", "1")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith(f"stopped the broker of {data_dir}")
    assert not running(pid) and time.monotonic() - started < 30


def test_concurrent_processes_share_one_broker(data_dir: Path) -> None:
    code = "import sys; from broker_runtime.launch import ensure_embedded_broker as e; print(e(sys.argv[1]))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(data_dir)], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=90)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outputs)) == 1 and outputs[0] == embedded_broker_address(data_dir)
    assert (
        len(
            [
                line
                for line in (data_dir / OUT_FILE).read_text().splitlines()
                if parse_listening_line(line) is not None
            ]
        )
        == 1
    )


def test_fixed_settings_cannot_be_overridden(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="log.dirs"):
        ensure_embedded_broker(tmp_path, overrides={"log.dirs": str(tmp_path / "elsewhere")})
    assert not (tmp_path / DISCOVERY_FILE).exists()
