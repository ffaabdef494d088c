"""`disagg place` (one scheduling round as a dry run) and `disagg policies` (the registry by name)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from disagg.cli.common import err, fail, json_rows, output_dir
from disagg.cli.tables import console as table_console

#: The policy `disagg place` uses unless told: the controller's (`Config.policy`), so a dry run shows what
#: `disagg serve` would decide. (A literal here: the config module is not imported for `--help`.)
DEFAULT_POLICY = "drmaestro-na"

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from disagg.placement.network import FlowNetwork


def place(
    cluster: Annotated[Path, typer.Option(help="Cluster spec (YAML or JSON).")],
    jobs: Annotated[Path, typer.Option(help="Jobs spec (YAML or JSON).")],
    policy: Annotated[str, typer.Option(
        help="Policy name (`disagg policies`); the default is `disagg serve`'s.")] = DEFAULT_POLICY,
    now: Annotated[float, typer.Option(help=(
        "The time of the round, seconds (every listed job is queued; the longest waiting, now − submit_s, goes "
        "first)."))] = 0.0,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the policy's randomness.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    dump_graphs: Annotated[Path | None, typer.Option(help="Write each solved flow network (JSON, DOT) here.")] = None,
    profiles: Annotated[Path | None, typer.Option(help=(
        "Profile table (YAML or JSON, `profiles:`) the policy knows instead of the shipped Rodinia set; "
        "images it does not list get the neutral profile."))] = None,
) -> None:
    """One scheduling round on a cluster spec and a jobs spec, as a dry run: decisions and reasons."""
    import numpy as np

    from disagg.model import SpecError, load_cluster, load_jobs
    from disagg.model.spec import load_profiles
    from disagg.placement.registry import UnknownPolicyError, get_policy
    from disagg.profiles.catalog import with_profiles

    if not math.isfinite(now):
        raise fail(f"--now: value {now!r} is not allowed: must be a finite number of seconds")
    try:
        chosen = get_policy(policy)
    except UnknownPolicyError as exc:
        raise fail(str(exc)) from None
    try:
        snapshot = load_cluster(cluster)
        queue = with_profiles(load_jobs(jobs, snapshot), load_profiles(profiles) if profiles else None)
    except SpecError as exc:
        raise fail(str(exc)) from None
    graphs = None
    if dump_graphs is not None:
        keep = getattr(chosen, "keep_graphs", None)
        if keep is None:
            raise fail(f"--dump-graphs: policy {policy!r} builds no flow network (flow policies: drmaestro, "
                       f"drmaestro-na, firmament)")
        output_dir(dump_graphs, "--dump-graphs")
        graphs = keep()
    decisions = chosen.place(snapshot, queue, now, np.random.default_rng(seed), clock=time.perf_counter)
    if graphs is not None and dump_graphs is not None:
        _write_graphs(graphs, dump_graphs)
    if as_json:
        sys.stdout.write(json_rows(decisions.to_json()))
        return
    from disagg.placement.render import decisions_table

    out = table_console()  # its natural width when piped: `disagg place | grep` sees whole ids
    for table in decisions_table(decisions):
        out.print(table)


def _write_graphs(graphs: list[tuple[str, FlowNetwork, NDArray[np.int64]]], directory: Path) -> None:
    """Each solved flow network of the round as `NN-phase.json` and `.dot` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, (phase, net, flows) in enumerate(graphs):
        stem = directory / f"{i:02d}-{phase}"
        stem.with_suffix(".json").write_text(net.to_json(flows))
        stem.with_suffix(".dot").write_text(net.to_dot())
    err.print(f"wrote {len(graphs)} flow network(s) to {directory}")


def _policies_table() -> Table:
    from disagg.placement.registry import POLICIES

    table = Table(title="policies")
    table.add_column("name")
    table.add_column("what it does")
    for name, factory in POLICIES.items():
        table.add_row(name, (factory.__doc__ or "").strip().splitlines()[0])
    return table


def policies() -> None:
    """List the placement policies by name."""
    Console().print(_policies_table())


def register(app: typer.Typer) -> None:
    """Add place and policies to the `disagg` app."""
    app.command()(place)
    app.command()(policies)
