"""The console's state-changing actions, off unless the console was started with ``--allow-writes``
(``ConsoleServer(allow_writes=True)``, ``start_console(..., allow_writes=True)``): reset a consumer group's
committed offsets of a topic, and delete the records of a partition before an offset. Both go through the Kafka
protocol with pylog's client as Kafka's tools do them (``kafka-consumer-groups --reset-offsets``: the admin
OffsetCommit of a group without active members; ``kafka-delete-records``: DeleteRecords), so they work on Apache
Kafka too.

Routes (POST only; the page forms are offered only with the flag): ``POST /groups/G/reset-offsets`` (form
fields ``topic``, ``to`` = earliest | latest | timestamp | offset, ``value``) and ``POST
/topics/T/delete-records`` (``partition``, ``before``; -1 is the high watermark). Without the flag every POST is
a 403 page naming the flag, before its form is read.

Confirmation: a POST without ``confirm=yes`` changes nothing: it reads the cluster (:func:`model.reset_plan`,
:func:`model.delete_plan`) and answers a page of what would happen (the group's state, each partition's committed
-> new offset; the offsets that go), whose form carries exactly that plan (``plan=P:O,...``; ``before``) with
``confirm=yes``; that second POST carries it out. A reset is refused (409, Kafka's tool's message) unless the
group is Empty or Dead, checked again when confirmed; the broker may still refuse (its error is shown).

Cross-site requests: every form carries the console process's secret token (``csrf_token``, 32 random bytes made
at start, never logged), compared in constant time; the request's ``Origin`` (or, without one, its ``Referer``)
must be this console's own origin (``http://`` + the Host header, itself one of the console's names by the
server's 421 rule, on every binding: a rebound name never gets here, so its pages cannot post as "own"); a
failure is a 403 and a WARNING. The console's pages send ``Referrer-Policy: same-origin`` so its own forms carry
their origin.

Authorization is the broker's: the actions run as the console's principal, and the broker's refusal (e.g.
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED) is the answer page. Audit: every carried-out action, done
or refused by the broker, is logged at INFO on ``broker_runtime.console`` (the console's principal, the HTTP
peer, what, the result); never the token or a credential.

Threading: the handlers run on the server's event loop; every Kafka call goes through the server's one worker
thread (the ``kafka`` callable given at construction).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from broker_runtime.client import KafkaClient
from broker_runtime.console import model, render
from broker_runtime.console.query import BadRequest, int64, parse_time
from broker_runtime.errors import KafkaError
from broker_runtime.security import ClientSecurity

__all__ = ["Actions", "principal_of"]

_log = logging.getLogger("broker_runtime.console")

T = TypeVar("T")
Kafka = Callable[[Callable[[KafkaClient], T]], Awaitable[T]]

#: The flag that offers the actions, as the pages and the refusal name it.
FLAG = "--allow-writes"
#: The most partitions a confirmed reset's plan may carry (a bound on the work one POST causes).
MAX_PLAN_PARTITIONS = 100000


class _Refused(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title = status, title


def principal_of(security: ClientSecurity | None) -> str:
    """Who the console acts as, for the audit log: its SASL user, else what its connection authenticates."""
    if security is not None and security.sasl_username is not None:
        return f"User:{security.sasl_username}"
    if security is not None and security.uses_ssl:
        return "the console's TLS identity"
    return "User:ANONYMOUS"


class Actions:
    """The actions of one console: its routes, its page forms and its secret token; see the module docstring."""

    def __init__(self, *, allow_writes: bool, kafka: Kafka[Any], principal: str) -> None:
        self.allow_writes = allow_writes
        self._kafka = kafka
        self._principal = principal
        self._token = secrets.token_urlsafe(32)

    # --- what the server wires in -------------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        if not self.allow_writes:
            return [web.post("/{tail:.*}", self._writes_off)]
        return [
            web.post("/groups/{group}/reset-offsets", self._reset_offsets),
            web.post("/topics/{topic}/delete-records", self._delete_records),
        ]

    @web.middleware
    async def note(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """With the flag, every page's foot says that actions are offered instead of "read-only"."""
        response = await handler(request)
        if self.allow_writes and isinstance(response, web.Response) and response.text:
            response.text = response.text.replace(render.READ_ONLY_NOTE, render.WRITES_NOTE)
        return response

    def group_form(self, detail: model.GroupDetail) -> str:
        if not self.allow_writes:
            return ""
        topics = sorted({row[0] for row in detail.offsets})
        return render.reset_offsets_form(detail.group_id, topics, self._token)

    def topic_form(self, detail: model.TopicDetail) -> str:
        if not self.allow_writes:
            return ""
        return render.delete_records_form(detail.name, [p.partition for p in detail.partitions], self._token)

    # --- the checks every action passes -------------------------------------------------------------------------

    async def _writes_off(self, request: web.Request) -> web.StreamResponse:
        return _page(
            render.error_page(
                request.path,
                f"this console is read-only: state-changing actions (reset offsets, delete records) are offered "
                f"only when it is started with {FLAG} (pylog-broker console {FLAG}; "
                "start_console(..., allow_writes=True))",
                "Forbidden",
            ),
            403,
        )

    async def _checked_form(self, request: web.Request) -> Any:
        """The POST's form, once its origin and token are this console's; else :class:`_Refused` (403)."""
        own = f"http://{request.host}"
        origin = request.headers.get("Origin")
        if origin is not None:
            if origin != own:
                raise self._forbidden(request, f"the request comes from origin {origin[:100]!r}, not {own!r}")
        else:
            referer = request.headers.get("Referer")
            if referer is None:
                raise self._forbidden(
                    request, "the request names no Origin nor Referer (a browser sends them)"
                )
            if not (referer == own or referer.startswith(own + "/")):
                raise self._forbidden(request, f"the request comes from {referer[:100]!r}, not {own!r}")
        form = await request.post()
        given = form.get("csrf_token")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self._token.encode()):
            what = "no" if given is None else "a wrong"
            raise self._forbidden(request, f"the form carries {what} csrf_token (reload the console's page)")
        return form

    def _forbidden(self, request: web.Request, why: str) -> _Refused:
        _log.warning("console: refused POST %s from %s: %s", request.path[:200], request.remote, why)
        return _Refused(403, "Forbidden (cross-site request check)", why)

    def _audit(self, request: web.Request, what: str, result: str) -> None:
        _log.info(
            "console action by %s (HTTP peer %s): %s: %s", self._principal, request.remote, what, result
        )

    async def _run(self, request: web.Request, what: str, fn: Callable[[KafkaClient], T]) -> T:
        """Carry out one action on the worker thread, audited whatever the outcome."""
        try:
            result = await self._kafka(fn)
        except _Refused as exc:
            self._audit(request, what, f"refused: {exc}")
            raise
        except KafkaError as exc:
            self._audit(request, what, f"failed: {exc}")
            raise
        return result

    # --- reset a group's offsets --------------------------------------------------------------------------------

    async def _reset_offsets(self, request: web.Request) -> web.StreamResponse:
        try:
            form = await self._checked_form(request)
            group = request.match_info["group"]
            topic = str(form.get("topic", "")).strip()
            if not topic:
                raise BadRequest("topic: name the topic whose offsets to reset")
            target = str(form.get("to", ""))
            if target not in model.RESET_TARGETS:
                raise BadRequest(f"to={target[:40]!r}: expected one of {', '.join(model.RESET_TARGETS)}")
            text = str(form.get("value", "")).strip()
            value: int | None = None
            if target == "timestamp":
                if not text:
                    raise BadRequest("value: a reset to a timestamp needs the time (ms or ISO-8601)")
                value = parse_time(text)
            elif target == "offset":
                value = int64("value", text)
                if value < 0:
                    raise BadRequest(f"value={value}: an offset is 0 or more")
            if form.get("confirm") != "yes":
                plan = await self._kafka(lambda c: model.reset_plan(c, group, topic, target, value))
                _resettable(plan.group, plan.state)
                return _page(render.reset_confirm_page(plan, self._token))
            offsets = _plan(str(form.get("plan", "")), topic)
            what = f"reset offsets of group {group!r} to {_shown(offsets)}"

            def reset(client: KafkaClient) -> None:
                _resettable(group, model.group_state(client, group))
                client.groups.commit_offsets(group, offsets)

            await self._run(request, what, reset)
            self._audit(request, what, "done")
            return _page(
                render.action_done_page(
                    f"Offsets of group {group} reset",
                    f"Committed {_shown(offsets)} for group {group}.",
                    render.link("groups", group),
                    f"group {group}",
                )
            )
        except _Refused as exc:
            return _page(render.error_page(exc.title, str(exc), "Refused"), exc.status)

    # --- delete records -----------------------------------------------------------------------------------------

    async def _delete_records(self, request: web.Request) -> web.StreamResponse:
        try:
            form = await self._checked_form(request)
            topic = request.match_info["topic"]
            partition = int64("partition", str(form.get("partition", "")).strip())
            before = int64("before", str(form.get("before", "")).strip())
            if before < -1:
                raise BadRequest(f"before={before}: an offset, or -1 for the high watermark")
            if form.get("confirm") != "yes":
                plan = await self._kafka(lambda c: model.delete_plan(c, topic, partition, before))
                return _page(render.delete_confirm_page(plan, self._token))
            tp = (topic, partition)
            what = f"delete records of {topic}-{partition} before {before}"

            def delete(client: KafkaClient) -> int:
                found = client.admin.delete_records({tp: before})[tp]
                if isinstance(found, KafkaError):
                    raise found
                return found

            low = await self._run(request, what, delete)
            self._audit(request, what, f"done, log start offset {low}")
            return _page(
                render.action_done_page(
                    f"Records of {topic}-{partition} deleted",
                    f"The log start offset of {topic}-{partition} is now {low}.",
                    render.link("topics", topic),
                    f"topic {topic}",
                )
            )
        except _Refused as exc:
            return _page(render.error_page(exc.title, str(exc), "Refused"), exc.status)


def _resettable(group: str, state: str) -> None:
    if state not in model.RESETTABLE_STATES:
        raise _Refused(
            409,
            f"Group {group} is not empty",
            f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}.",
        )


def _plan(text: str, topic: str) -> dict[tuple[str, int], int]:
    """A confirmed reset's ``P:O,P:O`` (the offsets its confirmation page showed)."""
    out: dict[tuple[str, int], int] = {}
    items = [i for i in text.split(",") if i.strip()]
    if not items or len(items) > MAX_PLAN_PARTITIONS:
        raise BadRequest("plan: expected PARTITION:OFFSET,... (submit the confirmation page's form)")
    for item in items:
        p, sep, o = item.strip().partition(":")
        if not sep:
            raise BadRequest(f"plan item {item[:40]!r}: expected PARTITION:OFFSET")
        partition, offset = int64("partition", p), int64("offset", o)
        if not 0 <= partition < 1 << 31 or offset < 0:
            raise BadRequest(f"plan item {item[:40]!r}: a partition and an offset are 0 or more")
        out[(topic, partition)] = offset
    return out


def _shown(offsets: dict[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}-{p} -> {o}" for (t, p), o in sorted(offsets.items()))


def _page(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
