"""The `disagg` command: one Typer app; each command group is a module of this package that registers
its commands here (see README.md in this directory for the file map).

Every `disagg` invocation imports this package and so every command module: they keep their heavy
imports (the store, SQLAlchemy, the API, the benchmarks) inside the commands, so `disagg --help` is quick.
"""

from __future__ import annotations

from typing import Annotated

import typer

from disagg.cli import admin, bench, discover, inventory, jobs, place, profiles, serve, simulate, tenants, token

#: The widest help text: a terminal's own width (click's default stops at 80 and cuts commands' summaries).
HELP_WIDTH_MAX = 10_000

app = typer.Typer(
    name="disagg",
    help="An orchestrator for disaggregated data centers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # click's plain help: it wraps long option names and lists instead of cutting them at 80 columns
    # (`--not-preemptib…`), and shows a flag without a `<bool>` type
    rich_markup_mode=None,
    context_settings={"max_content_width": HELP_WIDTH_MAX},
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
    """The console script `disagg` (and `python -m disagg.cli`). Piped, help is printed at its natural
    width (as tables are), so `disagg --help | grep` sees whole lines."""
    import sys

    extra = {} if sys.stdout.isatty() else {"terminal_width": HELP_WIDTH_MAX}
    app(**extra)
