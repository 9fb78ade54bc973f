#!/usr/bin/env bash
# pylog's one entry point for developers and CI.
#
#   bash jobs/dev.sh main  [args]   set up .venv if needed, then run the main job (jobs/main.py)
#   bash jobs/dev.sh test  [args]   set up .venv if needed, then ruff, and the whole pytest suite (every tier,
#                                   3 xdist workers; budget 15 minutes on 2 cores) with mypy beside it
#   bash jobs/dev.sh test fast [args]  the inner loop: pytest of the unit and broker tiers only, 3 workers, no
#                                   ruff/mypy (budget 3 minutes)
#   bash jobs/dev.sh soak  [args]   the long forms of the chaos, fuzz and soak loops (tests marked soak)
#   bash jobs/dev.sh bench [args]   set up .venv if needed, then the benchmark suite (python -m jobs.bench)
#   bash jobs/dev.sh compat [args]  run the tests with compat marks, regenerate the README's compatibility matrix
#   bash jobs/dev.sh console-screenshots  the README's screenshots of the web console (jobs/console/screenshots/)
#   bash jobs/dev.sh setup          only create / refresh .venv
#
# Idempotent: the virtualenv is (re)installed only when pyproject.toml or a C source of the compiled record walk
# changed since the last install (an editable install builds the extension in place).
# PYLOG_VENV overrides the virtualenv location (default .venv in the project root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${PYLOG_VENV:-.venv}"

die() { echo "error: $*" >&2; exit 1; }

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

check_java() {
    local java="java" version major
    [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && java="$JAVA_HOME/bin/java"
    if ! command -v "$java" >/dev/null 2>&1; then
        die "PySpark needs Java 17 or newer and no 'java' was found.
  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless
  macOS:         brew install openjdk@17
  or set JAVA_HOME to a JDK 17+ installation."
    fi
    version=$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
    major=${version%%.*}
    [ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
    if ! [ "$major" -ge 17 ] 2>/dev/null; then
        die "PySpark needs Java 17 or newer; found Java '$version' at $(command -v "$java").
  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless (then select it with update-alternatives)
  or set JAVA_HOME to a JDK 17+ installation."
    fi
}

setup() {
    local python stamp want
    python=$(find_python) || die "Python 3.11 or newer is required (none found on PATH)."
    if [ ! -x "$VENV/bin/python" ]; then
        echo "creating virtualenv $VENV with $python" >&2
        "$python" -m venv "$VENV"
    fi
    stamp="$VENV/.pylog-installed"
    want=$(cat pyproject.toml broker_runtime/protocol/record_codec/*.c | sha256sum | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "installing pylog and its test dependencies into $VENV (first run takes a few minutes)" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
        "$VENV/bin/python" -m pip install --quiet -e '.[test]' >&2
        discovery_pth
        echo "$want" > "$stamp"
    fi
}

# An editable install serves pylog's packages through an import hook that PySpark's data source discovery
# (a scan of sys.path for pyspark_* modules) cannot see: one .pth line puts the directory holding pyspark_pylog
# on sys.path, so format("pylog") works without register() in the development install too.
discovery_pth() {
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n' "$PWD/spark_kafka_log/discovery" > "$site/pylog-discovery.pth"
}

# The suite runs on 3 xdist workers, on 2 cores too: its tests wait (for JVMs, brokers, timeouts) more than they
# compute (with 2 workers the cores were ~36% busy; 3 took the suite from 14 min 17 s to 11 min 56 s). Tests that
# must share one worker (a module's Spark or shared-broker tests) carry an xdist_group mark (tests/conftest.py),
# which --dist loadgroup honours; the conftest orders the work units longest first (tests/support/schedule.py),
# an order xdist keeps with --no-loadscope-reorder (by default it sorts them by their number of tests, which left
# single long tests for the end). PYLOG_TEST_WORKERS overrides the count (0: no xdist, one process). pytest's
# exit 5 (no test selected, e.g. -m of an empty tier) is no failure of the run.
pytest_run() {
    local workers="${PYLOG_TEST_WORKERS:-3}" status=0
    local parallel=()
    compile_bytecode
    [ "$workers" != "0" ] && parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
    "$VENV/bin/python" -m pytest "${parallel[@]}" "$@" || status=$?
    if [ "$status" -eq 5 ]; then
        echo "no tests selected (pytest exit 5): nothing failed" >&2
        return 0
    fi
    return "$status"
}

# The suite starts hundreds of Python processes (brokers and clusters in child processes, the CLI, Spark's Python
# workers, drivers of their own). Each imports pylog from this tree: without its compiled bytecode (a clean clone,
# or PYTHONDONTWRITEBYTECODE set, which stops imports writing it) each compiles it from source again, 0.3 s of CPU
# a process (measured: test_start_errors took 13 s of CPU without, 9 s with). compileall writes it once, into the
# __pycache__ directories git ignores; imports read it whatever PYTHONDONTWRITEBYTECODE says.
compile_bytecode() {
    "$VENV/bin/python" -m compileall -q -j 0 broker_runtime spark_kafka_log jobs tests
}

run_tests() {
    if [ "${1:-}" = "fast" ]; then
        shift
        echo "== pytest: unit and broker tiers"
        pytest_run -m "unit or broker" "$@"
        return
    fi
    echo "== ruff check" && "$VENV/bin/ruff" check .
    echo "== ruff format --check" && "$VENV/bin/ruff" format --check .
    # mypy (15-30 s of one core on a clean clone) runs beside pytest, whose workers mostly wait on sockets and
    # JVMs; its report comes after pytest's, and either one failing fails the command.
    local mypy_log mypy_pid mypy_status=0 status=0
    mypy_log=$(mktemp)
    "$VENV/bin/mypy" > "$mypy_log" 2>&1 &
    mypy_pid=$!
    echo "== pytest: every tier (mypy runs beside it)"
    pytest_run "$@" || status=$?
    wait "$mypy_pid" || mypy_status=$?
    echo "== mypy" && cat "$mypy_log" && rm -f "$mypy_log"
    [ "$mypy_status" -eq 0 ] || die "mypy found errors (above)"
    return "$status"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
    setup) setup ;;
    main) check_java; setup; exec "$VENV/bin/python" -m jobs.main "$@" ;;
    test) check_java; setup; run_tests "$@" ;;
    soak) check_java; setup; echo "== pytest: the soak forms"; pytest_run --soak "$@" ;;
    bench) check_java; setup; exec "$VENV/bin/python" -m jobs.bench "$@" ;;
    compat) check_java; setup; exec "$VENV/bin/python" -m tests.support.compat_matrix "$@" ;;
    console-screenshots) setup; exec "$VENV/bin/python" -m jobs.console.screenshots "$@" ;;
    *) die "usage: bash jobs/dev.sh {main|test [fast]|soak|bench|compat|console-screenshots|setup} [args...]" ;;
esac
