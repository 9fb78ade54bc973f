"""Option-parsing helpers shared by the writer's and the reader's options (:mod:`spark_kafka_log.common.writer_options`,
:mod:`spark_kafka_log.common.reader_options`).

Runs on: driver (planning).

Where this runs: on the **driver**, while ``DataSource.writer()`` / ``reader()`` parse their options. Pure (no
I/O), except that :func:`resolve_data_dir` makes a path absolute against the driver's working directory.

Spark hands a Python data source its options with lower-cased keys; :func:`lower_keys` does the same for any
mapping, so every lookup here is by the lower-cased key. Besides the user's options, PySpark 4.3 adds ``path``
(``load(path)``, ``save(path)``, ``start(path)``) and, for writeStream, ``checkpointLocation`` and ``queryName``
(when given); nothing else (checked with a probe source in a real session).

Unknown options fail (:func:`reject_unknown_options` for the unprefixed names, :func:`reject_unknown_keys` for
``kafka.*`` / ``pylog.*``), naming the option and the closest known one, so a typo such as ``startingOffset`` is
never silently ignored. :func:`reject_refused_kafka_keys` refuses the ``kafka.*`` settings Spark's Kafka
connector manages itself, with Spark's own words. Each helper takes the option's ``name`` as the user
would spell it (``"failOnDataLoss"``, ``"kafka.batch.size"``), looks it up lower-cased and names it that way in
its :class:`~broker_runtime.errors.ConfigError`, together with what is allowed.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import TypeVar

from broker_runtime.errors import ConfigError

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_DATA_DIR",
    "INT32_MAX",
    "bool_option",
    "bootstrap_servers",
    "choice_option",
    "int_option",
    "lower_keys",
    "reject_refused_kafka_keys",
    "reject_unknown_keys",
    "reject_unknown_options",
    "resolve_data_dir",
    "text_option",
]

#: Environment variable naming the embedded broker's data directory when ``pylog.dataDir`` is not set.
DATA_DIR_ENV = "PYLOG_DATA_DIR"
#: Default data directory (relative to the driver's working directory, resolved there).
DEFAULT_DATA_DIR = "./pylog-data"

INT32_MAX = 2**31 - 1

_D = TypeVar("_D", int, None)


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with lower-cased keys; an option whose value is ``None`` counts as not given."""
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def resolve_data_dir(value: str | None) -> str:
    """The absolute data directory: ``value``, else ``$PYLOG_DATA_DIR``, else ``./pylog-data`` (driver cwd)."""
    raw = value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return os.path.abspath(os.path.expanduser(raw))


def int_option(opts: Mapping[str, str], name: str, default: _D, lo: int, hi: int = INT32_MAX) -> int | _D:
    """The integer option ``name`` in ``[lo, hi]``, or ``default`` when it is not given."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name!r}: {raw!r} is not an integer; allowed: {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"option {name!r}: {value} is out of range; allowed: {lo} to {hi}")
    return value


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    """The boolean option ``name`` (``true`` / ``false``, any case), or ``default`` when it is not given."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"option {name!r}: {raw!r} is not a boolean; allowed values: true, false")
    return text == "true"


def choice_option(opts: Mapping[str, str], name: str, default: str, allowed: Iterable[str]) -> str:
    """The option ``name`` stripped and lower-cased, which must be one of ``allowed``; ``default`` if not given."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    choices = tuple(allowed)
    if text not in choices:
        raise ConfigError(f"option {name!r}: {raw!r} is not supported; allowed values: {', '.join(choices)}")
    return text


def text_option(opts: Mapping[str, str], name: str, what: str) -> str | None:
    """The option ``name`` stripped, or None when it is not given; given but blank fails, asking for ``what``."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if not text:
        raise ConfigError(f"option {name!r} is empty; give {what} or drop the option")
    return text


def bootstrap_servers(opts: Mapping[str, str]) -> str | None:
    """``kafka.bootstrap.servers`` stripped (a comma-separated list of host:port), or None: the embedded broker."""
    raw = opts.get("kafka.bootstrap.servers")
    if raw is None:
        return None
    servers = str(raw).strip()
    if not servers or any(":" not in s.strip() for s in servers.split(",")):
        raise ConfigError(
            f"option 'kafka.bootstrap.servers': {raw!r} is not a comma-separated list of host:port "
            "(omit the option to use the embedded broker)"
        )
    return servers


def reject_unknown_keys(
    opts: Mapping[str, str],
    *,
    role: str,
    kafka_keys: Iterable[str],
    pylog_keys: Iterable[str],
    pylog_allowed: str,
    tolerated_prefix: str | None = None,
    ignorable_kafka_keys: Iterable[str] = (),
) -> list[str]:
    """Fail on a ``kafka.*`` key neither in ``kafka_keys`` nor in ``ignorable_kafka_keys`` (both given without
    the prefix) or a ``pylog.*`` key not in ``pylog_keys`` (lower-cased, with the prefix; keys under
    ``tolerated_prefix`` pass). ``role`` ("writer", "reader") and ``pylog_allowed`` (the allowed ``pylog.*``
    names as the user spells them) go into the message. Returns the ``kafka.*`` keys given that are only
    ignorable (Kafka client settings this role does not use), sorted, for the caller's one warning.
    """
    kafka = tuple(kafka_keys)
    ignorable = frozenset(ignorable_kafka_keys)
    pylog = tuple(pylog_keys)
    given_kafka = [k for k in opts if k.startswith("kafka.") and k[len("kafka.") :] not in kafka]
    unknown_kafka = sorted(k for k in given_kafka if k[len("kafka.") :] not in ignorable)
    if unknown_kafka:
        raise ConfigError(
            f"option(s) {', '.join(unknown_kafka)} not supported by the pylog {role} and not Kafka client "
            f"settings; supported kafka.* options: {', '.join('kafka.' + k for k in kafka)}"
        )
    unknown_pylog = sorted(
        k
        for k in opts
        if k.startswith("pylog.")
        and k not in pylog
        and not (tolerated_prefix is not None and k.startswith(tolerated_prefix))
    )
    if unknown_pylog:
        raise ConfigError(
            f"option(s) {', '.join(unknown_pylog)} not known to the pylog {role}; allowed pylog.* options: "
            f"{pylog_allowed}"
        )
    return sorted(given_kafka)


def reject_unknown_options(
    opts: Mapping[str, str], *, role: str, known: Iterable[str], refused: Mapping[str, str] | None = None
) -> None:
    """Fail on an option without the ``kafka.`` / ``pylog.`` prefix that is not in ``known`` (names as the user
    spells them, matched lower-cased), naming it and the closest known option. ``refused`` maps lower-cased names
    to the message of an option that is known but refused (e.g. ``path``); it wins over ``known``."""
    names = {n.lower(): n for n in known}
    for key in sorted(opts):
        if key.startswith(("kafka.", "pylog.")):
            continue
        if refused and key in refused:
            raise ConfigError(refused[key])
        if key in names:
            continue
        close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
        hint = f"; did you mean {names[close[0]]!r}?" if close else ""
        raise ConfigError(
            f"option {key!r} is not an option of the pylog {role}{hint} (options: "
            f"{', '.join(sorted(names.values(), key=str.lower))}, kafka.* and pylog.*)"
        )


def reject_refused_kafka_keys(opts: Mapping[str, str], refused: Mapping[str, str]) -> None:
    """Fail on a ``kafka.<name>`` option whose ``name`` is a key of ``refused`` (the settings Spark's Kafka
    connector refuses because it manages them itself), with its message (Spark's text)."""
    for name in sorted(refused):
        if f"kafka.{name}" in opts:
            raise ConfigError(refused[name])
