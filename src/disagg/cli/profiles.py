"""`disagg profiles [show IMAGE | export | pin | unpin]`: what the controller knows of each image.

`disagg profiles` is GET /v1/profiles as a table: per image the profile the policies use (`used`: the
table's entry, the learned estimate, an admin's pin, or neutral), its remote slowdown φ(r=1, load 0.5)
/ φ(local) with the pessimistic bound the policies place by while unsure, how many completed tasks
(with remote devices) it rests on, and its source. One image, every field: `disagg profiles show IMAGE`.
`disagg profiles export > table.yaml` writes the profiles in use as a table that `--profiles` (and
`serve`'s `profiles:`) read back. `pin` / `unpin` are an admin's PUT / DELETE.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from disagg.cli.common import DEFAULT_API, AsJson, Output, Token, Url, call_api, get_all, print_json, segment
from disagg.cli.tables import Col, console, make_table

profiles_app = typer.Typer(help="Image profiles: the table's, learned from completed tasks, pinned (admin).",
                           invoke_without_command=True)


def _learned(v: dict[str, Any]) -> str:
    lr = v.get("learned")
    if not lr:
        return "-"
    return f"{lr['observations']} ({lr['remote_observations']} remote)"


def _slowdown(v: dict[str, Any]) -> str:
    lr = v.get("learned")
    if v["used"] == "learned" and lr:
        sd = f" ± {lr['slowdown_sd']:.3f}" if lr.get("slowdown_sd") is not None else ""
        return f"{lr['slowdown']:.3f}{sd} (placed as {lr['slowdown_pessimistic']:.3f})"
    return f"{v['slowdown']:.3f}"


def _source(v: dict[str, Any]) -> str:
    return str((v.get("profile") or {}).get("source", "") or ("neutral: nothing known" if v["used"] == "neutral"
                                                              else ""))


def _table(views: list[dict[str, Any]], wide: bool) -> Any:
    cols = [Col("image", "id"), Col("used", "id"), Col("remote slowdown"), Col("tasks learned from"), Col("source")]
    rows = [[v["image"], v["used"], _slowdown(v), _learned(v), _source(v)] for v in views]
    if wide:
        cols += [Col("base s", "num"), Col("transfer share", "num"), Col("remote factor", "num"),
                 Col("load sensitivity", "num"), Col("network gbps", "num"), Col("fit rmse s", "num")]
        for row, v in zip(rows, views, strict=True):
            p = v.get("profile") or {}
            lr = v.get("learned") or {}
            row += [f"{p.get('base_s', 0):.4g}", f"{p.get('transfer_share', 0):.4g}",
                    f"{p.get('remote_factor', 1):.4g}", f"{p.get('load_sensitivity', 0):.4g}",
                    f"{p.get('network_gbps', 0):.4g}", f"{lr['rmse_s']:.4g}" if lr else "-"]
    return make_table("profiles", cols, rows)


@profiles_app.callback()
def profiles(ctx: typer.Context, url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
             output: Output = "table") -> None:
    """List what the controller knows of each image: the profile used, the learned estimate, its certainty.
    (One image is `show IMAGE`: an optional image here took the subcommands' names for images, so that
    `export`, `pin` and `unpin` could not be reached.)"""
    if ctx.invoked_subcommand is not None:
        return
    found = get_all(url, "/v1/profiles", token, "profiles")
    if as_json or output == "json":
        print_json({"profiles": found})
        return
    if not found:
        console().print("no profiles: no table entry and no completed task yet")
        return
    console().print(_table(found, output == "wide"))


@profiles_app.command("show")
def profiles_show(image: Annotated[str, typer.Argument(help="The image (e.g. acme/trainer:2).")],
                  url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """One image, every field."""
    data = call_api("GET", url, f"/v1/profiles/{segment(image, 'image', slashes=True)}", token)
    if as_json:
        print_json(data)
        return
    console().print(_table([data], True))


@profiles_app.command("export")
def profiles_export(url: Url = DEFAULT_API, token: Token = None) -> None:
    """Write the profiles in use (learned at their pessimistic bound, as placed) as a profile table (YAML)."""
    import yaml

    entries = []
    for v in get_all(url, "/v1/profiles", token, "profiles"):
        p = v.get("profile")
        if p is None:
            continue
        entries.append({k: p[k] for k in ("image", "base_s", "transfer_share", "remote_factor", "load_sensitivity",
                                          "network_gbps", "source")})
    sys.stdout.write(yaml.safe_dump({"profiles": entries}, sort_keys=False, allow_unicode=True))


@profiles_app.command("pin")
def profiles_pin(
    image: Annotated[str, typer.Argument(help="The image.")],
    base_s: Annotated[float, typer.Option(help="Completion time with local devices, idle network, seconds.")],
    transfer_share: Annotated[float, typer.Option(help="Share of base_s moving data host<->device (0-1).")],
    remote_factor: Annotated[float, typer.Option(help="Stretch of the transfer part when remote (1-100).")],
    load_sensitivity: Annotated[float, typer.Option(help="Extra stretch per unit of link load (0-100).")] = 0.0,
    network_gbps: Annotated[float, typer.Option(help="Bandwidth one remote device draws, Gbit/s.")] = 1.0,
    source: Annotated[str, typer.Option(help="Where the numbers come from.")] = "pinned by an admin",
    url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
) -> None:
    """Admin: pin an image's profile (learning never replaces it)."""
    body = {"base_s": base_s, "transfer_share": transfer_share, "remote_factor": remote_factor,
            "load_sensitivity": load_sensitivity, "network_gbps": network_gbps, "source": source}
    data = call_api("PUT", url, f"/v1/profiles/{segment(image, 'image', slashes=True)}", token, json=body)
    if as_json:
        print_json(data)
        return
    console().print(_table([data], True))


@profiles_app.command("unpin")
def profiles_unpin(image: Annotated[str, typer.Argument(help="The image.")], url: Url = DEFAULT_API,
                   token: Token = None) -> None:
    """Admin: drop an image's pin."""
    call_api("DELETE", url, f"/v1/profiles/{segment(image, 'image', slashes=True)}", token)
    console().print(f"unpinned {image}")


def register(app: typer.Typer) -> None:
    """Add the `profiles` group to the `disagg` app."""
    app.add_typer(profiles_app, name="profiles")
