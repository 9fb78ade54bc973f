"""Kafka's ``sasl.jaas.config`` syntax: one login module, its control flag, its options, a semicolon.

    org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="pw";
    org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pw";
    org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw" user_bob="pw2";

Option values are double-quoted (a backslash escapes the next character) or bare words. On a broker the
PLAIN module's ``user_<name>="<password>"`` options are its user database (Kafka's PlainServerCallbackHandler);
on a client ``username``/``password`` are the credentials. Pure functions; thread-safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker_runtime.errors import ConfigError

__all__ = ["PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE", "JaasEntry", "parse_jaas"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(
    r'\s*(?:(?P<key>[A-Za-z0-9_.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))|(?P<end>;))'
)


@dataclass(frozen=True)
class JaasEntry:
    """One parsed login module entry."""

    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def plain_users(self) -> dict[str, str]:
        """``user_<name>="<password>"`` options: the PLAIN user database of a broker."""
        return {k[len("user_") :]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas(key: str, text: str) -> JaasEntry:
    """Parse one JAAS entry; a malformed one is a :class:`ConfigError` naming ``key`` (never the password)."""
    body = text.strip()
    head = re.match(r"(?P<module>[A-Za-z_$][\w.$]*)\s+(?P<flag>\w+)", body)
    if head is None:
        raise ConfigError(
            f"{key}: expected '<LoginModule class> required key=\"value\" ...;', e.g. '{PLAIN_LOGIN_MODULE} "
            'required username="alice" password="...";\''
        )
    flag = head["flag"].lower()
    if flag not in _FLAGS:
        raise ConfigError(f"{key}: control flag {head['flag']!r} is not one of {', '.join(_FLAGS)}")
    options: dict[str, str] = {}
    pos = head.end()
    ended = False
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        match = _TOKEN.match(body, pos)
        if match is None or ended:
            raise ConfigError(
                f'{key}: cannot parse the JAAS options after character {pos} (expected key="value")'
            )
        if match["end"]:
            ended = True
        else:
            raw = match["quoted"] if match["quoted"] is not None else match["bare"]
            options[match["key"]] = re.sub(r"\\(.)", r"\1", raw)
        pos = match.end()
    if not ended:
        raise ConfigError(f"{key}: the JAAS entry must end with ';'")
    return JaasEntry(head["module"], flag, options)
