"""The console's HTML: one function per page, from the dataclasses of :mod:`broker_runtime.console.model` to a
whole document (server-rendered, one small inline style sheet; the topic page's chart is drawn by the one
same-origin script, :data:`broker_runtime.console.rates.CHART_JS`, from its JSON).

Invariant: every string that reaches the page from the cluster (topic and group names, keys, values, headers,
client ids, error messages) or from the request passes through :func:`esc` (``html.escape`` with quotes) exactly
once, here; nothing else writes markup. Record contents are hostile input: a value ``<script>...`` shows as that
text. Links are built with :func:`link` (path segments percent-encoded). Pure functions; thread-safe.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlencode

from broker_runtime.console.model import (
    DEFAULT_SCAN_BYTES,
    MAX_FILTER_ROWS,
    RESET_TARGETS,
    BrokerConfigs,
    Cluster,
    ConfigRow,
    DeletePlan,
    FilterScan,
    GroupDetail,
    GroupRow,
    RecordPage,
    ResetPlan,
    TopicDetail,
    TopicRow,
    Transactions,
    render_bytes,
)
from broker_runtime.console.spark_writes import SparkWrites
from broker_runtime.protocol.messages.describe_configs import ConfigSource
from broker_runtime.protocol.spark_writes import TOPIC as SPARK_WRITES_TOPIC

__all__ = [
    "CHART_SCRIPT",
    "READ_ONLY_NOTE",
    "WRITES_NOTE",
    "action_done_page",
    "broker_configs_page",
    "cluster_page",
    "delete_confirm_page",
    "delete_records_form",
    "error_page",
    "esc",
    "group_page",
    "groups_page",
    "link",
    "records_page",
    "reset_confirm_page",
    "reset_offsets_form",
    "topic_page",
    "topics_page",
    "transactions_page",
]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9;font-size:14px}
nav{background:#1d2433;padding:8px 16px}nav a{color:#fff;margin-right:18px;text-decoration:none;font-weight:600}
main{padding:12px 20px}h1{font-size:20px;margin:6px 0 12px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;margin-bottom:12px}
th,td{border:1px solid #d6d9e0;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eceef2}
td.num{text-align:right;font-variant-numeric:tabular-nums}pre{margin:0;white-space:pre-wrap;max-width:60em}
.error{background:#fde8e8;border:1px solid #e0a0a0;padding:8px;margin:8px 0}
.flag{color:#fff;background:#c0392b;padding:1px 6px;border-radius:3px;font-weight:600}
.open{color:#1d2433;background:#f6c343;padding:1px 6px;border-radius:3px}
.aborted{color:#fff;background:#8e44ad;padding:1px 6px;border-radius:3px}
.control{color:#fff;background:#566;padding:1px 6px;border-radius:3px}
.short{background:#fff3cd;border:1px solid #c0392b;padding:6px;font-weight:600}
.kind{color:#889;font-size:11px}.note{color:#556}form{margin:8px 0}
.chart{display:inline-block;background:#fff;border:1px solid #d6d9e0;margin:0 12px 8px 0;padding:4px}
.chart svg{display:block;background:#fbfcfd}.legend{font-size:12px}
"""
#: Where the chart script is served (same origin: the Content-Security-Policy allows script-src 'self' only).
CHART_SCRIPT = "/static/chart.js"
_NAV = (
    ("/", "Cluster"),
    ("/topics", "Topics"),
    ("/groups", "Consumer groups"),
    ("/transactions", "Transactions"),
)


#: The foot of every page; a console started with --allow-writes answers WRITES_NOTE in its place (.actions).
READ_ONLY_NOTE = '<p class="note">Read-only: this console changes nothing on the cluster.</p>'
WRITES_NOTE = (
    '<p class="note" id="writes-note">Started with --allow-writes: the reset of a group\'s offsets and the '
    "deletion of records are offered, each after a confirmation page.</p>"
)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def link(*segments: object, query: dict[str, object] | None = None) -> str:
    path = "/" + "/".join(quote(str(s), safe="") for s in segments)
    return path + ("?" + urlencode({k: str(v) for k, v in query.items()}) if query else "")


def _a(href: str, text: object, cls: str = "") -> str:
    return f'<a href="{esc(href)}"{f" class={esc(cls)!r}" if cls else ""}>{esc(text)}</a>'


def _page(title: str, body: str, *, read_only_note: bool = True, script: bool = False) -> str:
    nav = "".join(_a(href, text) for href, text in _NAV)
    foot = READ_ONLY_NOTE if read_only_note else ""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)} - pylog console</title><style>{_STYLE}</style></head>"
        f"<body><nav>{nav}</nav><main><h1>{esc(title)}</h1>{body}{foot}</main>"
        + (f'<script src="{CHART_SCRIPT}"></script>' if script else "")
        + "</body></html>"
    )


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], table_id: str = "") -> str:
    """``rows`` are cells of markup already escaped (built with esc / _a / _num)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(markup: str, cls: str = "") -> str:
    return f'<td class="{cls}">{markup}</td>' if cls else f"<td>{markup}</td>"


def _num(value: object) -> str:
    return _td(esc(value), "num")


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    return (
        datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    )


def _ids(ids: Iterable[int]) -> str:
    return esc(",".join(str(i) for i in ids))


def error_page(title: str, message: str, status_hint: str = "") -> str:
    """A failed page: what the broker (or the request) answered, never an empty table."""
    body = (
        f'<div class="error" id="error"><strong>{esc(status_hint or "Error")}</strong>: {esc(message)}</div>'
    )
    return _page(title, body)


def _listeners(c: Cluster, node: int) -> list[str]:
    found = c.listeners.get(node)
    if found is None:
        return [_td("-"), _td("-")]
    if found.error:
        return [_td(f'<span class="kind">{esc(found.error)}</span>'), _td("-")]
    return [_td(esc(found.listeners or "-")), _td(esc(found.advertised or "-"))]


def cluster_page(c: Cluster) -> str:
    brokers = _table(
        ["node", "host", "port", "rack", "role", "listeners", "advertised listeners", "configs"],
        (
            [
                _num(n),
                _td(esc(h)),
                _num(p),
                _td(esc(r or "-")),
                _td("controller" if n == c.controller_id else "broker"),
                *_listeners(c, n),
                _td(_a(link("brokers", n), "configs")),
            ]
            for n, h, p, r in c.brokers
        ),
        "brokers",
    )
    versions = _table(
        ["API", "min", "max"], ([_td(esc(n)), _num(lo), _num(hi)] for n, lo, hi in c.api_versions), "versions"
    )
    return _page(
        "Cluster",
        f"<p>cluster id <code id='cluster-id'>{esc(c.cluster_id or '-')}</code>, controller "
        f"<code id='controller'>{esc(c.controller_id)}</code></p>"
        f"<h2>Brokers</h2>{brokers}<h2>API versions of the broker this console talks to</h2>{versions}",
    )


def topics_page(rows: list[TopicRow]) -> str:
    table = _table(
        ["topic", "partitions", "replication factor", "under-replicated", "internal", "error"],
        (
            [
                _td(_a(link("topics", t.name), t.name)),
                _num(t.partitions),
                _num(t.replication),
                _num(t.under_replicated),
                _td("yes" if t.internal else ""),
                _td(esc(t.error or "")),
            ]
            for t in rows
        ),
        "topics",
    )
    return _page("Topics", f"<p>{len(rows)} topics this principal may describe.</p>{table}")


def topic_page(
    t: TopicDetail, *, actions: str = "", chart_url: str | None = None, writes: SparkWrites | None = None
) -> str:
    """A topic: partitions, ``actions`` (the markup of the state-changing actions' forms,
    :func:`delete_records_form`, if offered), the live chart fed by ``chart_url`` (:mod:`.rates`), the Spark
    writes recorded for it (:mod:`.spark_writes`), configs."""
    parts = _table(
        [
            "partition",
            "leader",
            "replicas",
            "ISR",
            "log start",
            "high watermark",
            "last stable offset",
            "size on disk",
            "records",
        ],
        (
            [
                _td(_a(link("topics", t.name, p.partition), p.partition)),
                _num(p.leader),
                _td(_ids(p.replicas)),
                _td(_ids(p.isr)),
                _num(p.log_start),
                _num(p.high_watermark),
                _num(p.last_stable),
                _td(esc(_sizes(t.sizes.get(p.partition), len(p.replicas))), "num"),
                _td(_a(link("topics", t.name, p.partition), "browse")),
            ]
            for p in t.partitions
        ),
        "partitions",
    )
    if t.sizes_error:
        parts += f'<div class="error" id="sizes-error">size on disk: {esc(t.sizes_error)}</div>'
    if t.configs_error:
        configs = f'<div class="error" id="configs-error">{esc(t.configs_error)}</div>'
    else:
        configs = _configs(t.configs)
    live = "" if chart_url is None else _chart(chart_url)
    spark = "" if writes is None else _spark_writes(writes)
    return _page(
        f"Topic {t.name}",
        f"<h2>Partitions</h2>{parts}{actions}{live}{spark}<h2>Configs</h2>{configs}",
        script=chart_url is not None,
    )


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _sizes(found: list[tuple[int, int]] | None, replicas: int) -> str:
    """One size when every replica holds the same bytes (or one replica), else node: size each."""
    if not found:
        return "-"
    if len({size for _, size in found}) == 1 and len(found) == replicas:
        return _size(found[0][1])
    return ", ".join(f"{node}: {_size(size)}" for node, size in found)


def _source(code: int) -> str:
    try:
        return ConfigSource(code).name
    except ValueError:
        return str(code)


def _configs(rows: list[ConfigRow]) -> str:
    """Configs as DescribeConfigs answered them; a sensitive one shows ``[hidden: sensitive]``, its value never
    kept (:func:`broker_runtime.console.model.config_row`)."""
    return _table(
        ["config", "value", "source"],
        (
            [
                _td(esc(c.name)),
                _td(
                    "<em>[hidden: sensitive]</em>" if c.sensitive else esc("" if c.value is None else c.value)
                ),
                _td(esc(_source(c.source))),
            ]
            for c in rows
        ),
        "configs",
    )


def broker_configs_page(b: BrokerConfigs) -> str:
    return _page(
        f"Broker {b.node} configs",
        f"<p>{len(b.configs)} configs of broker {esc(b.node)} (DescribeConfigs on its broker resource).</p>"
        + _configs(b.configs),
    )


def _bytes(data: bytes | None, how: str) -> str:
    kind, text = render_bytes(data, how)
    return f'<span class="kind">{esc(kind)}</span><pre>{esc(text)}</pre>'


def _txn_mark(txn: str) -> str:
    if txn.startswith("control:"):
        return f'<span class="control">{esc(txn.split(":", 1)[1])} marker</span>'
    if txn == "aborted":
        return '<span class="aborted">aborted</span>'
    if txn == "open":
        return '<span class="open">open transaction</span>'
    return esc(txn)


def _scan_note(scan: FilterScan) -> str:
    """Where a filtered page's scan stopped and why: the rows shown are all the matches of that range only."""
    why = {
        "end": "reached the end of the log: no more matches",
        "bytes": f"STOPPED SHORT at the scan limit ({scan.limit} bytes): offsets from {scan.stopped_at} on "
        "are not searched (next page continues there)",
        "rows": f"a page of {MAX_FILTER_ROWS} matches is full: the next page continues from {scan.stopped_at}",
    }[scan.reason]
    cls = "short" if scan.reason == "bytes" else "note"
    scanned = (
        f"scanned offsets {scan.start} to {scan.stopped_at - 1}"
        if scan.stopped_at > scan.start
        else f"nothing to scan from offset {scan.start}"
    )
    return (
        f'<p class="{cls}" id="scan-note" data-reason="{esc(scan.reason)}">key or value contains '
        f"<code>{esc(scan.contains)}</code>: {esc(scanned)} ({esc(scan.bytes)} bytes fetched); {esc(why)}</p>"
    )


def records_page(page: RecordPage, how: str) -> str:
    here = ("topics", page.topic, page.partition)
    form = (
        f'<form id="seek" method="get" action="{esc(link(*here))}">'
        f'offset <input name="offset" id="offset" size="10"> or time (ms or ISO-8601 UTC) '
        f'<input name="timestamp" id="timestamp" size="24"> '
        f'bytes <input name="max_bytes" id="max_bytes" size="8" value="{esc(page.max_bytes)}"> '
        f'key or value contains <input name="filter" id="filter" size="16" '
        f'value="{esc(page.scan.contains if page.scan else "")}"> '
        f'scanning at most <input name="scan_bytes" id="scan_bytes" size="9" '
        f'value="{esc(page.scan.limit if page.scan else DEFAULT_SCAN_BYTES)}"> bytes '
        f'<select name="isolation" id="isolation">'
        + "".join(
            f'<option value="{v}"{" selected" if v == page.isolation else ""}>{v}</option>'
            for v in ("read_uncommitted", "read_committed")
        )
        + '</select> <select name="render" id="render">'
        + "".join(
            f'<option value="{v}"{" selected" if v == how else ""}>{v}</option>'
            for v in ("auto", "text", "json", "hex")
        )
        + '</select> <button type="submit" id="go">Go</button></form>'
    )
    info = (
        f"<p>log start {esc(page.log_start)}, high watermark {esc(page.high_watermark)}, last stable offset "
        f"{esc(page.last_stable)}; {esc(page.isolation)}; this page: from offset "
        f'<span id="page-start">{esc(page.start)}</span>, at most {esc(page.max_bytes)} bytes fetched, '
        f'<span id="page-count">{len(page.records)}</span> rows.</p>'
    )
    if page.seek_note:
        info += f'<p class="note" id="seek-note">{esc(page.seek_note)}</p>'
    if page.scan:
        info += _scan_note(page.scan)
    rows = []
    for r in page.records:
        headers = (
            "".join(f"<div>{esc(k)}: <code>{esc(render_bytes(v, how)[1])}</code></div>" for k, v in r.headers)
            or ""
        )
        rows.append(
            [
                _num(r.offset),
                _td(
                    esc(_time(r.timestamp))
                    + f'<div class="kind">{esc(r.timestamp_type)} {esc(r.timestamp)}</div>'
                ),
                _td("" if r.txn.startswith("control:") else _bytes(r.key, how)),
                _td("" if r.txn.startswith("control:") else _bytes(r.value, how)),
                _td(headers),
                _td(
                    _txn_mark(r.txn)
                    + (f' <span class="kind">pid {esc(r.producer_id)}</span>' if r.transactional else "")
                ),
            ]
        )
    table = _table(["offset", "timestamp", "key", "value", "headers", "transaction"], rows, "records")
    nxt = ""
    if page.next_offset > page.start and not (page.scan and page.scan.reason == "end"):
        query: dict[str, object] = {
            "offset": page.next_offset,
            "max_bytes": page.max_bytes,
            "isolation": page.isolation,
            "render": how,
        }
        if page.scan:
            query.update(filter=page.scan.contains, scan_bytes=page.scan.limit)
        nxt = f"<p>{_a(link(*here, query=query), 'next page', 'next')}</p>"
    back = _a(link("topics", page.topic), f"topic {page.topic}")
    return _page(f"Records of {page.topic}-{page.partition}", f"<p>{back}</p>{form}{info}{table}{nxt}")


def groups_page(rows: list[GroupRow]) -> str:
    table = _table(
        ["group", "protocol type", "state"],
        (
            [_td(_a(link("groups", g.group_id), g.group_id)), _td(esc(g.protocol_type)), _td(esc(g.state))]
            for g in rows
        ),
        "groups",
    )
    return _page("Consumer groups", f"<p>{len(rows)} groups this principal may describe.</p>{table}")


def group_page(g: GroupDetail, *, actions: str = "") -> str:
    """``actions``: the markup of the state-changing actions' forms (:func:`reset_offsets_form`), if offered."""
    members = _table(
        ["member", "client id", "host", "assignment"],
        (
            [_td(esc(m)), _td(esc(c)), _td(esc(h)), _td(esc(", ".join(f"{t}-{p}" for t, p in a)))]
            for m, c, h, a in g.members
        ),
        "members",
    )
    offsets = _table(
        ["topic", "partition", "committed offset", "log end offset", "lag", "member"],
        (
            [
                _td(_a(link("topics", t), t)),
                _num(p),
                _num("-" if c is None else c),
                _num(end),
                _td(esc("-" if lag is None else lag), "num lag"),
                _td(esc(m or "-")),
            ]
            for t, p, c, end, lag, m in g.offsets
        ),
        "offsets",
    )
    return _page(
        f"Consumer group {g.group_id}",
        f"<p>state <strong id='state'>{esc(g.state)}</strong>, protocol type {esc(g.protocol_type or '-')}, "
        f"protocol <code>{esc(g.protocol or '-')}</code></p><h2>Members</h2>{members}"
        f"<h2>Committed offsets and lag</h2>{offsets}{actions}",
    )


def transactions_page(t: Transactions) -> str:
    def age(start_ms: int) -> str:
        return "-" if start_ms < 0 else f"{max(t.now_ms - start_ms, 0) / 1000:.1f} s"

    txns = _table(
        ["transactional id", "state", "producer id", "epoch", "age", "timeout", "partitions", "error"],
        (
            [
                _td(esc(x.transactional_id)),
                _td(
                    f'<span class="open">{esc(x.state)}</span>' if x.state == "Ongoing" else esc(x.state),
                ),
                _num(x.producer_id),
                _num(x.producer_epoch),
                _td(esc(age(x.start_ms) if x.state == "Ongoing" else "-"), "num"),
                _num(f"{x.timeout_ms} ms"),
                _td(esc(", ".join(f"{tp}-{p}" for tp, p in x.partitions))),
                _td(esc(x.error or "")),
            ]
            for x in t.transactions
        ),
        "transactions",
    )
    opens = _table(
        [
            "topic",
            "partition",
            "producer id",
            "epoch",
            "transactional id",
            "first offset",
            "last write",
            "status",
        ],
        (
            [
                _td(_a(link("topics", o.topic, o.partition, query={"offset": o.start_offset}), o.topic)),
                _num(o.partition),
                _num(o.producer_id),
                _num(o.producer_epoch),
                _td(esc(o.transactional_id or "-")),
                _num(o.start_offset),
                _td(esc(age(o.last_timestamp)) + " ago", "num"),
                _td('<span class="flag">HANGING</span>' if o.hanging else '<span class="open">open</span>'),
            ]
            for o in t.open_on_partitions
        ),
        "open-transactions",
    )
    errors = "".join(f'<div class="error">{esc(e)}</div>' for e in t.errors)
    return _page(
        "Transactions",
        f"{errors}<h2>Transactions of the coordinators</h2>{txns}"
        f"<h2>Open transactions on partitions</h2><p class='note'>Hanging (Kafka's find-hanging rule): open for "
        f"longer than {esc(t.max_timeout_ms)} ms with no coordinator transaction that includes the partition."
        f"</p>{opens}",
    )


# --- the state-changing actions (offered only with --allow-writes; see broker_runtime.console.actions) ---------


def _hidden(fields: Mapping[str, object]) -> str:
    return "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items())


def reset_offsets_form(group: str, topics: Sequence[str], token: str) -> str:
    """The group page's form: reset the group's offsets of a topic (a POST that first shows the plan)."""
    options = "".join(f'<option value="{t}">{t}</option>' for t in RESET_TARGETS)
    return (
        f'<h2>Reset offsets</h2><form id="reset-form" method="post" action="{esc(link("groups", group, "reset-offsets"))}">'
        f"{_hidden({'csrf_token': token})}"
        f'topic <input name="topic" id="reset-topic" size="24" value="{esc(topics[0] if topics else "")}"> '
        f'to <select name="to" id="reset-to">{options}</select> '
        '<input name="value" id="reset-value" size="24" placeholder="time (ms or ISO-8601) or offset"> '
        '<button type="submit" id="reset-preview">Preview</button></form>'
        '<p class="note">As kafka-consumer-groups --reset-offsets: only while the group has no active members '
        "(Empty); every partition of the topic; an offset is clamped into [log start, end]. The next page shows "
        "the offsets before anything is committed.</p>"
    )


def delete_records_form(topic: str, partitions: Sequence[int], token: str) -> str:
    """The topic page's form: delete the records of a partition before an offset (a POST that first shows what
    goes)."""
    options = "".join(f'<option value="{p}">{p}</option>' for p in partitions)
    return (
        f'<h2>Delete records</h2><form id="delete-form" method="post" '
        f'action="{esc(link("topics", topic, "delete-records"))}">{_hidden({"csrf_token": token})}'
        f'partition <select name="partition" id="delete-partition">{options}</select> '
        'before offset <input name="before" id="delete-before" size="14" placeholder="-1: the high watermark"> '
        '<button type="submit" id="delete-preview">Preview</button></form>'
        '<p class="note">As kafka-delete-records (DeleteRecords): moves the partition\'s log start offset; the '
        "next page shows the offsets that go before anything is deleted.</p>"
    )


def reset_confirm_page(plan: ResetPlan, token: str) -> str:
    """What a reset would commit, and the form that commits exactly these offsets."""
    rows = _table(
        ["topic", "partition", "committed offset", "new offset", "note"],
        (
            [_td(esc(plan.topic)), _num(p), _num("-" if old is None else old), _num(new), _td(esc(note))]
            for p, old, new, note in plan.rows
        ),
        "plan",
    )
    wanted = plan.target if plan.value is None else f"{plan.target} {plan.value}"
    fields = {
        "csrf_token": token,
        "topic": plan.topic,
        "to": plan.target,
        "value": "" if plan.value is None else plan.value,
        "plan": ",".join(f"{p}:{new}" for p, _, new, _ in plan.rows),
        "confirm": "yes",
    }
    return _page(
        f"Confirm: reset the offsets of group {plan.group}",
        f"<p>Group <strong>{esc(plan.group)}</strong> (state <strong id='state'>{esc(plan.state)}</strong>), "
        f"topic <strong>{esc(plan.topic)}</strong>, to {esc(wanted)}: these offsets will be committed.</p>{rows}"
        f'<form id="confirm-form" method="post" action="{esc(link("groups", plan.group, "reset-offsets"))}">'
        f'{_hidden(fields)}<button type="submit" id="confirm">Reset the offsets</button> '
        f"{_a(link('groups', plan.group), 'cancel', 'cancel')}</form>",
    )


def delete_confirm_page(plan: DeletePlan, token: str) -> str:
    """What DeleteRecords would delete, and the form that deletes it."""
    first, end = plan.deleted
    goes = f"offsets {first} to {end - 1} ({end - first} offsets)" if end > first else "nothing"
    warning = ""
    if plan.new_log_start > plan.high_watermark:
        warning = (
            f'<div class="short" id="delete-warning">{esc(plan.new_log_start)} is past the high watermark '
            f"{esc(plan.high_watermark)}: the broker will refuse it (OFFSET_OUT_OF_RANGE).</div>"
        )
    rows = _table(
        ["topic", "partition", "log start", "high watermark", "new log start", "deleted"],
        [
            [
                _td(esc(plan.topic)),
                _num(plan.partition),
                _num(plan.log_start),
                _num(plan.high_watermark),
                _num(plan.new_log_start),
                _td(esc(goes)),
            ]
        ],
        "plan",
    )
    fields = {"csrf_token": token, "partition": plan.partition, "before": plan.before, "confirm": "yes"}
    return _page(
        f"Confirm: delete records of {plan.topic}-{plan.partition}",
        f"<p>The records before offset {esc(plan.new_log_start)} will be deleted; this cannot be undone.</p>"
        f"{rows}{warning}"
        f'<form id="confirm-form" method="post" action="{esc(link("topics", plan.topic, "delete-records"))}">'
        f'{_hidden(fields)}<button type="submit" id="confirm">Delete the records</button> '
        f"{_a(link('topics', plan.topic), 'cancel', 'cancel')}</form>",
    )


def action_done_page(title: str, message: str, back: str, back_text: str) -> str:
    """An action carried out: what was done, and a link back to the page that shows its effect."""
    return _page(title, f'<p id="done">{esc(message)}</p><p>{_a(back, back_text, "back")}</p>')


# --- the topic page's live chart and Spark writes -------------------------------------------------------------


def _chart(url: str) -> str:
    """The chart's frame: the script (:data:`CHART_SCRIPT`) fills the SVGs from ``url`` every few seconds."""
    panes = "".join(
        f'<div class="chart"><div class="kind">{esc(label)} <span class="top"></span></div>'
        f'<svg class="{cls}" viewBox="0 0 600 120" width="480" height="96" preserveAspectRatio="none" role="img" '
        f'aria-label="{esc(label)}"></svg><div class="legend"></div></div>'
        for cls, label in (("records", "records/s (in, and out per consumer group)"), ("bytes", "bytes/s in"))
    )
    return (
        f'<h2>Throughput (last 10 minutes)</h2><div id="chart" data-rates="{esc(url)}" data-samples="0">'
        f'{panes}<div class="chart-error note"></div>'
        f'<noscript><p class="note">The chart needs script; its data: {_a(url, url)}</p></noscript></div>'
    )


def _offset_ranges(parts: Iterable[tuple[str, int, int, int, int]], topic: str) -> str:
    shown = []
    for t, p, first, last, rows in parts:
        if t != topic:
            continue
        shown.append(f"{p}@{first}..{last}" if first >= 0 else f"{p}({rows} rows, offsets unknown)")
    return ", ".join(shown)


def _spark_writes(w: SparkWrites) -> str:
    head = "<h2>Spark writes (format(&quot;pylog&quot;))</h2>"
    if w.error:
        return head + f'<div class="error" id="spark-writes-error">{esc(w.error)}</div>'
    if not w.recorded:
        return head + (
            f'<p class="note" id="spark-writes-none">No Spark write recorded on this cluster (topic '
            f"{esc(SPARK_WRITES_TOPIC)} absent: written by the connector after each commit unless "
            f"pylog.writeProvenance=false).</p>"
        )
    if not w.writes:
        table = f'<p class="note" id="spark-writes-none">No recorded Spark write touched {esc(w.topic)}.</p>'
    else:
        table = _table(
            [
                "write id",
                "kind",
                "query id",
                "batch",
                "delivery",
                "tasks",
                "rows (all topics)",
                "rows here",
                "committed",
                "partition@offsets",
            ],
            (
                [
                    _td(esc(x.write_id)),
                    _td(esc(x.kind)),
                    _td(esc(x.query_id or "-")),
                    _num("-" if x.batch_id is None else x.batch_id),
                    _td(esc(x.delivery)),
                    _num(x.tasks),
                    _num(x.rows),
                    _num(sum(p[4] for p in x.partitions if p[0] == w.topic)),
                    _td(esc(_time(x.committed_ms))),
                    _td(esc(_offset_ranges(x.partitions, w.topic))),
                ]
                for x in w.writes
            ),
            "spark-writes",
        )
    note = f"scanned offsets {w.scanned_from} to {w.scanned_to} of {SPARK_WRITES_TOPIC}"
    if w.truncated:
        note += " (older records not scanned)"
    if w.unreadable:
        note += f"; {w.unreadable} record(s) not readable (not JSON, or a later format)"
    return head + table + f'<p class="note" id="spark-writes-note">{esc(note)}</p>'
