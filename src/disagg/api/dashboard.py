"""The dashboard at `/`: one small HTML page of machines, devices, slices and jobs by state.

Server-rendered, no script, refreshes itself every 5 s. It shows no job details (those are per
tenant, behind a token): only how many jobs are in each state.
"""

from __future__ import annotations

from html import escape
from typing import Any

from sqlalchemy import select

from disagg.store import LIVE_SLICE_STATES, Store, slice_dict
from disagg.store.models import SliceRow

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.5rem}
table{border-collapse:collapse;font-size:.9rem}
td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
th{background:#f2f2f2}.free{color:#2a7}.attached{color:#06c}.failed{color:#c22}.drained{color:#a60}
.running{color:#06c}.composing{color:#a60}.tearing-down{color:#888}
.cards span{display:inline-block;border:1px solid #ccc;
border-radius:4px;padding:.3rem .6rem;margin-right:.4rem}
"""


def _table(headers: list[str], rows: list[list[Any]], state_col: int | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            text = escape("" if v is None else str(v))
            cls = f' class="{text}"' if i == state_col else ""
            cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        body.append(f'<tr><td colspan="{len(headers)}">none</td></tr>')
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def render_dashboard(store: Store) -> str:
    counts = store.counts()
    machines = store.machines_view()
    devices = store.devices_view()
    with store.read() as s:
        slices = [
            slice_dict(r)
            for r in s.scalars(
                select(SliceRow).where(SliceRow.state.in_(LIVE_SLICE_STATES)).order_by(SliceRow.created_at)
            )
        ]
    cards = (
        "".join(f"<span>{escape(k)}: <b>{v}</b></span>" for k, v in sorted(counts["jobs"].items()))
        or "<span>no jobs yet</span>"
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>disagg controller</title><style>{_STYLE}</style></head><body>
<h1>disagg controller</h1>
<h2>Jobs by state</h2><div class="cards">{cards}</div>
<h2>Machines ({len(machines)})</h2>
{
        _table(
            ["id", "kind", "rack", "state", "cpus", "memory GB", "slices"],
            [
                [
                    m["id"],
                    m["kind"],
                    m["location"],
                    m["state"],
                    f"{m['cpus']:g}",
                    f"{m['memory_gb']:g}",
                    ", ".join(m["slices"]),
                ]
                for m in machines
            ],
            state_col=3,
        )
    }
<h2>Devices ({len(devices)})</h2>
{
        _table(
            ["id", "kind", "model", "location", "state", "slice"],
            [[d["id"], d["kind"], d["model"], d["location"], d["state"], d["slice"]] for d in devices],
            state_col=4,
        )
    }
<h2>Live slices ({len(slices)})</h2>
{
        _table(
            ["id", "job", "state", "machines", "devices"],
            [
                [
                    sl["id"],
                    sl["job"],
                    sl["state"],
                    ", ".join(f"{m['name']}@{m['host']}" for m in sl["machines"]),
                    ", ".join(d for m in sl["machines"] for d in m["devices"]),
                ]
                for sl in slices
            ],
            state_col=2,
        )
    }
</body></html>"""
