"""The dependency rule of the architecture, checked on the source: each package imports only the layers below it.

protocol <- storage <- replication <- server; purgatory <- replication; client <- protocol only;
spark_kafka_log <- protocol + client (+ storage, read-only, for the direct segment scan; + the embedded
broker start). ``broker_runtime.errors`` is shared by all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = {"broker_runtime.errors", "broker_runtime.fsutil"}

ALLOWED: dict[str, set[str]] = {
    "broker_runtime.protocol": {"broker_runtime.protocol"},
    "broker_runtime.storage": {"broker_runtime.storage", "broker_runtime.protocol"},
    "broker_runtime.purgatory": {"broker_runtime.purgatory"},
    "broker_runtime.replication": {
        "broker_runtime.replication",
        "broker_runtime.storage",
        "broker_runtime.protocol",
        "broker_runtime.purgatory",
    },
    "broker_runtime.client": {"broker_runtime.client", "broker_runtime.protocol"},
    "broker_runtime.launch": {"broker_runtime.launch", "broker_runtime.client", "broker_runtime.protocol"},
    "spark_kafka_log": {
        "spark_kafka_log",
        "broker_runtime.protocol",
        "broker_runtime.client",
        "broker_runtime.storage",  # read-only: the reader's direct segment scan
        "broker_runtime.launch",
    },
}


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] in {"broker_runtime", "spark_kafka_log", "jobs"}}


def _package_files(package: str) -> list[Path]:
    directory = ROOT.joinpath(*package.split("."))
    return sorted(directory.rglob("*.py")) if directory.is_dir() else []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    allowed = ALLOWED[package] | SHARED
    violations = []
    for path in _package_files(package):
        for name in _project_imports(path):
            if not any(name == a or name.startswith(a + ".") for a in allowed):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "dependency rule broken:\n" + "\n".join(violations)


def test_rule_checker_sees_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nfrom broker_runtime.server import x\nimport spark_kafka_log.reader\nfrom . import y\n"
    )
    assert _project_imports(probe) == {"broker_runtime.server", "spark_kafka_log.reader"}
