"""`disagg simulate`: named scenarios or a trace, several policies side by side; table, JSON, plots.

A plain function with typed options (Typer reads the annotations); `register` adds it. All input is
checked — policy and scenario names, seeds, the cluster spec, every trace row, jobs that could never
fit — before anything is simulated; bad input exits with code 2 and a message naming what is wrong.
A run that ends with jobs still waiting (a policy that can never place them: stalled) is a failure:
the tables, JSON and plots are still written, then the command exits with code 3 naming the first
stuck jobs, unless `--allow-stall`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from disagg.cli.common import fail, output_dir, output_file
from disagg.sim.scenarios import SCENARIOS

DEFAULT_POLICIES = "drmaestro,drmaestro-na,firmament,greedy,random-remote,fifo"
#: Exit code of a simulation in which a policy left jobs waiting for good (see `--allow-stall`).
EXIT_STALLED = 3
#: `--explore`'s default: the learner's (`profiles.learn.EXPLORE`). A literal here: the learner's module
#: (NumPy) is not imported for `--help`; a test checks that the two agree.
EXPLORE = 3


def simulate(
    scenario: Annotated[str | None, typer.Option(
        help=f"Named scenario ({', '.join(SCENARIOS)}); several, comma-separated, with --sweep.")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster spec (YAML/JSON) for a trace run.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Trace file: our CSV, Alibaba PAI 2020 or Philly.")] = None,
    trace_format: Annotated[str | None, typer.Option(
        "--trace-format", help="csv, pai or philly (default: detected from the file).")] = None,
    policies: Annotated[str, typer.Option(help="Policies, comma-separated.")] = DEFAULT_POLICIES,
    seeds: Annotated[str, typer.Option(help="Seeds, comma-separated.")] = "1",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")] = None,
    plots: Annotated[Path | None, typer.Option(help="Write PNG plots into this directory.")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between scheduling rounds (simulated).")] = 5.0,
    sweep: Annotated[bool, typer.Option(help="Run the policy × seed × scenario grid in parallel.")] = False,
    ray: Annotated[str | None, typer.Option("--ray", help="Run the grid on the Ray cluster at ADDRESS.")] = None,
    workers: Annotated[int, typer.Option(min=0, max=1024,
                                         help="Local worker processes for --sweep (0 = all cores).")] = 0,
    mtbf: Annotated[float | None, typer.Option(
        help="Device failures: mean seconds between failures of each device (default: none).")] = None,
    mttr: Annotated[float, typer.Option(help="Device failures: mean seconds to repair.")] = 600.0,
    tenants: Annotated[str | None, typer.Option(
        help="Tenants spec (YAML/JSON): quotas, fair share and preemption for every policy; 'none': the "
             "plain policies (default: the scenario's own spec, if it has one).")] = None,
    starvation_rounds: Annotated[int | None, typer.Option(
        "--starvation-rounds",
        help="Reserve for the oldest job once its W reaches this, against every younger job (as serve does).")] = None,
    allow_stall: Annotated[bool, typer.Option(
        "--allow-stall",
        help="Exit 0 even when a policy leaves jobs waiting for good (the runs still say so).")] = False,
    truth: Annotated[Path | None, typer.Option(help=(
        "Profile table the jobs really run by (default: the shipped one); a trace row's duration_s stays "
        "its base time."))] = None,
    profiles: Annotated[Path | None, typer.Option(help=(
        "Profile table the policies are given (and, with --learn, their priors).")) ] = None,
    learn: Annotated[bool, typer.Option("--learn", help=(
        "The policies learn each image's profile from its finished jobs (docs/profiles.md).")) ] = False,
    knowledge: Annotated[str | None, typer.Option(help=(
        "What the policies know, comma-separated for side-by-side runs: shipped, given, oracle (the --truth), "
        "neutral, learned."))] = None,
    explore: Annotated[int, typer.Option(help=(
        "With learning: remote observations an image needs before it is placed by its pessimistic profile "
        "(until then by the estimate itself, so remote placements teach it; 0: cautious at once)."))] = EXPLORE,
) -> None:
    """Simulate policies on a named scenario or a trace; a table per scenario, JSON and plots on request."""
    from rich.console import Console

    from disagg.cli.simulate_runs import BadInput, build_specs, execute, failure_model, with_knowledge
    from disagg.cli.tables import print_table
    from disagg.model import SpecError
    from disagg.sim.report import stall_notes, tables, write_json, write_plots

    console = Console()
    try:
        specs = build_specs(scenario, cluster, trace, trace_format, policies, seeds, interval, sweep,
                            failure_model(mtbf, mttr), tenants, starvation_rounds)
        specs = with_knowledge(specs, truth, profiles, learn, knowledge, explore)
    except (BadInput, SpecError) as exc:
        raise fail(str(exc)) from None
    if json_path is not None:
        output_file(json_path, "--json")
    if plots is not None:
        output_dir(plots, "--plots")
    outputs = execute(specs, sweep, ray, workers, console)
    for table in tables(outputs):
        print_table(table, console)  # too wide for the terminal: several tables, numbers whole
    if json_path is not None:
        write_json(outputs, json_path)
        console.print(f"results written to {json_path}")
    if plots is not None:
        for path in write_plots(outputs, plots):
            console.print(f"plot written to {path}")
    notes = stall_notes(outputs)
    for line in notes:
        console.print(f"[bold yellow]{line}[/]", highlight=False, soft_wrap=True)
    if notes and not allow_stall:
        raise fail(f"{len(notes)} run(s) ended with jobs still waiting (see above; --allow-stall to accept): "
                   f"{notes[0]}", EXIT_STALLED)


def register(app: typer.Typer) -> None:
    """Add `simulate` to the `disagg` app."""
    app.command("simulate")(simulate)
