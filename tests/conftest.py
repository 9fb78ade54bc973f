"""Shared fixtures: brokers started on a free port under ``tmp_path`` and always stopped.

* ``broker``: an in-process :class:`~broker_runtime.server.node.broker.Broker` (its event loop in a background
  thread) -- fast, and the test can look at its logs directly;
* ``bootstrap``: that broker's ``"127.0.0.1:PORT"``;
* ``spark``: the ONE local Spark session of the pytest process (each xdist worker that runs Spark tests has
  its own), shared by every test that needs one. ``local[2,2]``: two task threads and up to two attempts per
  task, so the task-retry tests can make Spark retry a task; everything else behaves like ``local[2]``. Spark
  is kept small (2 shuffle partitions, no UI, 1 GiB driver heap);
* ``child_broker``: a broker in a child process via :func:`broker_runtime.launch.broker_process` (the
  console-script code path), yielding its bootstrap address.

Every collected test is marked with its tier (:mod:`tests.support.tiers`: unit, broker, process, spark,
spark_app, peers, found from what its code and fixtures start) and, for pytest-xdist's ``--dist loadgroup``,
with the group of tests that must share one worker (``tiers.xdist_groups``): a module's tests that use the
shared Spark session or share a module-scoped fixture starting a broker or cluster (it starts once). A guard fails a ``unit`` or ``broker`` test that starts more than its tier.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import spark_cds, tiers
from tests.support.brokers import start_broker, start_node_brokers

# The Apache Kafka peer's fixtures (apache_kafka, apache_kafka_cluster): tests/support/apache_kafka/; the
# compatibility matrix's marks: tests/support/compat.py; the time budget: tests/support/suite_time.py, schedule.py.
pytest_plugins = [
    "tests.support.apache_kafka.fixtures",
    "tests.support.compat",
    "tests.support.suite_time",
    "tests.support.schedule",  # under --dist loadgroup: the longest work units first (after -m/-k deselection)
]

# Every Spark JVM the suite starts (its Spark sessions and the Spark drivers of their own that crash tests start
# and SIGKILL) lives for seconds to minutes on 2 cores: the client compiler alone and the serial collector, and the
# class-data sharing archive of tests/support/spark_cds.py once it exists, start it sooner. spark-submit adds
# SPARK_SUBMIT_OPTS to the driver JVM's options (drivers of their own inherit it); the benchmark suite does not
# set it. Set by the user, it is left alone.
spark_cds.configure_environment()


# The names before the move to tests.support.brokers, for test modules written before it.
_start_broker = start_broker
_start_node_brokers = start_node_brokers


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    """Override in a test module to configure the ``broker`` fixture."""
    return {}


@pytest.fixture
def broker(tmp_path: Path, broker_overrides: dict[str, str]) -> Iterator[Any]:
    instance = start_broker(tmp_path, broker_overrides)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap)


@pytest.fixture
def child_broker(tmp_path: Path, broker_overrides: dict[str, str]) -> Iterator[str]:
    from broker_runtime.launch import broker_process

    with broker_process(tmp_path / "child", overrides=broker_overrides) as address:
        yield address


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Writes without pylog.dataDir keep their small state files here, not in the working directory.
    os.environ.setdefault("PYLOG_DATA_DIR", str(tmp_path_factory.mktemp("pylog-data")))
    # The session's Python workers inherit the JVM's environment, fixed now: allow the OAuth test endpoints here.
    from broker_runtime.security.oauth_http import ALLOWED_URLS_ENV
    from tests.support.oauth import spark_idp_urls

    os.environ[ALLOWED_URLS_ENV] = ",".join(
        filter(None, [os.environ.get(ALLOWED_URLS_ENV), *spark_idp_urls()])
    )
    if spark_cds.owns_submit_opts() and not spark_cds.jvm_options() and spark_cds.ensure_archive():
        # The first session of the machine dumped the archive: this session and later drivers map it.
        spark_cds.configure_environment()
    from pyspark.sql import SparkSession

    # No conf raises the Python worker's connect-back wait, so none is set here. A streaming read of
    # format("pylog") runs its source in a Python worker that Spark's StreamingPythonRunner starts directly
    # (PythonWorkerFactory.createSimpleWorker, never through the daemon, whatever spark.python.use.daemon says),
    # then waits a fixed 10 s (a literal in Spark 4.3.0) for it to connect back, failing the query with "Python
    # worker failed to connect back." otherwise. spark.python.authenticate.socketTimeout only bounds the
    # authentication that follows the connection. The worker normally connects within half a second (its imports:
    # pyarrow, numpy, pyspark.sql); only a machine loaded far beyond its cores exceeds 10 s, seen once under load 16.
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pylog-connector-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(session)
    yield session
    session.stop()


@pytest.fixture(params=["compiled", "numpy"])
def record_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with each record walk of ``record_codec`` (the C extension, then numpy); the compiled
    run is skipped, with its reason, when the extension is not built (``test_recordwalk`` fails then)."""
    from broker_runtime.protocol.record_codec import walks

    if request.param == "numpy":
        monkeypatch.setattr(walks, "compiled", None)
    elif walks.compiled is None:
        pytest.skip(f"compiled record walk not in use: {walks.record_walk()[1]}")
    return str(request.param)


_SCANNER = tiers.Scanner()
_GUARD: tiers.Guard | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        help="run only the long forms of the chaos, fuzz and soak loops (marked soak; left out otherwise)",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _GUARD
    if _GUARD is None:
        _GUARD = tiers.Guard()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # First: xdist's own hook (on each worker) turns the xdist_group marks made here into the node-id suffix
    # its scheduler groups by; run after it, the marks would come too late.
    # The long forms run in `bash jobs/dev.sh soak` only; each has a bounded form in the default run.
    soak = bool(config.getoption("--soak"))
    kept, dropped = [], []
    for item in items:
        (kept if (item.get_closest_marker("soak") is not None) == soak else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    for item in items:
        tier = tiers.tier_of_item(item, _SCANNER)
        item.add_marker(getattr(pytest.mark, tier))
        item.stash[_TIER] = tier
        item.user_properties.append(
            ("tier", tier)
        )  # JUnit XML carries it: python -m tests.support.tier_report
    groups = tiers.xdist_groups(items, _SCANNER)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))


_TIER = pytest.StashKey[str]()


def _guarded(item: pytest.Item, phase: str) -> Iterator[None]:
    assert _GUARD is not None
    _GUARD.begin(item.stash.get(_TIER, None))
    try:
        yield
    finally:
        _GUARD.tier = None
    if _GUARD.found:
        found, _GUARD.found[:] = list(_GUARD.found), []
        raise AssertionError(
            f"this test is tiered {item.stash[_TIER]!r} but its {phase} {'; '.join(found[:3])}: teach "
            "tests/support/tiers.py what started it (STARTERS), or set PYLOG_TIER in the test module"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """The fixtures a ``unit`` or ``broker`` test sets up start nothing beyond its tier (see ``tiers.Guard``)."""
    yield from _guarded(item, "setup")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The body of a ``unit`` or ``broker`` test starts nothing beyond its tier (see ``tiers.Guard``)."""
    yield from _guarded(item, "body")
