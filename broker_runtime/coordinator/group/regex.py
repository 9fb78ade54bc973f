"""Regular-expression subscriptions of consumer groups (KIP-848 ``SubscribedTopicRegex``): the check of a member's
expression and its resolution to topic names, as Kafka's ``GroupMetadataManager`` resolves them on the
coordinator (``refreshRegularExpressions``).

Engine: Kafka compiles the expression with RE2J (``Pattern.compile(regex)``, in
``Utils.throwIfRegularExpressionIsInvalid``), a Java port of Google's RE2; pylog compiles it with RE2 itself (the
``google-re2`` package, module ``re2``). Both match in time linear in the topic name whatever the expression
(``(a|aa)+``, ``(a+)+`` included): a member's heartbeat cannot stall the coordinator's event loop. Options, as
RE2J's defaults for ``Pattern.compile`` without flags: Perl syntax (``posix_syntax`` off, so Perl classes
``\\d \\w \\s``, ``\\b`` and the inline flags ``(?i) (?m) (?s) (?U)`` are on), leftmost-first (not longest)
match, case-sensitive, ``.`` not matching a newline, ``^``/``$`` at the ends of the name, UTF-8.

What RE2 refuses (backreferences, lookahead and lookbehind, atomic groups, possessive quantifiers,
conditionals, ``\\Z``, counted repetitions above 1000, ...) answers INVALID_REGULAR_EXPRESSION with Kafka's
message, ``SubscribedTopicRegex `<regex>` is not a valid regular expression: <reason>.``, the reason being RE2's
own words (RE2J's are alike: both come from the same parser). Where RE2 (C++) and RE2J differ on syntax:

- ``\\C`` (any byte): RE2 accepts it, RE2J refuses it; pylog refuses it, as Kafka.
- RE2 refuses nested counted repetitions whose product exceeds 1000 (``((a{30}){30}){30}``) and an expression whose
  compiled program exceeds ``MAX_MEM`` bytes (``pattern too large - compile failed``), which RE2J may take: Kafka
  bounds an expression only by the protocol's string length (32767 bytes), RE2J by the JVM's heap. pylog refuses
  these, so an expression costs the coordinator a bounded amount of memory; an alternation of a thousand topic
  names fits.
- Java character classes (``\\p{javaLowerCase}``), which recent RE2J versions read: RE2 refuses them (the Unicode
  classes ``\\pL \\p{Greek}`` both accept). Topic names are ``[a-zA-Z0-9._-]``: an expression both accept
  matches the same topics in both.

Matching: a topic is subscribed when the expression matches its whole name (Java's ``matcher().matches()``:
``fullmatch``), whatever anchors the expression has.

Cost: the coordinator checks a member's expression only when it changes (Kafka's ``GroupMetadataManager``
compiles it then), and :func:`check` remembers its last :data:`CHECKED_MAX` outcomes, accepted and refused (a
refused expression never becomes the member's, so its every heartbeat would check it again): an expression of up
to 32767 characters is compiled once per change, not once per heartbeat.

Thread-safe: compiled RE2 objects are immutable; the outcome cache is guarded by a lock (compiling runs outside
it); the ``re2`` module keeps its own bounded cache (128 compiled expressions) of ``compile``.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import re2

__all__ = ["CHECKED_MAX", "MAX_MEM", "RegexError", "check", "resolve", "topics_fingerprint"]

#: RE2's ``max_mem``: the bytes one compiled expression may take (program and matching cache); a larger one is
#: refused. An alternation of a thousand 30-character topic names takes well under it.
MAX_MEM = 1 << 20

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_MEM
_OPTIONS.encoding = re2.Options.Encoding.UTF8
_OPTIONS.posix_syntax = False
_OPTIONS.longest_match = False
_OPTIONS.perl_classes = True
_OPTIONS.word_boundary = True
_OPTIONS.case_sensitive = True
_OPTIONS.dot_nl = False
_OPTIONS.never_nl = False
_OPTIONS.one_line = False
_OPTIONS.literal = False
_OPTIONS.never_capture = False
# RE2 would write every refused expression to the process's stderr: a member could fill it at will
_OPTIONS.log_errors = False


class Compiled(Protocol):
    """A compiled expression (RE2's): ``fullmatch`` answers a match object or None."""

    def fullmatch(self, text: str) -> object | None: ...


class RegexError(ValueError):
    """The expression is not one pylog resolves; the message says why (Kafka's INVALID_REGULAR_EXPRESSION)."""


def _invalid(regex: str, reason: str) -> RegexError:
    return RegexError(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}.")


def _any_byte_escape(regex: str) -> bool:
    """Whether the expression holds ``\\C`` outside a ``\\Q...\\E`` quote (an escaped backslash before a
    ``C`` is a literal)."""
    i = 0
    while i < len(regex) - 1:
        if regex[i] == "\\":
            nxt = regex[i + 1]
            if nxt == "C":
                return True
            if nxt == "Q":
                end = regex.find("\\E", i + 2)
                if end < 0:
                    return False
                i = end
            i += 2
        else:
            i += 1
    return False


#: How many outcomes of :func:`check` (expression -> compiled, or the refusal's message) are remembered, least
#: recently used first out: at most this many expressions (each under 32767 characters) and their compiled
#: programs (each under :data:`MAX_MEM`, shared with the ``re2`` module's own cache).
CHECKED_MAX = 32

_checked: OrderedDict[str, Compiled | str] = OrderedDict()
_checked_lock = threading.Lock()


def check(regex: str) -> Compiled:
    """The compiled expression, or :class:`RegexError` saying what RE2 (or RE2J) refuses in it (a remembered
    outcome when the expression is one of the last :data:`CHECKED_MAX` checked)."""
    with _checked_lock:
        outcome = _checked.get(regex)
        if outcome is not None:
            _checked.move_to_end(regex)
    if outcome is None:
        try:
            outcome = _compile(regex)
        except RegexError as exc:
            outcome = str(exc)
        with _checked_lock:
            _checked[regex] = outcome
            _checked.move_to_end(regex)
            while len(_checked) > CHECKED_MAX:
                _checked.popitem(last=False)
    if isinstance(outcome, str):
        raise RegexError(outcome)
    return outcome


def _compile(regex: str) -> Compiled:
    if _any_byte_escape(regex):
        raise _invalid(regex, "invalid escape sequence: \\C")  # RE2J has no \C (any byte)
    try:
        compiled: Compiled = re2.compile(regex, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise _invalid(regex, str(reason)) from None
    except UnicodeError as exc:
        raise _invalid(regex, f"not UTF-8 ({exc})") from None
    return compiled


def resolve(
    regexes: Iterable[str], topics: Iterable[str], may_describe: Callable[[str], bool]
) -> dict[str, frozenset[str]]:
    """Each expression -> the topics whose whole name it matches and that ``may_describe`` allows (Kafka
    resolves with the heartbeating member's principal: topics it may not DESCRIBE are left out). An expression
    that no longer compiles (a log written by another version) resolves to nothing."""
    compiled: dict[str, Compiled | None] = {}
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
