"""`disagg slices [ID] | machines | devices [drain|fail|repair ID] | links [fail|repair ID]`: what the
controller holds, through its REST API, and an admin's actions on a device or a link.

Each listing is GET /v1/<kind>, every page of it, printed as a table with one row per item (ids whole,
never cut: `disagg.cli.tables`), `-o wide` with every column the API gives, or the API's JSON with
`--json` (`-o json`). An id may be any unique beginning of it (`disagg slices s-3f`,
`disagg devices drain iobox0/gpu3`, `disagg links fail up:iobox1`); one that several share exits 2
naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console

from disagg.cli.common import DEFAULT_API, AsJson, Output, Token, Url, call_api, get_all, print_json, segment
from disagg.cli.tables import Col, console, make_table
from disagg.display import clock

Row = Callable[[dict[str, Any]], list[Any]]


def _listing(url: str, token: str | None, output: str, kind: str, columns: tuple[tuple[Col, ...], tuple[Col, ...]],
             rows: tuple[Row, Row], params: dict[str, str] | None = None) -> None:
    """One listing: GET /v1/<kind> (every page), printed as the API's JSON or as a table with one row per
    item; `columns` and `rows` are the table's and what `-o wide` adds to it."""
    data = {kind: get_all(url, f"/v1/{kind}", token, kind, params)}
    if output == "json":
        print_json(data)
        return
    wide = output == "wide"
    cols = columns[0] + (columns[1] if wide else ())
    table = [rows[0](item) + (rows[1](item) if wide else []) for item in data[kind]]
    console().print(make_table(kind, cols, table))


def _output(as_json: bool, output: str) -> str:
    return "json" if as_json else output


_SLICE_COLS = ((Col("id", "id"), Col("job", "id"), Col("state"), Col("outcome"),
                Col("machines (name@host)", "text"), Col("devices", "text")),
               (Col("attempt", "num"), Col("created (UTC)", "num"), Col("updated (UTC)", "num"),
                Col("handle", "id"), Col("detail", "text")))
_SLICE_ROWS: tuple[Row, Row] = (
    lambda s: [s["id"], s["job"] or "", s["state"], s["outcome"] or "",
               ", ".join(f"{m['name']}@{m['host']}" for m in s["machines"]),
               ", ".join(d for m in s["machines"] for d in m["devices"])],
    lambda s: [s["attempt"], clock(s["created_at"]), clock(s["updated_at"]), s["handle"] or "", s["detail"] or ""])


def slices(
    slice_id: Annotated[str | None, typer.Argument(
        help="Show one slice with its steps (any unique beginning of its id).")] = None,
    state: Annotated[str | None, typer.Option(help="Only slices in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
    output: Output = "table",
) -> None:
    """List slices: their machines, devices and state; or show one with its steps."""
    shown = _output(as_json, output)
    if slice_id is None:
        _listing(url, token, shown, "slices", _SLICE_COLS, _SLICE_ROWS, params={"state": state} if state else None)
        return
    one = call_api("GET", url, f"/v1/slices/{segment(slice_id, 'slice')}", token)
    if shown == "json":
        print_json(one)
        return
    out = console()
    out.print(make_table("slice", _SLICE_COLS[0] + _SLICE_COLS[1], [_SLICE_ROWS[0](one) + _SLICE_ROWS[1](one)]))
    steps = [[st["op"], st["target"], st["status"], st["tries"], clock(st["started_at"]),
              clock(st["ended_at"]), st["error"] or ""] for st in one.get("steps") or []]
    step_cols = (Col("step"), Col("target", "id"), Col("status"), Col("tries", "num"), Col("started (UTC)", "num"),
                 Col("ended (UTC)", "num"), Col("error", "text"))
    out.print(make_table("steps", step_cols, steps))


def _used(amount: dict[str, float]) -> str:
    """`allocated/total` (`9/10`)."""
    return f"{amount['allocated']:g}/{amount['total']:g}"


def device_groups(groups: list[dict[str, Any]], unavailable: bool = False) -> str:
    """Devices by kind and model, used/total (`gpu K80 2/4`); `unavailable` adds how many cannot be offered."""
    return ", ".join(f"{g['kind']} {g['model']} {g['used']}/{g['total']}"
                     + (f" ({g['unavailable']} unavailable)" if unavailable and g["unavailable"] else "")
                     for g in groups) or "-"


def machines(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False, output: Output = "table") -> None:
    """List machines and pools: cpus and memory allocated/total, devices by kind and model used/total."""
    columns = ((Col("id", "id"), Col("kind"), Col("rack", "id"), Col("state"), Col("cpus used/total", "num"),
                Col("memory GB used/total", "num"), Col("devices used/total"), Col("slices", "text")),
               (Col("unavailable (failed, drained, unreachable)"), Col("devices", "text")))
    _listing(url, token, _output(as_json, output), "machines", columns, (lambda m: [
        m["id"], m["kind"], m["location"], m["state"], _used(m["allocation"]["cpus"]),
        _used(m["allocation"]["memory_gb"]), device_groups(m["allocation"]["devices"]), ", ".join(m["slices"])],
        lambda m: [device_groups([g for g in m["allocation"]["devices"] if g["unavailable"]], True),
                   ", ".join(m["devices"])]))


devices_app = typer.Typer(help="Devices: free, attached, failed or drained (drain, fail, repair: admin).",
                          invoke_without_command=True)
links_app = typer.Typer(help="Network links and their load (fail, repair: admin).", invoke_without_command=True)
DeviceId = Annotated[str, typer.Argument(help="The device (any unique beginning of its id, e.g. iobox0/gpu3).")]
LinkId = Annotated[str, typer.Argument(help="The link (any unique beginning of its id, e.g. up:iobox0).")]


@devices_app.callback()
def devices(ctx: typer.Context, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
            output: Output = "table") -> None:
    """List devices: free, attached (and to which slice), drained, unreachable (behind a down link) or failed."""
    if ctx.invoked_subcommand is not None:
        return
    columns = ((Col("id", "id"), Col("kind"), Col("model", "id"), Col("location", "id"), Col("state"),
                Col("slice", "id")), (Col("health"), Col("drained"), Col("reachable")))
    _listing(url, token, _output(as_json, output), "devices", columns, (lambda d: [
        d["id"], d["kind"], d["model"], d["location"], d["state"], d["slice"] or ""], lambda d: [
        d["health"], "yes" if d["drained"] else "", "yes" if d["reachable"] else "no"]))


def _act(url: str, token: str | None, as_json: bool, kind: str, item: str, action: str) -> None:
    """POST /v1/<kind>s/<item>/<action>; prints the item as it is now."""
    out = call_api("POST", url, f"/v1/{kind}s/{segment(item, kind, slashes=kind == 'device')}/{action}", token)
    if as_json:
        print_json(out)
    else:
        drained = " (drained: no new slice gets it)" if out.get("drained") else ""
        Console().print(f"{kind} [bold]{out['id']}[/] is {out['state']}{drained}", highlight=False)


@devices_app.command("drain")
def device_drain(device_id: DeviceId, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """Admin: keep the device out of new slices (the slice holding it keeps it)."""
    _act(url, token, as_json, "device", device_id, "drain")


@devices_app.command("fail")
def device_fail(device_id: DeviceId, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """Admin, fault injection: the device fails; only the slices using it are re-queued."""
    _act(url, token, as_json, "device", device_id, "fail")


@devices_app.command("repair")
def device_repair(device_id: DeviceId, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """Admin: the device works again (and is no longer drained); it rejoins the pool."""
    _act(url, token, as_json, "device", device_id, "repair")


@links_app.callback()
def links(ctx: typer.Context, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
          output: Output = "table") -> None:
    """List network links: bandwidth, up or down, the load live slices put on them, and which slices
    (the table shows every field: `-o wide` is the same table)."""
    if ctx.invoked_subcommand is not None:
        return
    columns = ((Col("id", "id"), Col("Gbit/s", "num"), Col("state"), Col("load Gbit/s", "num"),
                Col("use %", "num"), Col("slices", "text")), ())
    _listing(url, token, _output(as_json, output), "links", columns, (lambda lk: [
        lk["id"], f"{lk['gbps']:g}", lk["state"], f"{lk['load_gbps']:g}", f"{lk['utilisation'] * 100:.0f}",
        ", ".join(lk["slices"])], lambda lk: []))


@links_app.command("fail")
def link_fail(link_id: LinkId, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """Admin, fault injection: the link drops; the slices whose remote devices' path crosses it are
    re-queued."""
    _act(url, token, as_json, "link", link_id, "fail")


@links_app.command("repair")
def link_repair(link_id: LinkId, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """Admin: the link is back; the devices behind it rejoin the pool."""
    _act(url, token, as_json, "link", link_id, "repair")


def register(app: typer.Typer) -> None:
    """Add slices, machines, devices and links to the `disagg` app (in the order `--help` lists them)."""
    for fn in (slices, machines):
        app.command()(fn)
    app.add_typer(devices_app, name="devices")
    app.add_typer(links_app, name="links")
