"""Regular-expression subscriptions of consumer groups (KIP-848 ``SubscribedTopicRegex``): the check of a member's
expression and its resolution to topic names, as Kafka's ``GroupMetadataManager`` resolves them on the
coordinator (``refreshRegularExpressions``).

Syntax: Kafka compiles the expression with RE2J (Google's RE2 syntax, matched in linear time); pylog compiles it
with Python's :mod:`re`, which reads the same syntax for what topic names need (literals, ``.``, classes
``[a-z]``, ``\\d \\w \\s``, alternation, groups ``(...)`` ``(?:...)`` ``(?P<name>...)``, the quantifiers
``* + ? {n,m}`` and their lazy forms, ``^ $ \\b``, inline flags ``(?i)``). What RE2J refuses or matches otherwise is
refused here with INVALID_REGULAR_EXPRESSION naming the construct (:func:`check`): backreferences, lookahead and
lookbehind, atomic groups, possessive quantifiers, conditionals, and Python's ``\\Z``. Python's parser refuses
some of RE2J's syntax too (``\\p{..}`` Unicode classes, ``\\z``, ``(?<name>...)``): those answer the same error
with Python's message. One refusal is pylog's own: a quantified group that holds another unbounded quantifier
(``(a+)+``, ``(a*b)*``), because Python's backtracking matcher can take exponential time on such an expression
where RE2J's takes linear time, and a heartbeat must not stall the coordinator.

Matching: a topic is subscribed when the expression matches its whole name (Java's ``matcher().matches()``:
:meth:`re.Pattern.fullmatch`), whatever anchors the expression has.

Pure functions: thread-safe.
"""

from __future__ import annotations

import hashlib
import re
import re._constants as sre_constants
import re._parser as sre_parser
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["RegexError", "check", "resolve", "topics_fingerprint"]

_UNBOUNDED = sre_constants.MAXREPEAT

#: Python's parse opcodes of constructs RE2J refuses, with the name the error message gives.
_REFUSED = {
    sre_constants.GROUPREF: "a backreference",
    sre_constants.GROUPREF_EXISTS: "a conditional group (?(...)...)",
    sre_constants.ASSERT: "a lookahead or lookbehind (?=...) (?<=...)",
    sre_constants.ASSERT_NOT: "a negative lookahead or lookbehind (?!...) (?<!...)",
    sre_constants.ATOMIC_GROUP: "an atomic group (?>...)",
    sre_constants.POSSESSIVE_REPEAT: "a possessive quantifier (*+ ++ ?+ {n,m}+)",
}
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)


class RegexError(ValueError):
    """The expression is not one pylog resolves; the message says why (Kafka's INVALID_REGULAR_EXPRESSION)."""


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns of one parsed item."""
    if op == sre_constants.SUBPATTERN:
        return [av[3]]
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [av[1]]
    if op in (*_REPEATS, sre_constants.POSSESSIVE_REPEAT):
        return [av[2]]
    if op == sre_constants.BRANCH:
        return list(av[1])
    if op == sre_constants.ATOMIC_GROUP:
        return [av]
    if op == sre_constants.GROUPREF_EXISTS:
        return [p for p in av[1:] if p is not None]
    return []


def _has_unbounded_repeat(items: Iterable[Any]) -> bool:
    for op, av in items:
        if op in _REPEATS and av[1] == _UNBOUNDED:
            return True
        if any(_has_unbounded_repeat(child) for child in _children(op, av)):
            return True
    return False


def _walk(items: Iterable[Any], regex: str) -> None:
    for op, av in items:
        what = _REFUSED.get(op)
        if what is None and op == sre_constants.AT and av == sre_constants.AT_END_STRING:
            what = "\\Z (RE2J has no \\Z; use $)"
        if what is not None:
            raise RegexError(
                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {what} is not supported "
                "(Kafka compiles subscriptions with RE2J syntax)."
            )
        if op in _REPEATS and av[1] > 1 and _has_unbounded_repeat(av[2]):
            raise RegexError(
                f"SubscribedTopicRegex `{regex}` is refused by pylog: a repeated group holding an unbounded "
                "quantifier (such as (a+)+) can take exponential time in pylog's matcher; rewrite it without "
                "the nested quantifier."
            )
        for child in _children(op, av):
            _walk(child, regex)


def check(regex: str) -> re.Pattern[str]:
    """The compiled expression, or :class:`RegexError` naming what RE2J (or pylog) refuses in it."""
    try:
        parsed = sre_parser.parse(regex)
    except re.error as exc:
        raise RegexError(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}."
        ) from None
    _walk(parsed, regex)
    return re.compile(regex)


def resolve(
    regexes: Iterable[str], topics: Iterable[str], may_describe: Callable[[str], bool]
) -> dict[str, frozenset[str]]:
    """Each expression -> the topics whose whole name it matches and that ``may_describe`` allows (Kafka
    resolves with the heartbeating member's principal: topics it may not DESCRIBE are left out). An expression
    that no longer compiles (a log written by another version) resolves to nothing."""
    compiled: dict[str, re.Pattern[str] | None] = {}
    for regex in regexes:
        try:
            compiled[regex] = check(regex)
        except RegexError:
            compiled[regex] = None
    found: dict[str, set[str]] = {regex: set() for regex in compiled}
    allowed: dict[str, bool] = {}
    for topic in topics:
        for regex, pattern in compiled.items():
            if pattern is not None and pattern.fullmatch(topic):
                if topic not in allowed:
                    allowed[topic] = may_describe(topic)
                if allowed[topic]:
                    found[regex].add(topic)
    return {regex: frozenset(names) for regex, names in found.items()}


def topics_fingerprint(topic_ids: Mapping[str, object]) -> int:
    """A signed int64 of the topics (name and id) a resolution scanned: another value means topics were created
    or deleted (or recreated under a new id) since. pylog's ``Version`` of the regex record (Kafka writes the
    offset of its metadata image)."""
    text = "\n".join(f"{name}\t{topic_ids[name]}" for name in sorted(topic_ids))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)
