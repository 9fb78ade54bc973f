"""Wall clocks of their own for a local cluster's nodes: each node runs under libfaketime with a control file of
its own, which the nemesis rewrites to step that node's wall clock forward or backward (``clock_jump``) and back.

Layout (made by :class:`Clocks` on entry, before the cluster starts)::

    <data_dir>/clocks/node-<i>.faketime     node i's offset from the real wall clock, libfaketime's relative
                                            form: "+0", "+12", "-90" (seconds)
    <data_dir>/clocks/monotonic_sleep.so    ``monotonic_sleep.c`` (beside this module) compiled with ``cc``

Node ``i`` runs as ``env -u FAKETIME LD_PRELOAD="<monotonic_sleep.so> <libfaketime.so.1>"
FAKETIME_TIMESTAMP_FILE=<its file> ... <broker command>`` (:meth:`Clocks.prefix`, put after a network
namespace's ``ip netns exec`` when there is one; ``env`` execs, so the pid stays the broker's). The broker is the
same code as ``pylog-broker cluster`` runs; only what the C library's clock calls answer changes.
``monotonic_sleep.so`` works around a libfaketime 0.9.10 bug that makes every ``time.sleep()`` of Python 3.11+
fail with EINVAL when the monotonic clock is not faked (its source says how).

What a step models: an NTP step (``ntpd``/``chronyd`` setting the clock at once rather than slewing it), a VM
resumed with a stale clock. ``CLOCK_REALTIME`` (Python's ``time.time()``, ``time.time_ns()``) jumps;
``CLOCK_MONOTONIC`` (``time.monotonic()``: timers, sessions, liveness) does not
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), as on a real machine. File timestamps are the kernel's
(``NO_FAKE_STAT=1``): the files of a node keep the times the kernel gave them, as after a real step, and all
nodes see one file system.

How a running node sees a change: libfaketime reads the control file again on the first clock call after its
cache of it expired (``FAKETIME_CACHE_DURATION=1``: a second, counted in whole seconds of its own clock, so a step
takes effect within :data:`VISIBLE_S`; measured 1.2-2.0 s). Without the cache (``FAKETIME_NO_CACHE=1``) a step
takes effect at once, but every wall-clock read opens, reads and closes the file: ``time.time()`` took 36 us
instead of 0.4 us (0.7 us with the cache), and a broker reads the wall clock about twice per produce request
(counted with strace), some 70 us of CPU more per request, a third of what a small produce costs it on the
2-core test machine. The nemesis therefore keeps the cache and holds a jump :data:`VISIBLE_S` longer. The file is
replaced by a rename, so a reader never sees half of it.

Which library: ``libfaketimeMT.so.1``, the one that serializes its own state with a pthread lock. The
interpreter's lock does not keep two threads out of libfaketime: CPython reads the clock without it while a
thread waits for it, and OpenSSL (TLS) and other C code call ``time()`` with it released. Its lock costs about
1 us a clock read: ``time.time()`` took 1.3-1.45 us under it (cache kept) against 0.29-0.36 us under
``libfaketime.so.1`` and 0.29 us with no preload (measured once, 2-core test machine), some 2 us a produce request.

Requires libfaketime (Debian's ``libfaketime``: ``/usr/lib/<arch>/faketime/libfaketimeMT.so.1``) and a C compiler
(``cc``); :func:`unavailable` says why not when one is missing, :func:`install` installs what is missing with
apt-get (root only; :mod:`tests.support.apt`, as the console tests install chromium) and says in one line why
it could not. Threading: one
thread.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support import apt

__all__ = ["APT_PACKAGES", "COMPILER_PACKAGES", "VISIBLE_S", "Clocks", "install", "library", "unavailable"]

#: Debian's package of ``libfaketimeMT.so.1``.
APT_PACKAGES = ("libfaketime",)
#: Debian's packages of ``cc`` and the C library's headers, which the shim needs.
COMPILER_PACKAGES = ("gcc", "libc6-dev")
#: How long a running node may take to see its clock stepped (libfaketime's cache of one second, counted in
#: whole seconds).
VISIBLE_S = 2.0
_SHIM_SOURCE = Path(__file__).with_name("monotonic_sleep.c")
_LIBRARY_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
    "/usr/lib64/faketime/libfaketimeMT.so.1",
)


def library() -> str | None:
    """The path of ``libfaketimeMT.so.1`` on this machine (None: not installed)."""
    for pattern in _LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def unavailable() -> str | None:
    """Why this machine cannot fake the nodes' clocks (None when it can)."""
    if library() is None:
        return "libfaketime is not installed (libfaketimeMT.so.1; Debian/Ubuntu: apt-get install libfaketime)"
    if shutil.which("cc") is None:
        return (
            f"no C compiler ('cc') to build {_SHIM_SOURCE.name}, which every node preloads before libfaketime"
        )
    return None


def install() -> apt.Missing | None:
    """Install what is missing with apt-get (:func:`tests.support.apt.install`): libfaketime, and a C compiler
    (``gcc``, ``libc6-dev``) for the shim; None when both are there afterwards, else one line saying why not."""
    no_library, no_cc = library() is None, shutil.which("cc") is None
    missing = [*(APT_PACKAGES if no_library else ()), *(COMPILER_PACKAGES if no_cc else ())]
    if not missing:
        return None
    what = " and ".join(
        [
            *(["libfaketime (libfaketimeMT.so.1)"] if no_library else []),
            *([f"a C compiler ('cc', for {_SHIM_SOURCE.name})"] if no_cc else []),
        ]
    )
    return apt.install(missing, what, lambda: unavailable() is None)


def offset_spec(seconds: int) -> str:
    """libfaketime's relative form of an offset: ``+12``, ``-90``, ``+0``."""
    return f"{'-' if seconds < 0 else '+'}{abs(int(seconds))}"


class Clocks:
    """A control file per node (see the module docstring); a context manager that puts every clock right on
    exit."""

    def __init__(self, data_dir: Path, nodes: int, lib: str | None = None) -> None:
        found = lib or library()
        if found is None:
            raise RuntimeError(unavailable() or "libfaketime not found")
        self.library = found
        self.files = [Path(data_dir) / "clocks" / f"node-{i}.faketime" for i in range(nodes)]
        self.shim = Path(data_dir) / "clocks" / "monotonic_sleep.so"
        #: Each node's offset now, in seconds.
        self.offsets = [0] * nodes

    def __enter__(self) -> Clocks:
        self.shim.parent.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(self.shim), str(_SHIM_SOURCE), "-ldl"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if built.returncode != 0:
            raise RuntimeError(
                f"cc could not build {_SHIM_SOURCE.name} ({built.returncode}): {built.stderr[-500:]}"
            )
        for node in range(len(self.files)):
            self.set(node, 0)
        return self

    def __exit__(self, *exc: object) -> None:
        for node in range(len(self.files)):
            self.set(node, 0)

    def prefix(self, node: int) -> Sequence[str]:
        """The command prefix running node ``node`` under its fake clock."""
        return [
            "env",
            "-u",
            "FAKETIME",  # the variable would take precedence over the control file
            f"LD_PRELOAD={self.shim} {self.library}",  # the shim first: its clock_nanosleep wins
            f"FAKETIME_TIMESTAMP_FILE={self.files[node]}",
            "FAKETIME_CACHE_DURATION=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            "NO_FAKE_STAT=1",
        ]

    def set(self, node: int, seconds: int) -> None:
        """Put node ``node``'s wall clock ``seconds`` away from the real one (0: right again)."""
        path = self.files[node]
        tmp = path.with_name(f"{path.name}.tmp")
        tmp.write_text(offset_spec(seconds) + "\n", encoding="ascii")
        os.replace(tmp, path)
        self.offsets[node] = int(seconds)
