"""The Spark class-data archive of :mod:`tests.support.spark_cds` never breaks or slows a run it cannot help: an
unwritable cache directory, a dump that fails and an archive no JVM maps each leave the Spark JVMs without it,
said in one line, and a failed dump is not tried again for the same Java and PySpark. The dump's Spark
application is replaced by small Python commands (no Spark); the mapping check runs the real ``java``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import spark_cds

# The dump and its check are child processes started from spark_cds.ensure_archive (the scan does not see them).
PYLOG_TIER = "process"

# The dump command's stand-in: counts its runs in the file argv[1], then does what argv[2] says.
FAKE_DUMP = """
import os, sys
with open(sys.argv[1], "a") as runs:
    runs.write("x")
if sys.argv[2] == "garbage":
    target = next(o for o in os.environ["SPARK_SUBMIT_OPTS"].split() if o.startswith("-XX:ArchiveClassesAtExit="))
    with open(target.split("=", 1)[1], "wb") as archive:
        archive.write(b"not an archive" * 300)
    sys.exit(0)
print("no JVM today", file=sys.stderr)
sys.exit(3)
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if spark_cds.java_binary() is None:
        pytest.fail("no java on PATH or in JAVA_HOME: the suite's Spark tests need Java 17+")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "pylog" / "spark-cds"


def _fake_dump(monkeypatch: pytest.MonkeyPatch, runs: Path, what: str) -> None:
    monkeypatch.setattr(spark_cds, "dump_command", lambda: [sys.executable, "-c", FAKE_DUMP, str(runs), what])


def test_an_unwritable_cache_directory_leaves_the_jvms_without_the_archive_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file where the cache directory should be: no mkdir under it, even as root.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert spark_cds.ensure_archive() is False
    assert spark_cds.jvm_options() == []
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot be written" in lines[0] and str(blocker) in lines[0], lines


def test_a_failed_dump_is_remembered_until_java_or_pyspark_changes(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    _fake_dump(monkeypatch, runs, "fail")
    assert spark_cds.ensure_archive() is False
    archive = spark_cds.archive_path()
    assert archive is not None
    failed = archive.with_suffix(".failed")
    assert "exited 3" in failed.read_text() and "no JVM today" in failed.read_text()
    capsys.readouterr()
    # The next worker or run: no second dump, one line naming the file to delete.
    assert spark_cds.ensure_archive() is False
    assert runs.read_text() == "x"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "failed before" in lines[0] and str(failed) in lines[0], lines
    # Another PySpark (or Java) is another key: its dump is tried.
    monkeypatch.setattr(spark_cds, "pyspark_version", lambda: "0.0.0-other")
    assert spark_cds.ensure_archive() is False
    assert runs.read_text() == "xx"
    assert sorted(p.name for p in cache.iterdir() if p.suffix == ".failed") == sorted(
        [failed.name, spark_cds.archive_path().with_suffix(".failed").name]  # type: ignore[union-attr]
    )


def test_an_archive_no_jvm_can_map_is_not_moved_into_place(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_dump(monkeypatch, tmp_path / "runs", "garbage")
    assert spark_cds.ensure_archive() is False
    archive = spark_cds.archive_path()
    assert archive is not None
    assert not archive.exists() and spark_cds.jvm_options() == []
    assert not list(cache.glob("*.tmp")), list(cache.iterdir())
    reason = archive.with_suffix(".failed").read_text()
    assert "cannot be mapped" in reason and "Xshare:on" in reason, reason
    assert "cannot be mapped" in capsys.readouterr().err
