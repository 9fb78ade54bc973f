"""The dependency rule of the architecture, checked on the source: each unit imports only the layers below it.

A unit is a package or a top-level module of ``broker_runtime``, the ``spark_kafka_log`` package or ``jobs``::

    protocol <- storage <- (controller, replication, coordinator.group, coordinator.transaction) <- server
    server, tools <- cli <- __main__;  tools <- client, protocol, security, storage (read-only: dump-log);  coordinator.placement <- coordinator.group, coordinator.transaction
    purgatory <- replication;  client <- protocol, security;  launch <- client, protocol
    security <- protocol (TLS, SASL, SCRAM credentials) <- replication, server, client, cli, spark_kafka_log
    spark_kafka_log <- protocol, client, storage (read-only: the direct segment scan), launch
    spark_kafka_log: common <- read;  common <- exactly_once <- write <- stream;  the top modules <- all of them
    jobs <- anything

``broker_runtime.errors`` and ``broker_runtime.fsutil`` are shared by all and import nothing of the project.
Relative imports are resolved to their absolute module before checking (ruff also bans them: TID252). Every
source file must belong to a unit of this table, so a new package cannot slip in unchecked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("broker_runtime", "spark_kafka_log", "jobs")
SHARED = {"broker_runtime.errors", "broker_runtime.fsutil"}

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
    "broker_runtime.coordinator.transaction": {
        "broker_runtime.coordinator.placement",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.coordinator.group": {
        "broker_runtime.coordinator.placement",
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
    "broker_runtime.cli": {
        "broker_runtime.server",
        "broker_runtime.launch",
        "broker_runtime.tools",
        "broker_runtime.security",
    },
    "broker_runtime.__main__": {"broker_runtime.cli"},
    "spark_kafka_log": CONNECTOR_USES,  # the top: register, datasource, the transactions tool (and discovery)
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
