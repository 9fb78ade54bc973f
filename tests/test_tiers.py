"""The suite's tiering (:mod:`tests.support.tiers`): every test of the run has exactly one tier, and the scan
finds what a test starts through its helpers, its fixtures, scripts it runs and imports inside functions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import tiers


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    """Over the tests of this run (all of them in ``bash jobs/dev.sh test``); a hand-written tier mark next to
    the automatic one shows up here as two tiers."""
    wrong = {}
    for item in request.session.items:
        found = [mark.name for mark in item.iter_markers() if mark.name in tiers.TIERS]
        if len(found) != 1:
            wrong[item.nodeid] = found
    assert not wrong, f"tests without exactly one tier: {wrong}"


def test_every_spark_session_test_is_in_its_modules_group(request: pytest.FixtureRequest) -> None:
    """A module's tests on the shared session run on one worker, in order (one session per worker in any case)."""
    for item in request.session.items:
        if "spark" in getattr(item, "fixturenames", ()):
            groups = [mark.args[0] for mark in item.iter_markers("xdist_group")]
            assert groups == [item.nodeid.split("::")[0].split("@")[0]], (item.nodeid, groups)


def test_grouped_tests_reach_xdist_with_their_group(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a grouped test's node id carries ``@GROUP``, the only thing xdist's scheduler
    reads: marks added too late (after xdist's own collection hook) or a pytest that ignores xdist's node-id
    suffix (pytest-xdist issue 1386, pytest 9.2) would spread a group over the workers without a word, each
    starting the group's shared broker or Spark session again. Outside a distributed run there is nothing to
    carry, and nothing to check."""
    if getattr(request.config, "workerinput", None) is None or not request.config.getvalue("loadgroup"):
        return  # not an xdist worker of a --dist loadgroup run
    grouped = [item for item in request.session.items if item.get_closest_marker("xdist_group") is not None]
    assert grouped, "no test of this run is grouped: tests/conftest.py lost the xdist_group marks"
    lost = [item.nodeid for item in grouped if "@" not in item.nodeid.rpartition("]")[2].rpartition("::")[2]]
    assert not lost, (
        f"{len(lost)} grouped tests reach xdist without their group (e.g. {lost[0]}): the conftest hook that "
        "marks them must run first (tryfirst), and pytest must keep xdist's node-id suffix (see pyproject.toml)"
    )


# --- the scan, on code made for it ------------------------------------------------------------------------


def _pure() -> int:
    return sum(range(3))


def _spawns() -> None:
    subprocess.Popen([sys.executable, "-c", "pass"]).wait()


def _calls_a_spawning_helper() -> None:
    _pure()
    _spawns()


def _in_process_broker(tmp_path: Path) -> Any:
    from broker_runtime.server.node.broker import Broker

    return Broker


def _child_broker(tmp_path: Path) -> None:
    from broker_runtime.launch import broker_process

    with broker_process(tmp_path):
        pass


def _runs_a_spark_driver_script() -> None:
    subprocess.run([sys.executable, str(Path(__file__).parent / "connector" / "stream_in_own_spark_app.py")])


def _looks_up_a_peer() -> None:
    import shutil

    subprocess.run([shutil.which("kcat") or "kcat", "-V"])


def _imports_a_spawning_helper_locally() -> None:
    from tests.test_tiers import _spawns

    _spawns()


@pytest.mark.parametrize(
    ("function", "tier"),
    [
        (_pure, "unit"),
        (_spawns, "process"),
        (_calls_a_spawning_helper, "process"),
        (_in_process_broker, "broker"),
        (_child_broker, "process"),
        (_runs_a_spark_driver_script, "spark_app"),
        (_looks_up_a_peer, "peers"),
        (_imports_a_spawning_helper_locally, "process"),
        (lambda: _spawns(), "process"),
    ],
)
def test_the_scan_finds_what_a_function_starts(function: Any, tier: str) -> None:
    assert tiers.Scanner().tier_of(function) == tier


def test_fixtures_count_by_their_own_definition(request: pytest.FixtureRequest) -> None:
    """The root ``broker`` fixture starts an in-process broker, the connector tests' ``broker`` of the same name
    a child process: each test is tiered by the definition it really gets."""
    by_module = {}
    for item in request.session.items:
        if "broker" in getattr(item, "fixturenames", ()):
            by_module.setdefault(item.nodeid.split("::")[0], set()).update(
                mark.name for mark in item.iter_markers() if mark.name in tiers.TIERS
            )
    if "tests/server/test_produce_path.py" in by_module:
        assert by_module["tests/server/test_produce_path.py"] == {"broker"}
    if "tests/tools/test_dump_log.py" in by_module:
        assert "broker" not in by_module["tests/tools/test_dump_log.py"]


def test_the_guard_records_a_child_process_and_a_socket_of_a_unit_test() -> None:
    """The runtime check behind the scan: what a ``unit`` test starts beyond its tier is recorded (the root
    conftest fails the test with it). This test itself is ``process``: it starts a child."""
    import socket

    guard = tiers.Guard()  # an audit hook stays for the process; idle while its tier is None
    guard.tier = "unit"
    try:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
        with socket.socket(socket.AF_UNIX) as unix:
            unix.close()
    finally:
        guard.tier = None
    assert len(guard.found) == 2, guard.found
    assert "child process" in guard.found[0] and "bind" in guard.found[1]


@pytest.mark.tier_floor("broker")
def test_the_guard_leaves_threads_of_earlier_tests_alone() -> None:
    """A thread already running when the test began (an earlier test's client still closing) binding a socket is
    not the test's doing; a thread the test starts is (seen once as a unit test failed for an earlier thread's
    connect)."""
    import socket
    import threading

    def bind() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))

    guard = tiers.Guard()
    go = threading.Event()
    earlier = threading.Thread(target=lambda: (go.wait(10), bind()))
    earlier.start()
    guard.begin("unit")
    try:
        go.set()
        earlier.join(10)
        mine = threading.Thread(target=bind)
        mine.start()
        mine.join(10)
    finally:
        guard.tier = None
    assert len(guard.found) == 1 and "bind" in guard.found[0], guard.found
