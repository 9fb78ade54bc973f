"""Every code block of README.md runs here, in document order, and what it prints is checked.

How blocks are found: the fenced blocks of README.md. ```` ```python ```` and ```` ```bash ```` blocks are code;
```` ```text ```` blocks are diagrams or sample output and are not run; any other fence fails the test. A code
block is skipped only when the HTML comment just before its fence (blank lines aside; it may span lines) is
``<!-- not run by tests: REASON -->`` with a reason; every other code block runs, so an example added to the
README without a mark is an example the suite runs.

How they run: all of them in one temporary working directory (with a copy of ``conf/``) and with
``PYLOG_DATA_DIR`` set to its ``pylog-data`` (also for the Python workers of the suite's Spark session, which was
started elsewhere), so the zero-configuration examples start their embedded broker there and never touch the
repository; it is stopped at the end (``stop_embedded_broker``, what ``pylog-broker stop`` runs).

* Python blocks run in one namespace (later examples use what earlier ones defined) that starts with ``spark``,
  the suite's Spark session. A line ``print(...)  # TEXT`` says what it prints: the block's output must be
  exactly those lines in order, ``...`` in TEXT standing for any text (addresses, pids).
* Bash blocks run line by line (``# comments`` dropped) with this interpreter's ``bin`` first on ``PATH`` and
  ``python`` meaning this interpreter; each line must exit 0. ``pylog-broker start`` / ``cluster`` (and
  ``python -m broker_runtime start``) run in the foreground until stopped, so they run bounded: started, awaited
  until they print ``listening on`` (``bootstrap servers:`` for a cluster), then sent SIGINT, and must exit 0.
  A line ending in ``< FILE`` reads that file of the working directory as its stdin (the only shell syntax
  understood; other lines get an empty stdin).

Substitutions (the only places where a block does not run exactly as written):

* ``host1:9092,host2:9092``, the README's remote cluster, becomes the address of a real broker that this test
  runs in a child process (``broker_process``);
* a ``start`` or ``cluster`` line that does not set ``listeners`` gets ``--override
  listeners=PLAINTEXT://127.0.0.1:0``, because port 9092 of ``conf/broker.properties`` may be taken.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import connector_map

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REMOTE_SERVERS = "host1:9092,host2:9092"
NOT_RUN = re.compile(r"^<!--\s*not run by tests:\s*(?P<reason>.*?)\s*-->$")
CHECKED_PRINT = re.compile(r"^\s*print\(.*\)\s+#\s(?P<expected>.*)$")
CODE = ("python", "bash")
PROSE = ("text",)
READY = {"start": "listening on ", "cluster": "bootstrap servers:"}


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip_reason: str | None

    @property
    def where(self) -> str:
        return f"README.md:{self.line} ({self.lang})"


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, with the not-run reason of the comment just before each."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, fence.group(2).strip()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence.group(1):
            j += 1
        assert j < len(lines), f"README.md:{start + 1}: fence never closed"
        end = start - 1
        while end >= 0 and not lines[end].strip():
            end -= 1
        reason = None
        if end >= 0 and lines[end].rstrip().endswith("-->"):
            first = end
            while first > 0 and "<!--" not in lines[first]:
                first -= 1
            comment = " ".join(line.strip() for line in lines[first : end + 1])
            mark = NOT_RUN.match(comment)
            reason = mark.group("reason") if mark else None
        blocks.append(Block(start + 1, lang, "\n".join(lines[start + 1 : j]) + "\n", reason))
        i = j + 1
    return blocks


def expected_output(code: str) -> list[str]:
    return [m.group("expected") for line in code.splitlines() if (m := CHECKED_PRINT.match(line))]


def matches(expected: str, actual: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in expected.split("...")), actual) is not None


def test_blocks_are_code_or_marked() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert blocks, "README.md has no code blocks"
    for block in blocks:
        assert block.lang in CODE + PROSE, f"{block.where}: fence language must be one of {CODE + PROSE}"
        if block.skip_reason is not None:
            assert block.skip_reason, f"{block.where}: a not-run mark needs a reason"
            assert block.lang in CODE, f"{block.where}: only code blocks take a not-run mark"


def test_the_two_top_commands_come_first_and_exist() -> None:
    first = readme_blocks(README.read_text(encoding="utf-8"))[0]
    commands = [line.split("#", 1)[0].split() for line in first.code.splitlines()]
    assert commands == [["bash", "jobs/dev.sh", "main"], ["bash", "jobs/dev.sh", "test"]]
    dev_sh = (ROOT / "jobs" / "dev.sh").read_text(encoding="utf-8")
    assert "    main) " in dev_sh and "    test) " in dev_sh


def readme_headings(text: str) -> list[tuple[int, str]]:
    """``(level, title)`` of every heading outside fenced blocks (a ``#`` comment in a code block is no heading)."""
    fenced = {n for b in readme_blocks(text) for n in range(b.line, b.line + b.code.count("\n") + 1)}
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        heading = re.match(r"^(#{1,6}) (.+)$", line)
        if heading and n not in fenced:
            found.append((len(heading.group(1)), heading.group(2).strip()))
    return found


def anchor(title: str) -> str:
    """The anchor a Markdown renderer (GitHub's rule) gives a heading: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def test_links_inside_the_readme_reach_a_heading() -> None:
    text = README.read_text(encoding="utf-8")
    anchors = [anchor(title) for _, title in readme_headings(text)]
    twice = sorted({a for a in anchors if anchors.count(a) > 1})
    assert not twice, f"headings with the same anchor (a link reaches only the first): {twice}"
    broken = sorted(set(re.findall(r"\]\(#([^)]+)\)", text)) - set(anchors))
    assert not broken, f"README links to headings that do not exist: {broken}"


def test_contents_list_every_part_and_section() -> None:
    """The table of contents at the top names each part (``#``) and each of its sections (``##``), in order."""
    text = README.read_text(encoding="utf-8")
    contents = text.split("## Contents", 1)[1].split("\n# ", 1)[0]
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    headings = readme_headings(text)
    start = next(i for i, (level, _) in enumerate(headings) if level == 1 and i > 0)
    wanted = [anchor(title) for level, title in headings[start:] if level <= 2]
    assert [a for a in listed if a in wanted] == wanted, (
        f"the README's contents must list, in order: {wanted}"
    )


def test_harness_parses_marks_and_checks() -> None:
    text = (
        "```python\nprint(1)  # 1\n```\n\n<!-- not run by tests: it\nrecurses -->\n\n```bash\nbash x\n```\n"
        "```text\ndiagram\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.line, b.lang, b.skip_reason) for b in blocks] == [
        (1, "python", None),
        (8, "bash", "it recurses"),
        (11, "text", None),
    ]
    assert expected_output(blocks[0].code) == ["1"]
    assert matches("127.0.0.1:...", "127.0.0.1:4242") and not matches("127.0.0.1:...", "10.0.0.1:1")


def test_connector_map_is_the_modules_docstrings() -> None:
    """The README's connector map (package, module, where it runs, what it is) equals what the connector's module
    docstrings say; every module says where it runs (``Runs on: ...``) in words the map knows."""
    fix = "run `python -m tests.support.connector_map` to regenerate the README's connector map"
    current = connector_map.readme_table(README.read_text(encoding="utf-8"))
    assert current is not None, f"README.md lost its connector map markers: {fix}"
    assert current == connector_map.table(), f"README.md's connector map differs from the docstrings: {fix}"


@pytest.mark.parametrize(
    ("runs_on", "error"),
    [
        ("Runs on: driver (planning); executors (task).", None),
        ("Runs on: driver (session, planning, commit); any machine (tool).", None),
        ("Where this runs: the driver.", "second paragraph must start"),
        ("Runs on: executors (commit).", "executors phases are task"),
        ("Runs on: driver (commit, planning).", "in the order session, planning, commit"),
        ("Runs on: driver (planning), executors (task).", "is not PLACE (PHASES)"),
        ("Runs on: worker (task).", "is not PLACE (PHASES)"),
        ("Runs on: driver (planning); driver (commit).", "each named once"),
    ],
)
def test_connector_map_checks_where_a_module_runs(runs_on: str, error: str | None) -> None:
    doc = f"Summary line.\n\n{runs_on}\n\nDetails."
    if error is None:
        assert connector_map.runs_on(doc, "m.py") == runs_on.removeprefix("Runs on: ").removesuffix(".")
    else:
        with pytest.raises(connector_map.MapError, match=re.escape(error)):
            connector_map.runs_on(doc, "m.py")


def test_connector_map_lists_every_module(tmp_path: Path) -> None:
    """A module in a package the map does not list fails the map (a copy of the layout under ``tmp_path``)."""
    root = tmp_path / "spark_kafka_log"
    shutil.copytree(connector_map.CONNECTOR, root, ignore=shutil.ignore_patterns("__pycache__"))
    assert len(connector_map.map_rows(root)) == len(connector_map.map_rows())
    (root / "sinks").mkdir()
    (root / "sinks" / "__init__.py").write_text('"""Sinks.\n\nRuns on: executors (task).\n"""\n')
    with pytest.raises(connector_map.MapError, match=r"in no package of the map.*sinks/__init__\.py"):
        connector_map.map_rows(root)
    (root / "read" / "extra.py").write_text('"""No placement."""\n')
    with pytest.raises(
        connector_map.MapError, match=r"spark_kafka_log/read/extra\.py: the docstring's second"
    ):
        connector_map.map_rows(root)


class Runner:
    def __init__(self, session: Any, workdir: Path, remote: str) -> None:
        self.workdir = workdir
        self.remote = remote
        self.namespace: dict[str, Any] = {"__name__": "__readme__", "spark": session}
        self.env = dict(os.environ)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"

    def run(self, block: Block) -> None:
        code = block.code.replace(REMOTE_SERVERS, self.remote)
        if block.lang == "python":
            self.run_python(block, code)
        else:
            for line in code.splitlines():
                command = line.split(" #", 1)[0].strip()
                if command and not command.startswith("#"):
                    self.run_bash_line(block, command)

    def run_python(self, block: Block, code: str) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            # Padded so that a traceback's line numbers are README.md's.
            exec(compile("\n" * block.line + code, "README.md", "exec"), self.namespace)
        printed = out.getvalue().splitlines()
        expected = expected_output(code)
        assert len(printed) == len(expected) and all(map(matches, expected, printed)), (
            f"{block.where} printed {printed}, the README says {expected}"
        )

    def run_bash_line(self, block: Block, command: str) -> None:
        argv = shlex.split(command)
        if argv[0] == "python":
            argv[0] = sys.executable
        sub = next((a for a in argv if a in READY), None)
        if sub is not None:
            if not any(a.startswith("listeners=") for a in argv):
                argv += ["--override", "listeners=PLAINTEXT://127.0.0.1:0"]
            self.run_foreground(block, argv, READY[sub])
            return
        stdin: Any = subprocess.DEVNULL
        if len(argv) > 2 and argv[-2] == "<":  # `command < FILE`: that file of the working directory
            stdin = (self.workdir / argv[-1]).open("rb")
            argv = argv[:-2]
        try:
            done = subprocess.run(
                argv, cwd=self.workdir, env=self.env, stdin=stdin, capture_output=True, text=True, timeout=120
            )
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()
        assert done.returncode == 0, f"{block.where}: `{command}` exited {done.returncode}: {done.stderr}"

    def run_foreground(self, block: Block, argv: list[str], ready: str) -> None:
        command = shlex.join(argv)
        with tempfile.TemporaryFile("w+") as stderr:
            try:
                self._foreground(block, argv, command, ready, stderr)
            except AssertionError as exc:
                stderr.seek(0)
                raise AssertionError(f"{exc}\nits stderr:\n{stderr.read()[-3000:]}") from None

    def _foreground(self, block: Block, argv: list[str], command: str, ready: str, stderr: Any) -> None:
        proc = subprocess.Popen(
            argv,
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        seen = threading.Event()

        def read(stream: io.TextIOBase) -> None:
            for line in stream:
                lines.append(line.rstrip("\n"))
                if line.startswith(ready):
                    seen.set()

        reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not seen.wait(0.1):
                assert proc.poll() is None, f"{block.where}: `{command}` exited {proc.returncode}: {lines}"
                assert time.monotonic() < deadline, f"{block.where}: `{command}` never printed {ready!r}"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 0, f"{block.where}: `{command}` exited {proc.returncode} on SIGINT"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(5)


def test_readme_examples_run(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_kafka_log
    from broker_runtime.launch import broker_process, embedded_broker_status, stop_embedded_broker

    session = spark
    blocks = [b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang in CODE]
    workdir = tmp_path / "work"
    shutil.copytree(ROOT / "conf", workdir / "conf")
    data_dir = workdir / "pylog-data"
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("PYLOG_DATA_DIR", str(data_dir))
    # The suite's session started elsewhere: its Python workers (where the source plans and writes) get the data
    # directory the way spark.executorEnv.PYLOG_DATA_DIR would give it, from the next registration on.
    workers_env = session.sparkContext.environment
    saved_workers_dir = workers_env.get("PYLOG_DATA_DIR")
    workers_env["PYLOG_DATA_DIR"] = str(data_dir)
    spark_kafka_log.register(session)
    saved_env = dict(os.environ)
    try:
        with broker_process(tmp_path / "remote") as remote:
            runner = Runner(session, workdir, remote)
            for block in blocks:
                if block.skip_reason is None:
                    runner.run(block)
            # Clients the examples left open (a librdkafka producer) go now, while their broker still runs,
            # instead of at interpreter exit, where they would log connection errors after the summary.
            runner.namespace.clear()
            gc.collect()
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        session.conf.unset("spark.sql.python.filterPushdown.enabled")
        if saved_workers_dir is None:
            workers_env.pop("PYLOG_DATA_DIR", None)
        else:
            workers_env["PYLOG_DATA_DIR"] = saved_workers_dir
        spark_kafka_log.register(session)
        stop_embedded_broker(data_dir)
    assert embedded_broker_status(data_dir) is None
