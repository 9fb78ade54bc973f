"""The transactions tool: interrupted commits of transactional batch writes, listed and resolved.

Runs on: any machine (tool).

Any machine that can read the commit-intent directory and reach the brokers; never inside a Spark job.

Usage::

    python -m spark_kafka_log.transactions list DIR ...
    python -m spark_kafka_log.transactions resolve --commit|--abort [--bootstrap-servers H:P] PATH ...

The same from Python: :func:`resolve` and :func:`pending_intents`. The intent files, what resolving does and why
(EndTxn on the tasks' behalf) are :mod:`spark_kafka_log.exactly_once.batch_commit`; this module is the tool's
command line over it, kept at the package's top as the public name the README shows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker_runtime.errors import PylogError
from spark_kafka_log.exactly_once.batch_commit import pending_intents, read_intent, resolve

__all__ = ["main", "pending_intents", "read_intent", "resolve"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_kafka_log.transactions {list,resolve} ...``; exit status 0 ok, 1 failed, 2 usage."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_kafka_log.transactions",
        description="Interrupted commits of transactional pylog batch writes (commit-intent files).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list the intent files of interrupted commits")
    ls.add_argument(
        "dirs", nargs="+", help="pylog.transactionStateDir of the writes (default <dataDir>/transactions)"
    )
    rs = sub.add_parser("resolve", help="commit or abort the transactions of interrupted commits")
    what = rs.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--commit", action="store_true", help="finish the commit (EndTxn commit to every transaction)"
    )
    what.add_argument("--abort", action="store_true", help="abort every transaction still open")
    rs.add_argument("--bootstrap-servers", help="brokers to use instead of the ones the intent names")
    rs.add_argument("paths", nargs="+", help="intent files, or directories (every intent file in them)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for d in args.dirs:
                for f in pending_intents(d):
                    intent = read_intent(f)
                    print(f"{f}: write {intent.write_id}, {len(intent.transactions)} transaction(s)")
            return 0
        done = resolve(args.paths, commit=args.commit, bootstrap_servers=args.bootstrap_servers)
    except PylogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verb = "committed" if args.commit else "aborted"
    print(f"{verb} {len(done)} write(s)" + (f": {', '.join(done)}" if done else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
