"""The status page's HTML: pure functions from gathered data to one self-refreshing page each.

Every value is escaped on its way into the page (``html.escape``) and every link segment is quoted, so a
hostile job id or delivery id cannot become markup or a path. The data holds ids, names, enums and
numbers only (run records, decisions, registry rows): no payload text, title, login or host path.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple
from urllib.parse import quote

from pidispatch.common.registry import HostRow, is_live
from pidispatch.console.events import Delivery, shown_outcome
from pidispatch.console.statusdata import DeliveryTrace, Overview, RunRow
from pidispatch.console.waitview import condition_text
from pidispatch.triggers.explain import WHY_TEXT, Explanation, stored_line

REFRESH_S = 5
NAV = (("/", "overview"), ("/runs", "runs"), ("/deliveries", "deliveries"), ("/schedules", "schedules"),
       ("/waits", "waits"), ("/triggers/test", "triggers"))
REDIS_DOWN = "Redis at REDIS_URL is not answering"
REDIS_REFUSED = "Redis at REDIS_URL refused this connection's credentials (VALKEY_PASSWORD or REDIS_PASSWORD)"
STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}"
    "header{background:#24292f;padding:.6em 1.2em}header a{color:#d0d7de;margin-right:1.2em;"
    "text-decoration:none}header a.on{color:#fff;font-weight:600}main{padding:1em 1.2em}"
    "h1{font-size:1.3em;margin:.2em 0 .6em}h2{font-size:1.05em;margin:1.2em 0 .4em}"
    "table{border-collapse:collapse;background:#fff;margin-bottom:.8em}"
    "th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}"
    "th{background:#eaeef2}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "code,td{font-family:ui-monospace,monospace;font-size:13px}"
    ".banner{background:#ffebe9;border:1px solid #cf222e;color:#82071e;padding:.6em 1em;"
    "margin-bottom:1em;font-weight:600}.note{color:#57606a}.empty{color:#57606a;font-style:italic}"
    ".ok{color:#1a7f37}.bad{color:#cf222e}"
)
_GOOD = frozenset({"completed", "queued", "active"})
_BAD = frozenset({"failed", "dead", "policy", "dropped", "torn-down", "divergent", "unserved"})


class PageLink(NamedTuple):
    """A table cell that links: ``href`` is built here from quoted segments, ``text`` is escaped."""

    href: str
    text: str


Cell = str | int | PageLink | None


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def href(*segments: str) -> str:
    """``/a/b`` from raw segments, each quoted whole (``/`` included), so no segment can add a level."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


def _cell(value: Cell, cls: str = "") -> str:
    if isinstance(value, PageLink):
        return f'<td><a href="{esc(value.href)}">{esc(value.text)}</a></td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="n">{value}</td>'
    shown = "-" if value is None or value == "" else value
    kind = "ok" if shown in _GOOD else "bad" if shown in _BAD else cls
    return f'<td class="{kind}">{esc(shown)}</td>' if kind else f"<td>{esc(shown)}</td>"


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell]], empty: str) -> str:
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, active: str, body: str, banner: str | None = None, *, refresh: bool = True) -> str:
    """The whole document: refreshes itself every ``REFRESH_S`` seconds (a form's page does not: that would
    drop what was typed and answered); no script."""
    nav = "".join(
        f'<a href="{path}"{" class=on" if name == active else ""}>{name}</a>' for path, name in NAV
    )
    top = f'<div class="banner" role="alert">{esc(banner)}</div>' if banner else ""
    reload = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{reload}'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>pi-dispatch · {esc(title)}</title><style>{STYLE}</style></head>"
        f"<body><header><nav>{nav}</nav></header><main><h1>{esc(title)}</h1>{top}{body}</main></body></html>"
    )


def _ts(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso_ms(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso or "").timestamp() * 1000
    except ValueError:
        return None


def duration(started: str | None, ended: str | None) -> str | None:
    """``1h02m03s`` / ``2m05s`` / ``4.2s`` between two ISO instants; None when either is unreadable."""
    a, b = _iso_ms(started), _iso_ms(ended)
    if a is None or b is None or b < a:
        return None
    s = (b - a) / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    return f"{m // 60}h{m % 60:02d}m{sec:02d}s" if m >= 60 else f"{m}m{sec:02d}s"


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


# ---- pages ---------------------------------------------------------------------------------------------


def overview_html(view: Overview | None, banner: str | None = None) -> str:
    if view is None:
        return page("overview", "overview", _links(), banner)
    queues = table(
        ("STREAM", "GROUP", "LENGTH", "PENDING", "LAG"),
        ((q.stream, q.group, q.length, q.pending, q.lag) for q in view.queues), "no streams yet",
    )
    lag = ('<p class="note">PENDING: delivered to a consumer, not yet acknowledged; LAG: not yet delivered '
           "(reported by Redis 7 and later, else -)</p>")
    held = table(
        ("KEY", "SIZE"), ((view.delayed_key, view.delayed), (view.dead_key, view.dead)), "",
    )
    paused = '<p class="bad">paused: no worker takes new jobs (pi-dispatch resume)</p>' if view.paused else ""
    unfiltered = [h.name for h in view.hosts if h.egress == "off"]
    if unfiltered:
        names = html.escape(", ".join(unfiltered))
        paused += f'<p class="bad">egress off on {names}: jobs reach the whole network (PI_EGRESS=0)</p>'
    body = (f"{paused}<h2>Queues</h2>{queues}{lag}{held}<h2>Live hosts</h2>{hosts_table(view.hosts)}"
            f"{_links()}")
    return page("overview", "overview", body, banner)


def hosts_table(hosts: Sequence[HostRow]) -> str:
    rows = [
        (h.name, "?" if h.stale_ms is None else f"{h.stale_ms // 1000}s ago", "yes" if h.routes else "no",
         f"{_n(h.running)}/{_n(h.concurrency)}", ",".join(sorted(h.caps)) or None, h.egress or None,
         h.version or None, "live" if is_live(h) else "stale")
        for h in hosts
    ]
    return table(("NAME", "BEAT", "ROUTES", "RUNNING", "CAPS", "EGRESS", "VERSION", "STATE"), rows,
                 "no live hosts (workers write their row every 15 s)")


def _links() -> str:
    items = "".join(f'<li><a href="{path}">{name}</a></li>' for path, name in NAV[1:])
    return f"<h2>More</h2><ul>{items}</ul>"


def runs_html(rows: Sequence[RunRow], note: str | None = None, banner: str | None = None) -> str:
    cells = [
        (_ts(_ms(r.record.ended_at)) or r.record.ended_at, r.record.outcome, r.record.reason, r.record.target,
         r.record.job_id, r.record.host or None, r.record.attempt,
         duration(r.record.started_at, r.record.ended_at),
         PageLink(href("runs", r.record.job_id, "output"), "output") if r.has_output else None)
        for r in rows
    ]
    body = table(("ENDED (UTC)", "OUTCOME", "REASON", "TARGET", "JOB", "HOST", "ATTEMPT", "DURATION",
                  "OUTPUT"), cells, "no runs recorded yet")
    shown = f'<p class="note">{esc(note)}</p>' if note else ""
    return page("runs", "runs", shown + body, banner)


def _ms(iso: str) -> int | None:
    found = _iso_ms(iso)
    return None if found is None else int(found)


def deliveries_html(rows: Sequence[Delivery], banner: str | None = None) -> str:
    cells = [
        (_ts(d.received_at), d.forge, d.event + (f"/{d.action}" if d.action else ""), d.target,
         shown_outcome(d), d.reason or ", ".join(d.jobs) or None,
         None if d.trigger is None else f"#{d.trigger}",
         PageLink(href("deliveries", d.forge, d.delivery), d.delivery))
        for d in rows
    ]
    header = ("RECEIVED (UTC)", "FORGE", "EVENT", "TARGET", "OUTCOME", "REASON / JOBS", "RULE", "DELIVERY")
    body = table(header, cells, "no stored deliveries")
    return page("deliveries", "deliveries", body, banner)


def trace_html(trace: DeliveryTrace) -> str:
    """One delivery: the stored decision first, then what today's rules would do, rule by rule."""
    stored = (stored_line(trace.stored) if trace.stored is not None
              else "no stored decision (not decided yet, or the record expired)")
    parts = [f"<p>forge <code>{esc(trace.forge)}</code>, delivery <code>{esc(trace.delivery)}</code></p>",
             f"<h2>What the router did</h2><p>{esc(stored)}</p>"]
    if trace.explanation is not None:
        parts.append(explanation_html(trace.explanation))
    if trace.problem:
        parts.append(f'<p class="note">{esc(trace.problem)}</p>')
    parts.append('<p><a href="/deliveries">all deliveries</a></p>')
    return page(f"delivery {trace.delivery}", "deliveries", "".join(parts))


def explanation_html(ex: Explanation) -> str:
    rules = table(
        ("RULE", "TYPE", "FORGE", "MATCH", "WHY"),
        ((f"#{r.index}", r.type, r.forge, "MATCH" if r.matched else "no", WHY_TEXT.get(r.why, r.why))
         for r in ex.rules), "the file has no rules",
    )
    return (
        "<h2>What today's rules would do</h2>"
        f"<p>event <code>{esc(ex.event)}</code>, action <code>{esc(ex.action or '-')}</code></p>"
        f"<p>today's rules would: {esc(ex.today())}</p><p>authority: {esc(ex.authority())}</p>"
        f"<p>route: {esc(', '.join(ex.routes) or '-')}</p>{rules}"
        '<p class="note">the re-run reads the current triggers file and does not re-run dedup: it can differ '
        "from what the router did</p>"
    )


def schedules_html(rows: Sequence[Mapping[str, Any]], problem: str | None = None,
                   banner: str | None = None) -> str:
    cells = []
    for r in rows:
        last = r["last"]
        shown = f"{last['at']} {last['outcome'] or '-'}" if last else None
        cells.append((r["id"], r["pattern"], r["tz"], r["state"], r["next"], shown, int(r["stalls"]),
                      ", ".join(r["hosts"]) or None))
    body = table(("ID", "PATTERN", "TZ", "STATE", "NEXT", "LAST", "STALLS", "HOSTS"), cells,
                 "no cron triggers in PI_TRIGGERS_FILE")
    note = f'<p class="note">{esc(problem)}</p>' if problem else ""
    return page("schedules", "schedules", note + body, banner)


def waits_html(rows: Sequence[Mapping[str, Any]], banner: str | None = None) -> str:
    cells = [
        (r["job"], r["target"] or None, r["since"], r["next"], int(r["checks"]), int(r["faults"]),
         ", ".join(condition_text(c) for c in r["conditions"]) or None)
        for r in rows
    ]
    body = table(("JOB", "TARGET", "SINCE", "NEXT", "CHECKS", "FAULTS", "CONDITIONS"), cells,
                 "no job is waiting on a condition")
    return page("waits", "waits", body, banner)


def missing_html(what: str) -> str:
    return page("not found", "", f'<p>{esc(what)}</p><p><a href="/">overview</a></p>')
