"""A ``pylog-broker`` command line imports only the tool it names: a tool's clients, numpy and pyarrow cost about
a second of CPU per start, paid by every operator command (and by every tool call of the test suite)."""

from __future__ import annotations

import json
import subprocess
import sys

from broker_runtime.cli import TOOLS, _tools_for, build_parser

HEAVY = ("numpy", "pyarrow", "pandas")


def test_a_command_line_names_the_tools_it_needs() -> None:
    assert _tools_for(["topics", "--list"]) == ("topics",)
    assert _tools_for(["dump-log", "--files", "x.log"]) == ("dump_log",)
    assert _tools_for(["start", "--config", "x"]) == ()
    assert _tools_for(["node", "status"]) == ()
    # Help and typos see every tool (the error lists all the choices); a module name is not a subcommand.
    for argv in ([], ["--help"], ["topicz"], ["dump_log"]):
        assert _tools_for(argv) == TOOLS
    listed = build_parser().format_help()
    assert all(name.replace("_", "-") in listed for name in TOOLS)


def test_a_tool_command_imports_no_other_tool_nor_numpy() -> None:
    script = (
        "import json, sys\n"
        "from broker_runtime.cli import main\n"
        "try:\n"
        "    main(['topics', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('broker_runtime.tools.')"
        f" or m in {HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == ["broker_runtime.tools.common", "broker_runtime.tools.topics"], loaded
