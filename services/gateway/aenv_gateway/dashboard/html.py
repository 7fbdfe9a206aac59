"""HTML from Python: every value escaped where it is put in a page (`esc`), one layout for every
page (landmarks, a skip link, the navigation marking the current page), small form helpers."""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

PAGES = (("sandboxes", "Sandboxes"), ("templates", "Templates"), ("nodes", "Nodes"),
         ("events", "Events"))

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#111;background:#fafafa}
header{background:#1f2937;color:#fff;padding:.5rem 1rem;display:flex;gap:1rem;align-items:center}
header a{color:#fff}nav ul{list-style:none;display:flex;gap:1rem;margin:0;padding:0}
a[aria-current=page]{font-weight:bold;text-decoration:underline}
main{padding:1rem}table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #d1d5db;padding:.3rem .5rem;text-align:left;font-size:.9rem}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff;color:#000}
form.inline{display:inline}button{margin:0 .1rem}.error{color:#b91c1c}
pre{background:#111;color:#eee;padding:.5rem;overflow:auto;max-height:30rem}
:focus-visible{outline:3px solid #2563eb;outline-offset:2px}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def iso(stamp: Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return ""
    when: datetime = stamp.ToDatetime(tzinfo=UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S")


def age(stamp: Timestamp, now: float) -> str:
    if not stamp.seconds:
        return ""
    seconds = max(0, int(now - stamp.seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def page(title: str, current: str, body: str, csrf: str | None) -> str:
    """A whole page. `csrf` (a session's token) goes in a meta tag for the script's POSTs and
    makes the logout button; None on the login page."""
    items = "".join(
        f'<li><a href="/dashboard/{name}"{" aria-current=page" if name == current else ""}>'
        f"{label}</a></li>" for name, label in PAGES) if csrf else ""
    logout = (f'<form class="inline" method="post" action="/dashboard/logout">'
              f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
              f'<button type="submit">Log out</button></form>') if csrf else ""
    meta = f'<meta name="csrf-token" content="{esc(csrf)}">' if csrf else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{meta}<title>{esc(title)} · aenv</title><style>{STYLE}</style>"
        '<script src="/dashboard/static/dashboard.js" defer></script></head><body>'
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><strong>aenv</strong><nav aria-label="Main"><ul>{items}</ul></nav>'
        f"{logout}</header>"
        f'<main id="main"><h1>{esc(title)}</h1>{body}</main></body></html>'
    )


def table(caption: str, headers: Iterable[str], rows: str, body_id: str = "") -> str:
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    tbody_id = f' id="{esc(body_id)}"' if body_id else ""
    return (f"<table><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody{tbody_id}>{rows}</tbody></table>")


def row(cells: Iterable[str], header_first: bool = False) -> str:
    """Cells already escaped (or markup made here)."""
    out = []
    for i, cell in enumerate(cells):
        out.append(f'<th scope="row">{cell}</th>' if header_first and i == 0
                   else f"<td>{cell}</td>")
    return f"<tr>{''.join(out)}</tr>"


def action(path: str, label: str, csrf: str, name: str) -> str:
    """A POST button for one action (kill, pause, resume) of the thing `name` names."""
    return (f'<form class="inline" method="post" action="{esc(path)}">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            f'<button type="submit" aria-label="{esc(label)} {esc(name)}">{esc(label)}</button>'
            "</form>")


def select(name: str, label: str, options: Iterable[tuple[str, str]], chosen: str) -> str:
    opts = "".join(f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(t)}'
                   "</option>" for v, t in options)
    return (f'<label for="f-{esc(name)}">{esc(label)}</label> '
            f'<select id="f-{esc(name)}" name="{esc(name)}">{opts}</select>')


def text_input(name: str, label: str, value: str, placeholder: str = "") -> str:
    return (f'<label for="f-{esc(name)}">{esc(label)}</label> '
            f'<input id="f-{esc(name)}" name="{esc(name)}" value="{esc(value)}" '
            f'placeholder="{esc(placeholder)}">')
