"""The suite's tiers: what a test starts decides where it runs, found from its code and its fixtures, never from
a hand list.

Tiers, lightest first (a test gets the heaviest it needs; ``pytest -m TIER`` runs one):

==========  =========================================================================================
unit        no sockets, no child processes: the code under test called in this process
broker      in-process brokers (``Broker(...).start()``, their event loop in a thread) and loopback sockets
process     child processes: brokers and clusters in processes, the CLI as a subprocess, signals
spark       the suite's shared Spark session (the ``spark`` fixture: one JVM per pytest process)
spark_app   a Spark driver of its own (a Python script that builds a ``SparkSession``, run as a child)
peers       external programs that are not Python: kcat, node/kafkajs, Go or Java tools (Apache Kafka), chromium
==========  =========================================================================================

How a tier is found (:func:`tier_of_item`): the code of the test function and of every fixture it uses (each
fixture's own function, resolved through pytest's fixture definitions, so a module's ``broker`` overriding the
root one counts as what it is) is scanned for what it names: :data:`STARTERS` (``broker_process``, ``Popen``,
``SparkSession``, ...), string constants naming external programs (:data:`PEER_PROGRAMS`) or a ``*.py`` script
that builds a ``SparkSession``. The scan follows every function or class of the test suite and of ``jobs``
that the code calls (a helper that spawns a process makes its callers ``process``), and nested functions.
A test module can raise the floor of all its tests with ``PYLOG_TIER = "process"``, for what no scan can see
(e.g. a dispatch by name); a test can do so with ``@pytest.mark.tier_floor("spark")``.

The runtime check (:class:`Guard`, installed by the root conftest) makes a wrong answer loud: an audit hook
fails a ``unit`` test that opens an Internet socket and a ``unit`` or ``broker`` test that starts a child
process, so the fast command (``unit`` and ``broker``) never silently runs a process test, and a new helper
the scan does not know is found on its first run.

Threading: the scan runs at collection in the main thread; the audit hook runs in every thread and only
appends to a list.
"""

from __future__ import annotations

import dis
import functools
import importlib
import inspect
import re
import socket
import sys
import threading
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "broker", "process", "spark", "spark_app", "peers")
RANK = {name: rank for rank, name in enumerate(TIERS)}
#: The tiers of ``bash jobs/dev.sh test fast``.
FAST_TIERS = ("unit", "broker")

#: Names (globals, attributes, imported names) whose use starts something, and the tier that needs.
STARTERS: dict[str, str] = {
    # in-process brokers and loopback sockets
    "Broker": "broker",
    "socket": "broker",
    "create_connection": "broker",
    "start_server": "broker",
    "open_connection": "broker",
    "KafkaClient": "broker",
    "Producer": "broker",
    "Consumer": "broker",
    "AdminClient": "broker",
    "KafkaProducer": "broker",
    "KafkaConsumer": "broker",
    "KafkaAdminClient": "broker",
    "AIOKafkaProducer": "broker",
    "AIOKafkaConsumer": "broker",
    "IdentityProvider": "broker",  # tests/support/oauth.py: an HTTP server on loopback
    # child processes and signals
    "broker_process": "process",
    "cluster_process": "process",
    "BrokerCluster": "process",
    "ensure_embedded_broker": "process",
    "Popen": "process",
    "check_output": "process",
    "check_call": "process",
    "fork": "process",
    "SIGKILL": "process",
    "SIGSTOP": "process",
    "SIGTERM": "process",
    "check_worker_python": "process",  # spark_compat: runs the worker interpreter to look for pylog's modules
    # the shared Spark session
    "SparkSession": "spark",
    # selenium's webdriver.Chrome: chromedriver and a headless chromium (the console's browser tests)
    "Chrome": "peers",
}
#: ``subprocess.run``: both names in one code object.
SUBPROCESS_RUN = ("subprocess", "run")
#: argv[0] of programs that are not Python: a string constant of a code object that also looks the program up
#: (``shutil.which``), as every fixture providing such a program does ("node" alone is also a pylog-broker command).
PEER_PROGRAMS = {
    "kcat",
    "node",
    "npm",
    "java",
    "go",
    "kafka-server-start.sh",
    "kafka-storage.sh",
    "chromium",  # the console's browser tests (and its chromedriver)
    "chromedriver",
}
_SCRIPT = re.compile(r"[\w.-]+\.py$")
_ROOT = Path(__file__).resolve().parents[2]
_FOLLOWED = ("tests", "jobs")


def heavier(a: str, b: str) -> str:
    return a if RANK[a] >= RANK[b] else b


@functools.cache
def _script_is_spark_driver(path: Path) -> bool:
    try:
        text = path.read_text()
    except OSError:
        return False
    return "SparkSession" in text


@functools.lru_cache(maxsize=1)
def _scripts_by_name() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for top in _FOLLOWED:
        for path in (_ROOT / top).rglob("*.py"):
            found.setdefault(path.name, []).append(path)
    return found


def _script_tier(name: str, module_dir: Path | None) -> str:
    """``spark_app`` when ``name`` is a Python script (a path, beside the code, or of that name in the test suite
    or ``jobs``) that builds a SparkSession."""
    candidates = [Path(name)]
    if module_dir is not None:
        candidates.append(module_dir / Path(name).name)
    candidates += _scripts_by_name().get(Path(name).name, [])
    for path in candidates:
        if path.suffix == ".py" and path.is_file() and _script_is_spark_driver(path.resolve()):
            return "spark_app"
    return "unit"


def _followed(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in _FOLLOWED


class Scanner:
    """Finds the tier a callable needs by scanning its code and what it calls (memoized per object)."""

    def __init__(self) -> None:
        self._memo: dict[int, str] = {}
        self._active: set[int] = set()

    def tier_of(self, obj: Any) -> str:
        obj = inspect.unwrap(obj) if callable(obj) else obj
        key = id(obj)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:  # recursion: the outer scan decides
            return "unit"
        self._active.add(key)
        try:
            found = self._scan_object(obj)
        finally:
            self._active.discard(key)
        self._memo[key] = found
        return found

    def _scan_object(self, obj: Any) -> str:
        if isinstance(obj, type):
            found = "unit"
            for value in vars(obj).values():
                value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                if isinstance(value, types.FunctionType):
                    found = heavier(found, self.tier_of(value))
            return found
        if isinstance(obj, functools.partial):
            return self.tier_of(obj.func)
        function = getattr(obj, "__func__", obj)
        code = getattr(function, "__code__", None)
        if code is None:
            return "unit"
        module_file = getattr(sys.modules.get(function.__module__), "__file__", None)
        module_dir = Path(module_file).parent if module_file else None
        return self._scan_code(code, getattr(function, "__globals__", {}), module_dir)

    def _scan_code(self, code: types.CodeType, globals_: dict[str, Any], module_dir: Path | None) -> str:
        found = "unit"
        names = set(code.co_names)
        for name in names:
            if name in STARTERS:
                found = heavier(found, STARTERS[name])
        if all(name in names for name in SUBPROCESS_RUN):
            found = heavier(found, "process")
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found = heavier(found, self._scan_code(const, globals_, module_dir))
            elif isinstance(const, str):
                if const in PEER_PROGRAMS and "which" in names:
                    found = heavier(found, "peers")
                found = heavier(found, self._string_tier(const, module_dir))
        for value in [globals_.get(name) for name in names] + self._imported_here(code):
            if value is None:
                continue
            if isinstance(value, (str, Path)):
                found = heavier(found, self._string_tier(str(value), module_dir))
            elif isinstance(value, types.ModuleType):
                continue
            elif _followed(value) and (callable(value) or isinstance(value, type)):
                found = heavier(found, self.tier_of(value))
        return found

    @staticmethod
    def _imported_here(code: types.CodeType) -> list[Any]:
        """What ``from tests.x import y`` / ``from jobs.x import y`` inside the function brings in."""
        found: list[Any] = []
        # An imported module's name is one of the code's names: without one of ours there is nothing to find,
        # and the disassembly (most of the scan's time at collection) is skipped.
        if not any(name.split(".")[0] in _FOLLOWED for name in code.co_names):
            return found
        module = ""
        for instruction in dis.get_instructions(code):
            if instruction.opname == "IMPORT_NAME":
                module = str(instruction.argval)
            elif instruction.opname == "IMPORT_FROM" and module.split(".")[0] in _FOLLOWED:
                try:
                    found.append(getattr(importlib.import_module(module), str(instruction.argval)))
                except (ImportError, AttributeError):
                    continue
        return found

    @staticmethod
    def _string_tier(text: str, module_dir: Path | None) -> str:
        if _SCRIPT.search(text):
            return _script_tier(text, module_dir)
        return "unit"


def _fixture_functions(item: pytest.Item) -> Iterable[Any]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for definition in info.name2fixturedefs.get(name, ()):
            yield name, definition


def tier_of_item(item: pytest.Item, scanner: Scanner) -> str:
    """The heaviest tier the test's own code, its fixtures, its module's floor and its marks need."""
    found = "unit"
    function = getattr(item, "function", None)
    if function is not None:
        found = heavier(found, scanner.tier_of(function))
    for _name, definition in _fixture_functions(item):
        found = heavier(found, scanner.tier_of(definition.func))
    if uses_spark_session(item):
        found = heavier(found, "spark")
    module = getattr(item, "module", None)
    floor = getattr(module, "PYLOG_TIER", None)
    if floor is not None:
        found = heavier(found, floor)
    for mark in item.iter_markers("tier_floor"):
        found = heavier(found, mark.args[0])
    return found


def uses_spark_session(item: pytest.Item) -> bool:
    """Whether the test gets the ``spark`` fixture: as an argument, or by ``request.getfixturevalue("spark")``."""
    if "spark" in getattr(item, "fixturenames", ()):
        return True
    function = getattr(item, "function", None)
    code = getattr(inspect.unwrap(function), "__code__", None) if function is not None else None
    return code is not None and "getfixturevalue" in code.co_names and "spark" in code.co_consts


def shared_start_scope(item: pytest.Item, scanner: Scanner) -> str | None:
    """The node id of the module whose fixture the test shares with its neighbours and which starts something
    (a module- or class-scoped broker or cluster): its tests run on one xdist worker, so it starts once."""
    for _name, definition in _fixture_functions(item):
        if definition.scope in ("module", "class", "package") and scanner.tier_of(definition.func) != "unit":
            return item.nodeid.split("::")[0]
    return None


def xdist_groups(items: list[pytest.Item], scanner: Scanner) -> dict[str, str]:
    """node id -> xdist group, for ``--dist loadgroup``: the tests of a module that use the shared Spark session,
    or share a module fixture that starts something, form one group named after the module, so the module's
    fixture starts once and its tests keep their order on one worker. Each worker starts at most one Spark
    session (the fixture is per process) whatever modules it gets, and the scheduler hands whole modules to
    whichever worker is free, which balances them better than groups fixed in advance. Other tests are free."""
    groups: dict[str, str] = {}
    for item in items:
        if uses_spark_session(item) or shared_start_scope(item, scanner) is not None:
            groups[item.nodeid] = item.nodeid.split("::")[0]
    return groups


class Guard:
    """An audit hook that records what the running test starts beyond its tier (see the module docstring).

    What threads that were already running when the test began do is not the test's (a client or broker thread
    of an earlier test of the same worker still closing its sockets): :meth:`begin` notes them."""

    def __init__(self) -> None:
        self.tier: str | None = None
        self.found: list[str] = []
        self.earlier: frozenset[threading.Thread] = frozenset()
        sys.addaudithook(self._hook)

    def begin(self, tier: str | None) -> None:
        """Watch for a test of ``tier`` from now on, with nothing found yet (set ``tier`` to None to stop)."""
        self.found.clear()
        me = threading.current_thread()
        # The threads themselves, not their idents: the system reuses those for threads started later.
        self.earlier = frozenset(t for t in threading.enumerate() if t is not me)
        self.tier = tier

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        tier = self.tier
        if tier is None or tier not in FAST_TIERS or threading.current_thread() in self.earlier:
            return
        if event == "subprocess.Popen":
            self.found.append(f"started a child process {args[1]!r} (needs tier 'process')")
        elif tier == "unit" and event in ("socket.connect", "socket.bind"):
            sock = args[0]
            if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
                self.found.append(f"{event.split('.')[1]} {args[1]!r} (needs tier 'broker')")
