"""The dashboard at `/`: one small HTML page of machines, devices, slices and jobs by state.

Server-rendered, no script, refreshes itself every 5 s. It shows no job details (those are per
tenant, behind a token): only how many jobs are in each state.
"""

from __future__ import annotations

from html import escape
from typing import Any

from disagg.model.states import DeviceState
from disagg.store import Store

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


#: Past these sizes the page summarises (per rack, per device kind and model, the devices that need
#: an operator, the newest slices) instead of a row each: at 12,500 machines the rows came to 6.7 MB
#: of HTML, rendered in 3 s, every 5 s.
FULL_MACHINES = 200
FULL_DEVICES = 500
MAX_ROWS = 200
STATES = tuple(DeviceState)


def _cards(counts: dict[str, int], empty: str) -> str:
    spans = "".join(f"<span>{escape(k)}: <b>{v}</b></span>" for k, v in sorted(counts.items()))
    return spans or f"<span>{empty}</span>"


def render_dashboard(store: Store, full_machines: int = FULL_MACHINES, full_devices: int = FULL_DEVICES) -> str:
    counts = store.counts()
    slices = store.live_slices_view()
    nodes = store.node_counts()
    if sum(nodes.values()) <= full_machines and sum(counts["devices"].values()) <= full_devices:
        inventory = _inventory_rows(store)
    else:
        inventory = _inventory_summary(store, nodes, slices)
    shown = slices[-MAX_ROWS:]
    more = f" — the newest {len(shown)} shown" if len(shown) < len(slices) else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>disagg controller</title><style>{_STYLE}</style></head><body>
<h1>disagg controller</h1>
<h2>Jobs by state</h2><div class="cards">{_cards(counts["jobs"], "no jobs yet")}</div>
<h2>Devices by state</h2><div class="cards">{_cards(counts["devices"], "no devices")}</div>
{inventory}
<h2>Live slices ({len(slices)}{more})</h2>
{_slices_table(shown)}
</body></html>"""


def _inventory_summary(store: Store, nodes: dict[tuple[str, str], int], slices: list[dict[str, Any]]) -> str:
    """Racks and device kinds with counts by state, then the devices an operator has to look at."""
    by_rack = store.device_counts("rack")
    by_model = store.device_counts("kind", "model")
    racks = sorted({rack for rack, _ in nodes})
    rack_of = store.machine_racks({m["host"] for sl in slices for m in sl["machines"]})
    attention = store.attention_devices(MAX_ROWS)
    capped = f", the first {MAX_ROWS}" if len(attention) == MAX_ROWS else ""
    slices_in: dict[str, set[str]] = {}
    for sl in slices:
        for m in sl["machines"]:
            slices_in.setdefault(rack_of.get(m["host"], "?"), set()).add(sl["id"])
    rack_rows = [[rack, nodes.get((rack, "machine"), 0), nodes.get((rack, "pool"), 0),
                  *(by_rack.get((st, rack), 0) for st in STATES), len(slices_in.get(rack, ()))] for rack in racks]
    models = sorted({(kind, model) for _, kind, model in by_model})
    model_rows = [[kind, model, *(by_model.get((st, kind, model), 0) for st in STATES)] for kind, model in models]
    n_machines = sum(n for (_, kind), n in nodes.items() if kind == "machine")
    n_pools = sum(n for (_, kind), n in nodes.items() if kind == "pool")
    return f"""<h2>Racks ({len(racks)}: {n_machines} machines, {n_pools} pools)</h2>
{_table(["rack", "machines", "pools", *(f"{st} devices" for st in STATES), "live slices"], rack_rows)}
<h2>Devices by kind and model</h2>
{_table(["kind", "model", *STATES], model_rows)}
<h2>Failed and drained devices ({len(attention)}{capped})</h2>
{_devices_table(attention)}"""


def _inventory_rows(store: Store) -> str:
    """Every machine and every device, a row each (small inventories)."""
    machines = store.machines_view()
    devices = store.devices_view()
    return f"""<h2>Machines ({len(machines)})</h2>
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
{_devices_table(devices)}
"""


def _devices_table(devices: list[dict[str, Any]]) -> str:
    return _table(
        ["id", "kind", "model", "location", "state", "slice"],
        [[d["id"], d["kind"], d["model"], d["location"], d["state"], d["slice"]] for d in devices],
        state_col=4,
    )


def _slices_table(slices: list[dict[str, Any]]) -> str:
    return _table(
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
