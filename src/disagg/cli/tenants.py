"""`disagg tenants [show | set]`: the tenants' quotas, usage and fair share; an admin sets a tenant.

`disagg tenants` is GET /v1/tenants (a tenant's token shows that tenant; an admin's, every one) as a
table (`-o wide`: also the Unix user, limit and decayed usage; a legend says what the shares mean) or JSON;
`disagg tenants show NAME` is one tenant (any unique beginning of its name);
`disagg tenants set NAME --quota gpu=8,cpus=64 --borrow gpu=8 --weight 2 --cohort lab` is
PUT /v1/tenants/NAME (admin; the name whole: it may be a new tenant).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from disagg.cli.common import DEFAULT_API, AsJson, Output, Token, Url, call_api, fail, print_json, segment
from disagg.cli.tables import Col, console, make_table
from disagg.model.states import JobState

tenants_app = typer.Typer(help="Tenants: quotas, usage, fair share (set: admin).", invoke_without_command=True)


def parse_limits(option: str, text: str | None) -> dict[str, float]:
    """`gpu=8,cpus=64` → {"gpu": 8.0, "cpus": 64.0}; bad input fails naming the option and the item."""
    from disagg.model.tenants import RESOURCES  # (Pydantic's models with it: not for every `disagg` command)

    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in RESOURCES:
            raise fail(f"{option}: {item.strip()!r} is not allowed; use RESOURCE=AMOUNT with RESOURCE one of "
                       f"{', '.join(RESOURCES)} (e.g. gpu=8,cpus=64)")
        try:
            amount = float(value)
        except ValueError:
            raise fail(f"{option}: {item.strip()!r}: {value!r} is not a number") from None
        if amount < 0 or amount != amount:
            raise fail(f"{option}: {item.strip()!r}: the amount must be a number >= 0")
        if name in out:  # the last one had won without a word
            raise fail(f"{option}: {name} is given twice ({out[name]:g} and {amount:g}): give it once")
        out[name] = amount
    return out


#: Each resource as a reader says it, after its amount (`3 GB memory`, not `3 memory_gb`).
_WORDS = {"cpus": "cpus", "memory_gb": "GB memory", "network_gbps": "Gbit/s network", "gpu": "gpu",
          "nvme": "nvme", "fpga": "fpga", "memory": "memory devices"}
#: What the share columns mean, under the table.
LEGEND = ("share: the tenant's largest fraction of any resource it holds now (DRF's dominant share); "
          "fair share: that share of its decayed usage over its weight (lower goes first); "
          "entitled share: its weight over the weights of all tenants with jobs; "
          "borrowed: what it holds above its quota, lent by its cohort.")


def _amounts(values: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {_WORDS.get(r, r)}" for r, v in values.items()) or "-"


def _table(tenants: list[dict[str, Any]], wide: bool = False) -> Table:
    """Tenants, one a row (names whole: `disagg.cli.tables`); `wide` adds what the API gives besides."""
    cols = [Col("tenant", "id"), Col("weight", "num"), Col("cohort", "id"), Col("quota"), Col("borrow"),
            Col("usage"), Col("borrowed"), Col("share", "num"), Col("entitled share", "num"), Col("fair share", "num"),
            Col(JobState.QUEUED, "num"), Col(JobState.RUNNING, "num")]
    rows = [[t["name"], f"{t['weight']:g}", t["cohort"] or "", _amounts(t["quota"]), _amounts(t["borrow"]),
             _amounts(t["usage"]), _amounts(t["borrowed"]), f"{t['dominant_share']:.1%}",
             f"{t['entitled_share']:.1%}", f"{t['fair_share']:.3f}",
             t[JobState.QUEUED], t[JobState.RUNNING]] for t in tenants]
    if wide:
        cols += [Col("unix user", "id"), Col("limit"), Col("decayed usage")]
        for row, t in zip(rows, tenants, strict=True):
            row += [t["unix_user"] or "", _amounts(t["limit"]), _amounts(t["decayed_usage"])]
    table = make_table("tenants", cols, rows)
    if rows:
        table.caption, table.caption_justify = LEGEND, "left"
    return table


@tenants_app.callback()
def tenants(ctx: typer.Context, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
            output: Output = "table") -> None:
    """List tenants: quota, borrowing limit, usage, shares, queued and running jobs."""
    if ctx.invoked_subcommand is not None:
        return
    found = call_api("GET", url, "/v1/tenants", token)["tenants"]  # one answer: tenants are few, not paged
    if as_json or output == "json":
        print_json({"tenants": found})
        return
    console().print(_table(found, output == "wide"))


@tenants_app.command("show")
def tenants_show(
    name: Annotated[str, typer.Argument(help="The tenant (any unique beginning of its name).")],
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
    output: Output = "wide",
) -> None:
    """One tenant, with every column (a tenant's token shows only itself)."""
    data = call_api("GET", url, f"/v1/tenants/{segment(name, 'tenant')}", token)
    if as_json or output == "json":
        print_json(data)
        return
    console().print(_table([data], output == "wide"))


@tenants_app.command("set")
def tenants_set(
    name: Annotated[str, typer.Argument(help="The tenant.")],
    quota: Annotated[str | None, typer.Option(help="Nominal quota, e.g. gpu=8,cpus=64,memory_gb=512.")] = None,
    borrow: Annotated[str | None, typer.Option(help="Borrowing limit above the quota, e.g. gpu=8.")] = None,
    weight: Annotated[float, typer.Option(min=0.000001, help="Weight for fair share.")] = 1.0,
    cohort: Annotated[str | None, typer.Option(help="The cohort it borrows from and lends to.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Admin: set a tenant's entry of the tenants spec (replaces the config's entry for it)."""
    body: dict[str, Any] = {"weight": weight, "quota": parse_limits("--quota", quota),
                            "borrow": parse_limits("--borrow", borrow)}
    if cohort is not None:
        body["cohort"] = cohort
    data = call_api("PUT", url, f"/v1/tenants/{segment(name, 'tenant')}", token, json=body)
    if as_json:
        print_json(data)
        return
    console().print(_table([data]))


def register(app: typer.Typer) -> None:
    """Add the `tenants` group to the `disagg` app."""
    app.add_typer(tenants_app, name="tenants")
