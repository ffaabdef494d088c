"""The `disagg` command: one Typer app; each command group is a module of this package that registers
its commands here (see README.md in this directory for the file map).

Every `disagg` invocation imports this package and so every command module: they keep their heavy
imports (the store, SQLAlchemy, the API, the benchmarks) inside the commands, so `disagg --help` is quick.
"""

from __future__ import annotations

import typer

from disagg.cli import admin, bench, inventory, jobs, place, serve, simulate, token

app = typer.Typer(
    name="disagg",
    help="An orchestrator for disaggregated data centers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Commands first, in the order `disagg --help` lists them, then the groups (bench, token).
place.register(app)  # place, policies
serve.register(app)  # serve
jobs.register(app)  # submit, jobs, logs, cancel
inventory.register(app)  # slices, machines, devices, links
simulate.register(app)  # simulate
admin.register(app)  # gc, backup, restore
bench.register(app)  # bench placement | slices | api | crash | sim
token.register(app)  # token create | list | revoke

__all__ = ["app", "main"]


def main() -> None:
    """The console script `disagg` (and `python -m disagg.cli`)."""
    app()
