"""The `disagg` command: one Typer app; each command group is a module of this package that registers
its commands here (see README.md in this directory for the file map).

Every `disagg` invocation imports this package and so every command module: they keep their heavy
imports (the store, SQLAlchemy, the API, the benchmarks) inside the commands, so `disagg --help` is quick.
"""

from __future__ import annotations

from typing import Annotated

import typer

from disagg.cli import admin, bench, discover, inventory, jobs, place, profiles, serve, simulate, tenants, token

app = typer.Typer(
    name="disagg",
    help="An orchestrator for disaggregated data centers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def version() -> str:
    """The installed disagg's version (from its package metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("disagg")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"disagg {version()}")
        raise typer.Exit()


@app.callback()
def _main(
    _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print the version and exit.")] = False,
) -> None:
    """An orchestrator for disaggregated data centers."""

# Commands first, in the order `disagg --help` lists them, then the groups (bench, token).
place.register(app)  # place, policies
serve.register(app)  # serve
jobs.register(app)  # submit, jobs, logs, cancel
inventory.register(app)  # slices, machines, devices, links
tenants.register(app)  # tenants [set]
profiles.register(app)  # profiles [IMAGE | export | pin | unpin]
simulate.register(app)  # simulate
admin.register(app)  # gc, backup, restore
bench.register(app)  # bench placement | slices | api | crash | sim
token.register(app)  # token create | list | revoke
discover.register(app)  # discover redfish

__all__ = ["app", "main"]


def main() -> None:
    """The console script `disagg` (and `python -m disagg.cli`)."""
    app()
