"""Entry point: ``python -m jobs.bench [--quick] [SECTION ...]``.

A full run prints each figure (a median of repeated runs with its spread, ``median (min-max)``) and, where
there is a target, whether it is met. A quick run only checks that the sections run: its figures come from
tiny data and are printed without spread or verdict.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time

QUICK_NOTE = "quick mode: tiny data, the figures below are not measurements (no targets judged)"
SECTIONS = [
    "murmur2",
    "records",
    "storage",
    "compaction",
    "broker",
    "egress",
    "security",
    "replication",
    "failover",
    "transactions",
    "groups",
    "console",
    "quotas",
    "fetchsessions",
    "writer",
    "reader",
    "sink",
    "stream",
    "validation",
    "anchors",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bench", description=__doc__)
    parser.add_argument("sections", nargs="*", help=f"sections to run (default: all of {SECTIONS})")
    parser.add_argument(
        "--quick", action="store_true", help="tiny data: checks the benchmarks run, not speed"
    )
    args = parser.parse_args(argv)
    chosen = args.sections or SECTIONS
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {SECTIONS}")
    print(
        f"pylog benchmarks {time.strftime('%Y-%m-%d')}  cores={os.cpu_count()}  "
        f"python={platform.python_version()}  quick={args.quick}"
    )
    if args.quick:
        print(QUICK_NOTE)
    failures = 0
    for name in chosen:
        try:
            module = importlib.import_module(f"jobs.bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"jobs.bench.{name}":
                print(f"{name:<10} (section not written yet)")
                continue
            raise
        for result in module.run(args.quick):
            print(result.line(args.quick), flush=True)
            failures += result.met is False
    if not args.quick:
        print(f"targets not met: {failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
