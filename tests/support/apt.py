"""Debian packages a test fixture needs (chromium, libfuse 2, libfaketime, kcat), installed with apt-get when
missing; when that cannot be done, ONE line saying what is missing, what was tried and how to install it by hand.

:func:`install` runs ``apt-get update`` then ``apt-get install -y PACKAGE...`` (root only) and writes both
commands' whole output to :func:`log_path` (``$XDG_CACHE_HOME/pylog/apt-PACKAGES.log``, next to the Apache Kafka
fetch's cache), so the line names that file instead of carrying apt-get's output. It returns None when the
caller's ``present()`` holds afterwards; the caller fails its test with the line (``pytest.fail(line,
pytrace=False)``: no traceback) or says it in a warning. Nothing is installed when ``present()`` already holds.

Threading: called from fixtures (one thread); two processes installing the same packages at once are serialized
by apt-get's own lock (the second waits, then finds them installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["install", "log_path"]

#: How long ``apt-get update`` and ``apt-get install`` may take, in seconds.
UPDATE_TIMEOUT_S = 300.0
INSTALL_TIMEOUT_S = 600.0


def log_path(packages: Sequence[str]) -> Path:
    """Where :func:`install` keeps apt-get's output for ``packages``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pylog" / f"apt-{'-'.join(packages)}.log"


def install(
    packages: Sequence[str],
    missing: str,
    present: Callable[[], bool],
    *,
    update_timeout_s: float = UPDATE_TIMEOUT_S,
    install_timeout_s: float = INSTALL_TIMEOUT_S,
) -> str | None:
    """Install ``packages`` with apt-get unless ``present()``; None when ``present()`` holds afterwards, else one
    line: ``missing`` (what is not installed, e.g. ``"libfuse 2 (libfuse.so.2)"``), why apt-get could not install it,
    and the command to run by hand."""
    if present():
        return None
    command = ["apt-get", "install", "-y", *packages]
    by_hand = f"install it by hand as root: {' '.join(command)}"
    if shutil.which("apt-get") is None:
        return f"{missing} not installed, and no apt-get on the PATH to install it; {by_hand} (or its equivalent)"
    if os.geteuid() != 0:
        return f"{missing} not installed, and installing it with apt-get needs root; {by_hand}"
    log = log_path(packages)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        for step, timeout in ((["apt-get", "update"], update_timeout_s), (command, install_timeout_s)):
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            try:
                code = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                return (
                    f"{missing} not installed, and '{' '.join(step)}' did not finish within {timeout:g} s "
                    f"(output in {log}); {by_hand}"
                )
    if present():
        return None
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E:")] or lines[-1:]
    return (
        f"{missing} not installed, and '{' '.join(command)}' did not install it (exit {code}: "
        f"{errors[-1][-300:] if errors else 'no output'}; full output in {log}); {by_hand}"
    )
