"""The dependency rule of the architecture, checked on the source: each unit imports only the layers below it.

A unit is a package or a top-level module of ``broker_runtime``, the ``spark_kafka_log`` package or ``jobs``::

    protocol <- storage <- (controller, replication, coordinator.group, coordinator.transaction) <- server
    server, tools, console <- cli <- __main__;  tools <- client, protocol, security, storage (read-only: dump-log)
    console <- tools (their arguments, --command-config), client, protocol, security
    coordinator.placement, coordinator.ownership, coordinator.internal_topic <- coordinator.group, coordinator.transaction
    purgatory <- replication;  client <- protocol, security;  launch <- client, protocol
    security <- protocol (TLS, SASL, SCRAM credentials) <- replication, server, client, cli, spark_kafka_log
    spark_kafka_log <- protocol, client, storage (read-only: the direct segment scan), launch, console
    spark_kafka_log: common <- read;  common <- exactly_once <- write <- stream;  the top modules <- all of them
    jobs <- anything

``broker_runtime.errors`` and ``broker_runtime.fsutil`` are shared by all and import nothing of the project;
``broker_runtime.configdef`` (config declarations) is shared by all and imports only ``errors``.
Relative imports are resolved to their absolute module before checking (ruff also bans them: TID252). Every
source file must belong to a unit of this table, so a new package cannot slip in unchecked.

Acyclicity, inside the units too: the import graph of the project's files has no cycle, and neither has the graph
of its packages (a package is the modules directly in one directory; a single-module unit of the table, such as
``broker_runtime.errors`` or ``broker_runtime.cli``, is a node of its own; a subpackage is a package apart from its
parent, so a parent module importing the subpackage while a subpackage module imports a parent module is a
cycle). Every import statement counts, at module level, under ``if TYPE_CHECKING:`` and inside functions: an
import moved into a function or behind TYPE_CHECKING hides a cycle from the interpreter, not from the design (the
two modules still cannot be read, tested or moved apart). ``from package import name`` counts as an import of
``package.name`` when that is a module, else of the package's ``__init__``; importing ``a.b.c`` does not count as
importing ``a.b`` (that ``__init__`` runs, but nothing of it is used by name). Cycles that exist today in other
parts of the tree are listed in :data:`KNOWN_FILE_CYCLES` / :data:`KNOWN_PACKAGE_CYCLES` with their owner; a new
cycle fails, and so does a listed one that is gone (remove its entry then).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("broker_runtime", "spark_kafka_log", "jobs")
SHARED = {"broker_runtime.errors", "broker_runtime.fsutil", "broker_runtime.configdef"}

#: What every unit of the connector may use of the broker's packages.
CONNECTOR_USES = {
    "broker_runtime.security",
    "broker_runtime.protocol",
    "broker_runtime.client",
    "broker_runtime.storage",  # read-only: the reader's direct segment scan
    "broker_runtime.launch",
}

ALLOWED: dict[str, set[str]] = {
    "broker_runtime": set(),  # the package's own __init__
    "broker_runtime.errors": set(),
    "broker_runtime.configdef": {"broker_runtime.errors"},
    "broker_runtime.fsutil": set(),
    "broker_runtime.protocol": set(),
    "broker_runtime.purgatory": set(),
    "broker_runtime.security": {"broker_runtime.protocol"},
    "broker_runtime.storage": {"broker_runtime.protocol"},
    "broker_runtime.replication": {
        "broker_runtime.security",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.controller": {"broker_runtime.storage", "broker_runtime.protocol"},
    "broker_runtime.coordinator": set(),  # the package's own __init__
    "broker_runtime.coordinator.placement": set(),
    "broker_runtime.coordinator.ownership": set(),
    "broker_runtime.coordinator.internal_topic": {"broker_runtime.storage"},
    "broker_runtime.coordinator.transaction": {
        "broker_runtime.coordinator.placement",
        "broker_runtime.coordinator.ownership",
        "broker_runtime.coordinator.internal_topic",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.coordinator.group": {
        "broker_runtime.coordinator.placement",
        "broker_runtime.coordinator.ownership",
        "broker_runtime.coordinator.internal_topic",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.client": {"broker_runtime.protocol", "broker_runtime.security"},
    "broker_runtime.launch": {"broker_runtime.client", "broker_runtime.protocol"},
    "broker_runtime.server": {
        "broker_runtime.security",
        "broker_runtime.controller",
        "broker_runtime.coordinator.group",
        "broker_runtime.coordinator.transaction",
        "broker_runtime.coordinator.internal_topic",
        "broker_runtime.replication",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.tools": {
        "broker_runtime.client",
        "broker_runtime.protocol",
        "broker_runtime.storage",
        "broker_runtime.security",  # the ACL model (acls tool) and client security (--command-config)
    },
    # The web console: the Kafka protocol through the client only (it reads Apache Kafka too).
    "broker_runtime.console": {
        "broker_runtime.tools",
        "broker_runtime.client",
        "broker_runtime.protocol",
        "broker_runtime.security",
    },
    "broker_runtime.cli": {
        "broker_runtime.server",
        "broker_runtime.launch",
        "broker_runtime.tools",
        "broker_runtime.console",
        "broker_runtime.security",
    },
    "broker_runtime.__main__": {"broker_runtime.cli"},
    # the top: register, datasource, the transactions tool (and discovery), start_console (the web console)
    "spark_kafka_log": {*CONNECTOR_USES, "broker_runtime.console"},
    # The connector's packages by role: common <- read; common <- exactly_once <- write <- stream.
    "spark_kafka_log.common": CONNECTOR_USES,
    "spark_kafka_log.read": {"spark_kafka_log.common", *CONNECTOR_USES},
    "spark_kafka_log.exactly_once": {"spark_kafka_log.common", *CONNECTOR_USES},
    "spark_kafka_log.write": {"spark_kafka_log.common", "spark_kafka_log.exactly_once", *CONNECTOR_USES},
    "spark_kafka_log.stream": {
        "spark_kafka_log.common",
        "spark_kafka_log.read",
        "spark_kafka_log.write",
        "spark_kafka_log.exactly_once",
        *CONNECTOR_USES,
    },
    "jobs": {"broker_runtime", "spark_kafka_log"},
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit_of(module: str) -> str | None:
    """The most specific unit of the table holding ``module``."""
    best = None
    for unit in ALLOWED:
        if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best)):
            best = unit
    return best


def _project_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute names of the project modules ``path`` (a file under ``root``) imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
                continue
            base = package.split(".") if package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            found.add(".".join([*base, *([node.module] if node.module else [])]))
    return {name for name in found if name.split(".")[0] in PROJECT}


def _source_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for top in PROJECT for p in (root / top).rglob("*.py"))


def _violations(unit: str, root: Path = ROOT) -> list[str]:
    """The imports of ``unit``'s files under ``root`` that the table does not allow."""
    violations = []
    for path in _source_files(root):
        if _unit_of(_module_name(path, root)) != unit:
            continue
        allowed = ALLOWED[unit] | {unit} | (SHARED if unit not in SHARED else set())
        for name in _project_imports(path, root):
            if not any(name == a or name.startswith(a + ".") for a in allowed):
                violations.append(f"{path.relative_to(root)} imports {name}")
    return violations


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_unit_imports_only_lower_layers(unit: str) -> None:
    violations = _violations(unit)
    assert not violations, "dependency rule broken:\n" + "\n".join(violations)


def test_every_source_file_belongs_to_a_unit() -> None:
    orphans = [str(p.relative_to(ROOT)) for p in _source_files() if _unit_of(_module_name(p)) is None]
    assert not orphans, f"add these to the layering table (and the README's package table): {orphans}"


def test_rule_checker_sees_imports(tmp_path: Path) -> None:
    """On a probe file in a copy of the layout under ``tmp_path`` (nothing is written into the source tree)."""
    probe = tmp_path / "broker_runtime" / "storage" / "_layering_probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "import os\nfrom broker_runtime.server import x\nimport spark_kafka_log.reader\n"
        "from . import segment\nfrom ..protocol import records\n"
    )
    assert _project_imports(probe, tmp_path) == {
        "broker_runtime.server",
        "spark_kafka_log.reader",
        "broker_runtime.storage",
        "broker_runtime.protocol",
    }
    assert _unit_of(_module_name(probe, tmp_path)) == "broker_runtime.storage"


def test_a_lower_layer_importing_a_higher_one_is_caught(tmp_path: Path) -> None:
    """The checker must fail on a real violation, not only pass on clean code (a probe under ``tmp_path``)."""
    probe = tmp_path / "broker_runtime" / "protocol" / "_layering_probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from ..storage import segment\n")
    assert _violations("broker_runtime.protocol", tmp_path) == [
        "broker_runtime/protocol/_layering_probe.py imports broker_runtime.storage"
    ]


# -- acyclicity -----------------------------------------------------------------------------------------------

#: Where the acyclicity check looks (the layering table's tops).
ACYCLIC_TOPS = PROJECT

#: File-level import cycles on main when the check came (issue #32), outside storage/ (whose cycle, partition_log
#: <-> cleaner, is broken). Each entry is one strongly connected component: its modules, sorted. Owners are the
#: round-32 parts of issue #32; the lead removes an entry when its owner's branch is merged.
KNOWN_FILE_CYCLES: dict[tuple[str, ...], str] = {}

#: Package-level import cycles on main when the check came, as :data:`KNOWN_FILE_CYCLES`.
KNOWN_PACKAGE_CYCLES: dict[tuple[str, ...], str] = {}


#: (file graph, package graph): node -> {imported node: "file:line, where" of one import making that edge}.
Graphs = tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_edges(path: Path, modules: set[str], root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(imported project module, where: "module level" / "TYPE_CHECKING" / "function", line) for every import
    statement of ``path``, relative imports resolved, names resolved to the deepest module that exists."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str, int]] = []

    def visit(nodes: Iterable[ast.AST], where: str) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(ast.iter_child_nodes(node), "function")
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.body, "TYPE_CHECKING")
                visit(node.orelse, where)
            elif isinstance(node, ast.Import):
                found.extend((alias.name, where, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".") if node.level else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                origin = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    name = f"{origin}.{alias.name}"
                    found.append((name if name in modules else origin, where, node.lineno))
            else:
                visit(ast.iter_child_nodes(node), where)

    visit(ast.parse(path.read_text(), filename=str(path)).body, "module level")
    edges = []
    for name, where, line in found:
        while name and name not in modules:  # ``import a.b.C`` or a name re-exported by a module
            name = name.rpartition(".")[0]
        if name and name != module:
            edges.append((name, where, line))
    return edges


def _package_of(module: str, path: Path) -> str:
    """The package node of ``module``: its directory's package, or itself for a single-module unit."""
    if module in ALLOWED and path.name != "__init__.py":
        return module
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _cycles(graph: dict[str, dict[str, str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one node (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[tuple[str, ...]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(tuple(sorted(component)))
    return sorted(found)


def _describe(graph: dict[str, dict[str, str]], component: tuple[str, ...]) -> str:
    """One cycle through ``component`` as ``a -> b (why) -> a``, the shortest from its first node."""
    first, members = component[0], set(component)
    paths = {first: [first]}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph.get(node, {})):
            if target == first:
                hops = [*paths[node], first]
                steps = [f"{a} ({graph[a][b]})" for a, b in zip(hops, hops[1:], strict=False)]
                return " -> ".join([*steps, first])
            if target in members and target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return " <-> ".join(component)


def _import_graphs(root: Path = ROOT) -> Graphs:
    """(file graph, package graph): node -> {imported node: "file:line, where" of one import making that edge}."""
    paths = {_module_name(p, root): p for top in ACYCLIC_TOPS for p in sorted((root / top).rglob("*.py"))}
    modules = set(paths)
    files: dict[str, dict[str, str]] = {m: {} for m in modules}
    packages: dict[str, dict[str, str]] = {}
    for module, path in paths.items():
        source = _package_of(module, path)
        packages.setdefault(source, {})
        for target, where, line in _import_edges(path, modules, root):
            why = f"{path.relative_to(root)}:{line}, {where}"
            files[module].setdefault(target, why)
            target_package = _package_of(target, paths[target])
            if target_package != source:
                packages[source].setdefault(target_package, why)
    return files, packages


def _unexpected(
    graph: dict[str, dict[str, str]], known: dict[tuple[str, ...], str]
) -> tuple[list[str], list[str]]:
    """(cycles not in ``known``, described; entries of ``known`` that are no longer cycles)."""
    cycles = _cycles(graph)
    new = [_describe(graph, c) for c in cycles if c not in known]
    gone = [f"{' <-> '.join(c)} (owner: {owner})" for c, owner in known.items() if c not in cycles]
    return new, gone


@pytest.fixture(scope="module")
def graphs() -> Graphs:
    return _import_graphs()


def test_no_import_cycle_between_files(graphs: Graphs) -> None:
    new, _ = _unexpected(graphs[0], KNOWN_FILE_CYCLES)
    assert not new, "import cycles between files (break them; see the module docstring):\n" + "\n".join(new)


def test_no_import_cycle_between_packages(graphs: Graphs) -> None:
    new, _ = _unexpected(graphs[1], KNOWN_PACKAGE_CYCLES)
    assert not new, "import cycles between packages (break them; see the module docstring):\n" + "\n".join(
        new
    )


def test_the_known_cycles_are_still_there(graphs: Graphs) -> None:
    """A listed cycle its owner broke must leave the list, so that it cannot come back unnoticed."""
    gone = _unexpected(graphs[0], KNOWN_FILE_CYCLES)[1] + _unexpected(graphs[1], KNOWN_PACKAGE_CYCLES)[1]
    assert not gone, "these cycles are gone: remove them from KNOWN_*_CYCLES:\n" + "\n".join(gone)


def test_cycles_are_caught_at_module_level_type_checking_and_in_functions(tmp_path: Path) -> None:
    """The checker must fail on real cycles, not only pass on clean code (probes under ``tmp_path``)."""
    storage = tmp_path / "broker_runtime" / "storage"
    server = tmp_path / "broker_runtime" / "server"
    for package in (tmp_path / "broker_runtime", storage, server, server / "handlers"):
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
    (storage / "a.py").write_text("from broker_runtime.storage.b import B\n")
    (storage / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    (storage / "c.py").write_text("import broker_runtime.storage.d\n")
    (storage / "d.py").write_text("def f():\n    from broker_runtime.storage import c\n")
    (server / "x.py").write_text("from broker_runtime.server.handlers import y\n")
    (server / "handlers" / "y.py").write_text("from broker_runtime.server.x import X\n")
    (storage / "e.py").write_text(
        "from broker_runtime.server.handlers.y import Y\n"
    )  # one way only: no cycle
    files, packages = _import_graphs(tmp_path)
    assert _cycles(files) == [
        ("broker_runtime.server.handlers.y", "broker_runtime.server.x"),
        ("broker_runtime.storage.a", "broker_runtime.storage.b"),
        ("broker_runtime.storage.c", "broker_runtime.storage.d"),
    ]
    assert _cycles(packages) == [("broker_runtime.server", "broker_runtime.server.handlers")]
    assert _describe(files, ("broker_runtime.storage.a", "broker_runtime.storage.b")) == (
        "broker_runtime.storage.a (broker_runtime/storage/a.py:1, module level) -> "
        "broker_runtime.storage.b (broker_runtime/storage/b.py:3, TYPE_CHECKING) -> broker_runtime.storage.a"
    )
    new, gone = _unexpected(
        files, {("broker_runtime.storage.a", "broker_runtime.storage.b"): "x", ("p", "q"): "y"}
    )
    assert len(new) == 2 and gone == ["p <-> q (owner: y)"]
