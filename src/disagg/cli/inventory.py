"""`disagg slices | machines | devices | links`: what the controller holds, through its REST API.

Each is one GET /v1/<kind>, printed as a table with one row per item (ids whole, never cut:
`disagg.cli.tables`), or as the API's JSON with `--json`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from disagg.cli.common import DEFAULT_API, AsJson, Token, Url, get_all, print_json
from disagg.cli.tables import Col, console, make_table


def _listing(url: str, token: str | None, as_json: bool, kind: str, columns: tuple[Col, ...],
             row: Callable[[dict[str, Any]], tuple[str, ...]], params: dict[str, str] | None = None) -> None:
    """One listing (`slices`, `machines`, `devices`, `links`): GET /v1/<kind>, printed as the API's JSON
    or as a table with one row per item."""
    data = {kind: get_all(url, f"/v1/{kind}", token, kind, params)}
    if as_json:
        print_json(data)
        return
    console().print(make_table(kind, columns, [row(item) for item in data[kind]]))


def slices(
    state: Annotated[str | None, typer.Option(help="Only slices in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List slices: their machines, devices and state."""
    columns = (Col("id", "id"), Col("job", "id"), Col("state"), Col("outcome"), Col("machines (name@host)", "text"),
               Col("devices", "text"))
    _listing(url, token, as_json, "slices", columns, lambda s: (
        s["id"], s["job"], s["state"], s["outcome"] or "",
        ", ".join(f"{m['name']}@{m['host']}" for m in s["machines"]),
        ", ".join(d for m in s["machines"] for d in m["devices"])), params={"state": state} if state else None)


def machines(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List machines and pools."""
    columns = (Col("id", "id"), Col("kind"), Col("rack", "id"), Col("state"), Col("cpus", "num"),
               Col("memory GB", "num"), Col("slices", "text"))
    _listing(url, token, as_json, "machines", columns, lambda m: (
        m["id"], m["kind"], m["location"], m["state"], f"{m['cpus']:g}", f"{m['memory_gb']:g}",
        ", ".join(m["slices"])))


def devices(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List devices: free, attached (and to which slice), failed or drained."""
    columns = (Col("id", "id"), Col("kind"), Col("model", "id"), Col("location", "id"), Col("state"),
               Col("slice", "id"))
    _listing(url, token, as_json, "devices", columns, lambda d: (
        d["id"], d["kind"], d["model"], d["location"], d["state"], d["slice"] or ""))


def links(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List network links: bandwidth, up or down, the load live slices put on them, and which slices."""
    columns = (Col("id", "id"), Col("Gbit/s", "num"), Col("state"), Col("load Gbit/s", "num"), Col("use %", "num"),
               Col("slices", "text"))
    _listing(url, token, as_json, "links", columns, lambda lk: (
        lk["id"], f"{lk['gbps']:g}", lk["state"], f"{lk['load_gbps']:g}", f"{lk['utilisation'] * 100:.0f}",
        ", ".join(lk["slices"])))


def register(app: typer.Typer) -> None:
    """Add slices, machines, devices and links to the `disagg` app (in the order `--help` lists them)."""
    for fn in (slices, machines, devices, links):
        app.command()(fn)
