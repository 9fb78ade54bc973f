"""Regenerate the README's compatibility matrix from a run of the tests that carry ``compat`` marks.

Usage (from the repository root, with the project's virtualenv)::

    python -m tests.support.compat_matrix                # run `pytest -m compat` on 2 workers, then write README.md
    python -m tests.support.compat_matrix --junit FILE   # build it from the JUnit XML of a run already made

The run's JUnit XML carries each test's marks as ``compat`` properties (tests/support/compat.py); a row passes
when every test carrying it passed (a skipped test does not pass). The table is written between the README's
markers even when a row fails, and the exit status is then 1, naming the failed tests. Exit 2: no marked test
in the report, or no markers in the README.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support import compat
from tests.support.apache_kafka import kafka_version

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _module(classname: str) -> str:
    """JUnit's classname (``tests.peers.test_x`` or ``tests.peers.test_x.TestY``) -> ``tests/peers/test_x.py``."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        path = "/".join(parts[:n]) + ".py"
        if (ROOT / path).is_file():
            return path
    return "/".join(parts) + ".py"


def results(junit: Path) -> list[tuple[str, compat.Mark, bool]]:
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = [p.get("value", "") for p in case.iter("property") if p.get("name") == compat.PROPERTY]
        if not props:
            continue
        passed = not any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
        nodeid = f"{_module(case.get('classname', ''))}::{case.get('name', '')}"
        for value in props:
            peer, feature, differs = json.loads(value)
            out.append((nodeid, compat.Mark(peer, feature, differs), passed))
    return out


def write_readme(table: str, readme: Path = README) -> None:
    text = readme.read_text()
    start, end = text.find(compat.BEGIN), text.find(compat.END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme} has no compatibility matrix markers ({compat.BEGIN} ... {compat.END})")
    readme.write_text(text[:start] + table + text[end + len(compat.END) :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--junit", type=Path, help="JUnit XML of a run already made (default: run the tests now)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        junit = args.junit
        if junit is None:
            junit = Path(tmp) / "compat.xml"
            command = [sys.executable, "-m", "pytest", "-m", "compat", "-n", "2", "--dist", "loadgroup"]
            command += ["-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests"]
            subprocess.run(command, cwd=ROOT, check=False)
        found = results(junit)
    if not found:
        print(f"no test with a compat mark in {junit}", file=sys.stderr)
        return 2
    table = compat.rows(found)
    write_readme(compat.render(table, kafka_version()))
    failed = sorted({n for r in table.values() for n in r.failed})
    print(f"README.md: {len(table)} rows from {len({n for n, _, _ in found})} tests", file=sys.stderr)
    for nodeid in failed:
        print(f"did not pass: {nodeid}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
