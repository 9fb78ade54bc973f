"""Debian packages a test fixture needs (chromium, libfuse 2, libfaketime, kcat), installed with apt-get when
missing; when that cannot be done, ONE line saying what is missing, what was tried and how to install it by hand.

:func:`install` runs ``apt-get update`` then ``apt-get install -y PACKAGE...`` (root only) and writes both
commands' whole output to :func:`log_path` (``$XDG_CACHE_HOME/pylog/apt-PACKAGES.log``, next to the Apache Kafka
fetch's cache), so the line names that file instead of carrying apt-get's output. It returns None when the
caller's ``present()`` holds afterwards, else a :class:`Missing`: its ``line``, and whether apt-get ``tried`` (ran
and failed or timed out) or could not run here at all (no apt-get on the PATH, not root). :func:`require` is the
fixtures' rule on it: a tool that truly cannot be installed here skips the test with the line; an install that
failed fails it (``pytest.fail(line, pytrace=False)``: no traceback). Nothing is installed when ``present()``
already holds.

Threading and processes: called from fixtures (one thread). The suite's workers may install at the same moment
(chromium, kcat, libfaketime on a fresh machine); apt-get does not wait for another apt-get's lock by default, so
installs are serialized by an exclusive ``flock`` on ``$XDG_CACHE_HOME/pylog/apt.lock``, ``present()`` checked
again once it is held (the worker before may have installed it), and apt-get is also told to wait for dpkg's lock
(``DPkg::Lock::Timeout``) against an apt-get outside the suite.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Missing", "install", "log_path", "require"]

#: How long ``apt-get update`` and ``apt-get install`` may take, in seconds.
UPDATE_TIMEOUT_S = 300.0
INSTALL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Missing:
    """Why a package is not there: ``line`` says it in one line; ``tried`` is whether apt-get ran (and failed or
    timed out), as against no apt-get or no root, where it cannot be installed here at all."""

    line: str
    tried: bool

    def __str__(self) -> str:
        return self.line


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "pylog"


def log_path(packages: Sequence[str]) -> Path:
    """Where :func:`install` keeps apt-get's output for ``packages``."""
    return _cache_dir() / f"apt-{'-'.join(packages)}.log"


def require(packages: Sequence[str], missing: str, present: Callable[[], bool]) -> None:
    """A fixture's install: returns once ``present()`` holds; skips the test with the line when the packages
    cannot be installed here (no apt-get, not root), fails it in one line when apt-get tried and failed."""
    result = install(packages, missing, present)
    if result is None:
        return
    if result.tried:
        pytest.fail(result.line, pytrace=False)
    pytest.skip(result.line)


def install(
    packages: Sequence[str],
    missing: str,
    present: Callable[[], bool],
    *,
    update_timeout_s: float = UPDATE_TIMEOUT_S,
    install_timeout_s: float = INSTALL_TIMEOUT_S,
) -> Missing | None:
    """Install ``packages`` with apt-get unless ``present()``; None when ``present()`` holds afterwards, else why
    not in one line: ``missing`` (what is not installed, e.g. ``"libfuse 2 (libfuse.so.2)"``), why apt-get could not
    install it, and the command to run by hand."""
    if present():
        return None
    command = ["apt-get", "install", "-y", *packages]
    by_hand = f"install it by hand as root: {' '.join(command)}"
    if shutil.which("apt-get") is None:
        line = f"{missing} not installed, and no apt-get on the PATH to install it; {by_hand} (or its equivalent)"
        return Missing(line, tried=False)
    if os.geteuid() != 0:
        return Missing(
            f"{missing} not installed, and installing it with apt-get needs root; {by_hand}", False
        )
    _cache_dir().mkdir(parents=True, exist_ok=True)
    with open(_cache_dir() / "apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker's install: wait for it, then look again
        if present():
            return None
        return _run(
            command, missing, by_hand, present, update_timeout_s, install_timeout_s, log_path(packages)
        )


def _run(
    command: list[str],
    missing: str,
    by_hand: str,
    present: Callable[[], bool],
    update_timeout_s: float,
    install_timeout_s: float,
    log: Path,
) -> Missing | None:
    wait = f"DPkg::Lock::Timeout={int(install_timeout_s)}"
    code = 0
    with open(log, "w") as out:
        for step, timeout in ((["apt-get", "update"], update_timeout_s), (command, install_timeout_s)):
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            try:
                code = subprocess.run(
                    [*step[:1], "-o", wait, *step[1:]], stdout=out, stderr=subprocess.STDOUT, timeout=timeout
                ).returncode
            except subprocess.TimeoutExpired:
                line = (
                    f"{missing} not installed, and '{' '.join(step)}' did not finish within {timeout:g} s "
                    f"(output in {log}); {by_hand}"
                )
                return Missing(line, tried=True)
    if present():
        return None
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E:")] or lines[-1:]
    line = (
        f"{missing} not installed, and '{' '.join(command)}' did not install it (exit {code}: "
        f"{errors[-1][-300:] if errors else 'no output'}; full output in {log}); {by_hand}"
    )
    return Missing(line, tried=True)
