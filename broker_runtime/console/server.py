"""The console's web server: an aiohttp application on its own event loop thread, and one worker thread that owns
the Kafka client.

Threading: aiohttp's handlers run on the server's event loop; every Kafka request runs on ONE worker thread
(``ThreadPoolExecutor(max_workers=1)``), which creates the client on first use and alone touches it (the client
is not thread-safe), so pages are answered one Kafka call sequence at a time. :class:`ConsoleServer` starts both
and stops both (``stop()``: the site, then the worker and its client).

Answers: a page is HTML; a broker's error is a page that names it (status 403 for an authorization failure, 404
for an unknown topic or group, 502 for any other broker error or an unreachable broker), a bad query 400. Every
answer carries a Content-Security-Policy that allows no inline script and no foreign resource (defence in depth
behind the renderer's escaping; the one script allowed is the chart's, same-origin, :mod:`.rates`) and
``X-Content-Type-Options: nosniff``. Only GET is routed here; the POSTs of the state-changing actions, refused
unless ``allow_writes``, are :mod:`.actions`' (confirmation, CSRF token, origin).

DNS rebinding: every request (GET and POST) whose ``Host`` header is not one of the console's names, with the
bound port, is answered 421 before any Kafka call, so a web page whose name a hostile DNS server points at the
console's address cannot read it (nor, with ``allow_writes``, act on it) from the operator's browser. The names:
the ``allowed_hosts`` given (``--allowed-host NAME``, repeatable: host names or IP literals, ``NAME:PORT`` for
another port, e.g. behind a proxy); the bound address (for a loopback binding also ``127.0.0.1``, ``localhost`` and
``[::1]``); and, on a wildcard binding (``0.0.0.0``, ``::``), which has no name of its own, the IP literal of the
local address the request's connection arrived at (and the loopback names when that is a loopback address). A
page of a rebound name always sends that name, never an IP literal, so an IP literal of this machine is the
console's own origin. Query integers are Kafka's int64 range; anything else is a 400.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from broker_runtime.client import KafkaClient
from broker_runtime.console import actions, model, rates, render, spark_writes
from broker_runtime.console.query import BadRequest as _BadRequest
from broker_runtime.console.query import int64 as _int64
from broker_runtime.console.query import parse_time
from broker_runtime.errors import BrokerConnectionError, ErrorCode, KafkaError, PylogError
from broker_runtime.security import ClientSecurity

__all__ = ["ConsoleServer", "parse_time"]

_log = logging.getLogger("broker_runtime.console")

T = TypeVar("T")

_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_FORBIDDEN = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
_NOT_FOUND = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.BROKER_NOT_AVAILABLE,
}


_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("0.0.0.0", "::", "")
#: The command-line option that names the console's host names (one home for its spelling).
ALLOWED_HOST_FLAG = "--allowed-host"


def allowed_host_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as the ``Host`` headers they match: lower-case, IPv6 literals in brackets, a port only when given
    (``NAME:PORT``); ValueError naming a malformed one."""
    out = []
    for raw in names:
        name = raw.strip().lower()
        if name.count(":") > 1 and not name.startswith("["):  # an unbracketed IPv6 literal
            name = f"[{name}]"
        if name.startswith("["):
            inside, bracket, rest = name.partition("]")
            host, port, address = inside + "]", rest[1:], _ip(inside + "]")
            ok = bool(bracket) and rest in ("", f":{port}") and (not rest or bool(port))
            ok = ok and address is not None and address.version == 6
        else:
            host, sep, port = name.partition(":")
            ok = bool(host) and all(c.isalnum() or c in ".-_" for c in host) and (not sep or bool(port))
        if not ok or (port and not (port.isdigit() and int(port) <= 65535)):
            raise ValueError(
                f"{ALLOWED_HOST_FLAG} {raw!r}: expected a host name or IP literal as a browser sends it in the Host "
                "header, optionally with :PORT (e.g. console.example.com, 10.0.0.5, [fd00::5], proxy.example:443)"
            )
        out.append(f"{host}:{port}" if port else host)
    return tuple(out)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address of a literal (IPv6 in brackets or bare; an IPv4-mapped one as its IPv4), else None."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _int_arg(request: web.Request, name: str) -> int | None:
    text = request.query.get(name, "").strip()
    if not text:
        return None
    return _int64(name, text)


class ConsoleServer:
    """The console on ``host:port`` (0: any free port; :attr:`url` names the bound one) reading the cluster at
    ``bootstrap`` with ``security``; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        *,
        security: ClientSecurity | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout_ms: int = 30000,
        max_transaction_timeout_ms: int = model.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        allow_writes: bool = False,
        chart_interval_s: float = rates.DEFAULT_INTERVAL_S,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self._bootstrap = bootstrap
        self._names = allowed_host_names(allowed_hosts)
        self._security = security
        self._host, self._port = host, port
        self._request_timeout_ms = request_timeout_ms
        self._max_txn_ms = max_transaction_timeout_ms
        self._worker = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="pylog-console-kafka"
        )
        self._client: KafkaClient | None = None  # the worker thread's alone
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self._allowed_hosts: frozenset[str] = frozenset()  # Host headers served; set when bound
        self._wildcard = host in _WILDCARDS
        self._actions = actions.Actions(
            allow_writes=allow_writes, kafka=self._kafka, principal=actions.principal_of(security)
        )
        self._rates = rates.Rates(chart_interval_s)
        self._ticker: asyncio.Task[None] | None = None
        self._tick_error = ""

    # --- the Kafka side (worker thread) -------------------------------------------------------------------------

    def _with_client(self, fn: Callable[[KafkaClient], T]) -> T:
        if self._client is None:
            self._client = KafkaClient(
                self._bootstrap,
                client_id="pylog-console",
                request_timeout_ms=self._request_timeout_ms,
                retries=2,
                security=self._security,
            )
        try:
            return fn(self._client)
        except BrokerConnectionError:
            self._client.close()
            self._client = None
            raise

    async def _kafka(self, fn: Callable[[KafkaClient], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, self._with_client, fn)

    # --- pages --------------------------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._host_check, self._actions.note, self._errors])
        app.add_routes(
            [
                web.get("/", self._cluster),
                web.get("/brokers/{node}", self._broker),
                web.get("/topics", self._topics),
                web.get("/topics/{topic}", self._topic),
                web.get("/rates/{topic}", self._rates_json),
                web.get(render.CHART_SCRIPT, self._chart_js),
                web.get("/topics/{topic}/{partition}", self._records),
                web.get("/groups", self._groups),
                web.get("/groups/{group}", self._group),
                web.get("/transactions", self._transactions),
            ]
        )
        app.add_routes(self._actions.routes())
        return app

    @web.middleware
    async def _host_check(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not self._host_allowed(request):
            _log.warning(
                "console: refused a request for Host %r (not this console's address)", request.host[:100]
            )
            response = _html(
                render.error_page(
                    request.path,
                    f"Host {request.host!r} is not this console's address (a name the console is reached by "
                    f"must be given at start: {ALLOWED_HOST_FLAG} NAME)",
                    "Misdirected request",
                ),
                421,
            )
            response.headers["Content-Security-Policy"] = _CSP
            return response
        return await handler(request)

    def _host_allowed(self, request: web.Request) -> bool:
        host = request.host.lower()
        if host in self._allowed_hosts:
            return True
        if not self._wildcard or request.transport is None:
            return False
        # a wildcard binding: the IP literal of the local address this connection arrived at, with the bound port
        sockname = request.transport.get_extra_info("sockname")
        if not isinstance(sockname, tuple) or len(sockname) < 2:
            return False
        local = _ip(str(sockname[0]))
        name, sep, port = host.rpartition(":")
        if local is None or not sep or port != str(sockname[1]):
            return False
        if local.is_loopback and name in _LOOPBACK_NAMES:
            return True
        return _ip(name) == local and (name.startswith("[") == (local.version == 6))

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        title = request.path
        try:
            response = await handler(request)
        except _BadRequest as exc:
            response = _html(render.error_page(title, str(exc), "Bad request"), 400)
        except BrokerConnectionError as exc:
            response = _html(render.error_page(title, f"cannot reach the cluster: {exc}", "Unreachable"), 502)
        except KafkaError as exc:
            code = exc.code
            status = 403 if code in _FORBIDDEN else 404 if code in _NOT_FOUND else 502
            hint = "Not authorized" if status == 403 else "Not found" if status == 404 else "Broker error"
            response = _html(render.error_page(title, str(exc), hint), status)
        except PylogError as exc:
            response = _html(render.error_page(title, str(exc), "Error"), 502)
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # the actions' forms carry their Origin
        return response

    async def _cluster(self, request: web.Request) -> web.StreamResponse:
        return _html(render.cluster_page(await self._kafka(model.cluster)))

    async def _broker(self, request: web.Request) -> web.StreamResponse:
        node = _int64("broker", request.match_info["node"])
        return _html(render.broker_configs_page(await self._kafka(lambda c: model.broker_configs(c, node))))

    async def _topics(self, request: web.Request) -> web.StreamResponse:
        return _html(render.topics_page(await self._kafka(model.topics)))

    async def _topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        detail, writes = await self._kafka(lambda c: (model.topic(c, name), spark_writes.writes_of(c, name)))
        if self._rates.watch(name):  # the chart's first sample now, not at the next tick
            await self._kafka(self._rates.sample)
        return _html(
            render.topic_page(
                detail,
                actions=self._actions.topic_form(detail),
                chart_url=render.link("rates", name),
                writes=writes,
            )
        )

    async def _rates_json(self, request: web.Request) -> web.StreamResponse:
        """The topic's chart data (:mod:`.rates`); asking for it keeps the topic watched."""
        name = request.match_info["topic"]
        if self._rates.watch(name):  # its first sample now, not at the next tick (once per new topic)
            await self._kafka(self._rates.sample)
        return web.json_response(self._rates.series(name))

    async def _chart_js(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=rates.CHART_JS, content_type="text/javascript", charset="utf-8")

    async def _tick(self) -> None:
        """Samples the watched topics every ``interval_s`` on the worker thread (:mod:`.rates`)."""
        while True:
            await asyncio.sleep(self._rates.interval_s)
            if not self._rates.watched():
                continue
            try:
                await self._kafka(self._rates.sample)
                self._tick_error = ""
            except (PylogError, OSError) as exc:
                if str(exc) != self._tick_error:  # once per distinct failure, not every tick
                    self._tick_error = str(exc)
                    _log.warning("console: sampling the charts' topics failed: %s", exc)

    async def _records(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        partition = _int64("partition", request.match_info["partition"])
        offset = _int_arg(request, "offset")
        stamp = request.query.get("timestamp", "").strip()
        timestamp_ms = parse_time(stamp) if stamp and offset is None else None
        max_bytes = _int_arg(request, "max_bytes") or model.DEFAULT_PAGE_BYTES
        isolation = request.query.get("isolation", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed"):
            raise _BadRequest(f"isolation={isolation!r}: expected read_uncommitted or read_committed")
        how = request.query.get("render", "auto")
        if how not in ("auto", "text", "json", "hex"):
            raise _BadRequest(f"render={how!r}: expected auto, text, json or hex")
        contains = request.query.get("filter", "") or None
        scan_bytes = _int_arg(request, "scan_bytes") or model.DEFAULT_SCAN_BYTES
        page = await self._kafka(
            lambda c: model.record_page(
                c,
                name,
                partition,
                offset=offset,
                timestamp_ms=timestamp_ms,
                max_bytes=max_bytes,
                read_committed=isolation == "read_committed",
                contains=contains,
                scan_bytes=scan_bytes,
            )
        )
        return _html(render.records_page(page, how))

    async def _groups(self, request: web.Request) -> web.StreamResponse:
        return _html(render.groups_page(await self._kafka(model.groups)))

    async def _group(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["group"]
        detail = await self._kafka(lambda c: model.group(c, name))
        return _html(render.group_page(detail, actions=self._actions.group_form(detail)))

    async def _transactions(self, request: web.Request) -> web.StreamResponse:
        found = await self._kafka(lambda c: model.transactions(c, max_timeout_ms=self._max_txn_ms))
        return _html(render.transactions_page(found))

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> ConsoleServer:
        """Serve from a thread of its own; returns when the socket listens (:attr:`url` set). Once: a started
        server (e.g. one ``start_console`` returned, then used in a ``with``) is returned as it is."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="pylog-console-http", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._worker.shutdown(wait=False)
            raise failure[0]
        if self._host not in ("127.0.0.1", "::1", "localhost"):
            _log.warning(
                "the console listens on %s, not on loopback: whoever reaches it reads the cluster with the "
                "console's credentials (it has no login of its own); it answers the Host names %s%s",
                self._host,
                ", ".join(sorted(self._allowed_hosts)) or "(none)",
                " and this machine's IP addresses" if self._wildcard else "",
            )
        if self._actions.allow_writes:
            _log.warning(
                "the console at %s offers state-changing actions (--allow-writes: reset offsets, delete records) "
                "as %s",
                self.url,
                actions.principal_of(self._security),
            )
        return self

    async def _open(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"
        names: set[str] = set()
        if not self._wildcard:  # a wildcard binding has no name: its IP literals are checked per connection
            names.update((shown, self._host.lower()))
            if self._host in ("127.0.0.1", "::1", "localhost"):
                names.update(_LOOPBACK_NAMES)
        with_port = {n for n in self._names if not n.endswith("]") and ":" in n}
        names.update(set(self._names) - with_port)
        self._allowed_hosts = frozenset({f"{n}:{port}" for n in names} | with_port)

    async def _close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._worker.submit(self._close_client).result(10)
        self._worker.shutdown(wait=True)

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
