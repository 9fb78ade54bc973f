"""Config declarations: each config key declared once -- name, type, default, validator, dynamic or not, doc --
and everything else derived from that one declaration (Kafka's ``ConfigDef``, in pylog's shape).

A :class:`ConfigKey` is one declaration. ``default`` is the value *as text*, as a properties file would give it
and as DescribeConfigs answers it (``None``: the key has no default, Kafka's ``null``); ``parse`` turns a text
into the typed value and raises :class:`~broker_runtime.errors.ConfigError` naming the key, the value found and
what is allowed; :attr:`ConfigKey.sensitive` holds for Kafka's ``PASSWORD`` type (its value is never answered
nor logged). ``type`` is Kafka's ``ConfigDef.Type``, numbered as DescribeConfigs' ``ConfigType``.

A frozen dataclass gets typed access to declared keys with :func:`declare`: the field's default is the parsed
default and its metadata the declaration, so :func:`declared` lists a class's keys in field order and
:func:`parse_fields` builds its keyword arguments from a property mapping. The README's reference tables are
rendered from declarations too (``python -m tests.support.config_docs``; a test compares them with the README).
:func:`read_properties` reads Java ``.properties`` files (``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuation).

Declarations are immutable module-level data; every function here is pure (thread-safe). Imports nothing of
the project but :mod:`broker_runtime.errors`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_runtime.errors import ConfigError

__all__ = [
    "CONFIG",
    "INT_MAX",
    "LONG_MAX",
    "ConfigKey",
    "ConfigType",
    "Parse",
    "boolean",
    "choice",
    "declare",
    "declared",
    "define",
    "integer",
    "no_effect_warnings",
    "non_empty",
    "number",
    "optional",
    "overrides_dict",
    "parse_fields",
    "read_properties",
    "text",
    "upper",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

#: The dataclass field metadata key holding a field's :class:`ConfigKey`.
CONFIG = "pylog.config"


class ConfigType(enum.IntEnum):
    """Kafka's ``ConfigDef.Type``, by DescribeConfigs' ``ConfigType`` numbers."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


#: (the name the value was found under, its text) -> the typed value; raises ConfigError naming that name.
Parse = Callable[[str, str], Any]


def integer(minimum: int | None = None, maximum: int | None = None) -> Parse:
    """An integer in ``minimum..maximum`` (either bound optional)."""

    def parse(name: str, raw: str) -> int:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected an integer") from None
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name}={value}: must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{name}={value}: must be <= {maximum}")
        return value

    return parse


def number(minimum: float, maximum: float) -> Parse:
    """A decimal number in ``minimum..maximum``."""

    def parse(name: str, raw: str) -> float:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ConfigError(
                f"{name}={raw!r}: expected a number between {minimum:g} and {maximum:g}"
            ) from None
        if not minimum <= value <= maximum:
            raise ConfigError(f"{name}={value}: must be between {minimum:g} and {maximum:g}")
        return value

    return parse


def boolean(name: str, raw: str) -> bool:
    """``true`` or ``false``, any case."""
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}={raw!r}: expected true or false")
    return value == "true"


def text(name: str, raw: str) -> str:
    """The text, surrounding blanks stripped."""
    return str(raw).strip()


def upper(name: str, raw: str) -> str:
    """The text in upper case, blanks stripped."""
    return str(raw).strip().upper()


def optional(name: str, raw: str) -> str | None:
    """The text, blanks stripped; None when empty."""
    return str(raw).strip() or None


def non_empty(name: str, raw: str) -> str:
    """The text, blanks stripped, which must not be empty."""
    value = str(raw).strip()
    if not value:
        raise ConfigError(f"{name}='': must not be empty")
    return value


def choice(*allowed: str, lower: bool = True) -> Parse:
    """One of ``allowed`` (compared in lower case unless ``lower`` is false)."""

    def parse(name: str, raw: str) -> str:
        value = str(raw).strip().lower() if lower else str(raw).strip()
        if value not in allowed:
            raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(allowed)}")
        return value

    return parse


@dataclass(frozen=True)
class ConfigKey:
    """One config, declared once."""

    name: str
    type: ConfigType
    #: The default as text (what a properties file would say, what DescribeConfigs answers); None: no default.
    default: str | None
    #: What it does, one README cell (Markdown).
    doc: str
    #: Text -> typed value, raising ConfigError naming the key; by default the type's (see :func:`define`).
    parse: Parse = text
    #: AlterConfigs may change it at runtime (Kafka's ``DynamicBrokerConfig``); else a restart is needed.
    dynamic: bool = False
    #: The README's default cell when the text alone would not say it (``(listeners)``, ``unlimited``).
    shown_default: str | None = None
    #: The README section it is listed in (Kafka's ``ConfigDef`` group).
    group: str = ""
    #: False: accepted so that a Kafka properties file loads, but pylog does nothing with it; a value other than
    #: the default draws a start-up warning naming the key (:func:`no_effect_warnings`), never silence.
    effect: bool = True
    #: Dynamic per broker only (Kafka's per-broker update mode: the listener's TLS and SASL keys): AlterConfigs
    #: on the cluster-wide default (broker ``""``) refuses it, as Kafka does.
    per_broker: bool = False
    #: Why pylog needs a restart for a key Kafka updates at runtime (the AlterConfigs refusal says it); empty
    #: when Kafka does not update it at runtime either.
    restart_reason: str = ""

    @property
    def sensitive(self) -> bool:
        """A secret (Kafka's PASSWORD type): never answered, never logged."""
        return self.type == ConfigType.PASSWORD

    def value(self, props: Mapping[str, str]) -> Any:
        """The typed value of this key in ``props`` (its default when absent; None when it has none)."""
        raw = props.get(self.name, self.default)
        return None if raw is None else self.parse(self.name, raw)

    def default_value(self) -> Any:
        return self.value({})


def define(
    name: str,
    type: ConfigType,
    default: str | None,
    doc: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    parse: Parse | None = None,
    dynamic: bool = False,
    shown_default: str | None = None,
    group: str = "",
    effect: bool = True,
    per_broker: bool = False,
    restart_reason: str = "",
) -> ConfigKey:
    """A declaration whose validator is ``parse``, else the type's (integers bounded by ``minimum``/``maximum``)."""
    if parse is None:
        if type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            parse = integer(minimum, maximum)
        elif type == ConfigType.BOOLEAN:
            parse = boolean
        else:
            parse = text
    return ConfigKey(
        name, type, default, doc, parse, dynamic, shown_default, group, effect, per_broker, restart_reason
    )


def no_effect_warnings(keys: Mapping[str, ConfigKey], props: Mapping[str, str]) -> tuple[str, ...]:
    """One warning per key of ``props`` declared without effect and set to something other than its default (by
    name only: the value is not repeated, as for unknown keys)."""
    return tuple(
        f"config key {name!r} is set but has no effect in pylog: {key.doc.removeprefix('accepted, no effect: ')}"
        for name in sorted(props)
        if (key := keys.get(name)) is not None and not key.effect and key.value(props) != key.default_value()
    )


_PARSED = object()


def declare(key: ConfigKey, *, derived: Any = _PARSED) -> Any:
    """A dataclass field holding ``key``'s typed value (default: the parsed default), declared by ``key``.

    With ``derived`` (the field's default), the value depends on other keys too: :func:`parse_fields` leaves
    it to the class, which computes it (e.g. ``listeners`` needs ``listener.security.protocol.map``)."""
    metadata = {CONFIG: key, _DERIVED: derived is not _PARSED}
    default = key.default_value() if derived is _PARSED else derived
    if isinstance(default, (dict, list, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_DERIVED = "pylog.config.derived"


def declared(cls: Any) -> tuple[tuple[str, ConfigKey], ...]:
    """(field name, declaration) of every field of dataclass ``cls`` made by :func:`declare`, in field order."""
    return tuple((f.name, f.metadata[CONFIG]) for f in dataclasses.fields(cls) if CONFIG in f.metadata)


def parse_fields(cls: Any, props: Mapping[str, str]) -> dict[str, Any]:
    """The declared fields of ``cls`` parsed from ``props`` (defaults where absent), by field name; derived
    fields are left out (the class computes them)."""
    return {
        f.name: f.metadata[CONFIG].value(props)
        for f in dataclasses.fields(cls)
        if CONFIG in f.metadata and not f.metadata[_DERIVED]
    }


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java ``.properties`` file (the subset Kafka's config files use) into a dict."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        props[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        props[key] = value
    return props


def _split_property(line: str) -> tuple[str, str]:
    match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
    if match is None:
        return line.strip(), ""
    return match.group(1), match.group(2).strip()


def overrides_dict(overrides: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): str(v) for k, v in overrides.items()}
    out: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out
