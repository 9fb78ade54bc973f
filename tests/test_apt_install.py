"""How :func:`tests.support.apt.install` (the fixtures' installs of chromium, libfuse 2, libfaketime, kcat) says
why it could not install a package: ONE line naming what is missing, what was tried and the command to run by
hand, with apt-get's whole output in the log file the line names. A stand-in ``apt-get`` (a shell script first on
the PATH) plays apt-get's failures, which the real one cannot be made to show here; no real install runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import apt

#: The stand-in apt-get is a child process; the tier scan does not follow ``apt.install`` (a module's attribute).
PYLOG_TIER = "process"
PACKAGE = "pylog-no-such-package"
#: apt-get's answer for a package it does not know, after an update's lines.
UNKNOWN = (
    'if [ "$1" = update ]; then echo "Hit:1 http://deb.debian.org/debian trixie InRelease"; '
    'echo "Reading package lists..."; exit 0; fi\n'
    'echo "Reading package lists..."; echo "Building dependency tree..."\n'
    'echo "E: Unable to locate package $3" >&2; exit 100\n'
)


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory as the whole PATH, and the cache (where the log goes) under ``tmp_path``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(apt.os, "geteuid", lambda: 0)
    return bin_dir


def _apt_get(bin_dir: Path, body: str) -> None:
    script = bin_dir / "apt-get"
    # apt.install passes "-o DPkg::Lock::Timeout=N" first: the stand-in records and plays the rest.
    script.write_text(f'#!/bin/sh\n[ "$1" = -o ] && shift 2\necho "$@" >> {bin_dir / "ran"}\n{body}')
    script.chmod(0o755)


def _one_line(missing: apt.Missing | None, *, tried: bool = True) -> str:
    assert missing is not None and missing.tried is tried, missing
    failed = missing.line
    assert "\n" not in failed, failed
    assert failed.endswith(f"install it by hand as root: apt-get install -y {PACKAGE}") or (
        f"install it by hand as root: apt-get install -y {PACKAGE} (" in failed
    ), failed
    return failed


def test_no_apt_get_on_the_path_is_one_line(path: Path) -> None:
    failed = _one_line(apt.install((PACKAGE,), "the thing", lambda: False), tried=False)
    assert failed.startswith("the thing not installed, and no apt-get on the PATH"), failed


def test_an_unknown_package_is_apt_gets_error_line_and_the_log(path: Path) -> None:
    _apt_get(path, UNKNOWN)
    failed = _one_line(apt.install((PACKAGE,), "the thing", lambda: False))
    log = apt.log_path((PACKAGE,))
    assert f"(exit 100: E: Unable to locate package {PACKAGE}; full output in {log})" in failed, failed
    assert "Building dependency tree..." in log.read_text() and "Hit:1" in log.read_text()


def test_a_timeout_is_one_line(path: Path) -> None:
    _apt_get(path, "exec /bin/sleep 10\n")
    failed = _one_line(apt.install((PACKAGE,), "the thing", lambda: False, update_timeout_s=0.2))
    assert "'apt-get update' did not finish within 0.2 s" in failed, failed


def test_not_root_is_said_without_running_apt_get(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _apt_get(path, UNKNOWN)
    monkeypatch.setattr(apt.os, "geteuid", lambda: 1000)
    failed = _one_line(apt.install((PACKAGE,), "the thing", lambda: False), tried=False)
    assert "installing it with apt-get needs root" in failed and not (path / "ran").exists(), failed


def test_what_is_there_is_not_installed_and_what_apt_get_installs_is_none(path: Path) -> None:
    _apt_get(path, f'[ "$1" = install ] && /usr/bin/touch {path / "installed"}\nexit 0\n')
    assert apt.install((PACKAGE,), "the thing", lambda: True) is None
    assert not (path / "ran").exists()
    assert apt.install((PACKAGE,), "the thing", (path / "installed").exists) is None
    assert (path / "ran").read_text().splitlines() == ["update", f"install -y {PACKAGE}"]


def test_a_fixture_skips_what_cannot_be_installed_here_and_fails_an_install_that_failed(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule: skip with the reason when a tool truly cannot be installed (no root), fail when a fetch fails."""
    _apt_get(path, UNKNOWN)
    with pytest.raises(pytest.fail.Exception, match="Unable to locate package"):
        apt.require((PACKAGE,), "the thing", lambda: False)
    monkeypatch.setattr(apt.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        apt.require((PACKAGE,), "the thing", lambda: False)
