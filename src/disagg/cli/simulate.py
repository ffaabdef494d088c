"""`disagg simulate`: named scenarios or a trace, several policies side by side; table, JSON, plots.

A plain function with typed options (Typer reads the annotations); `register` adds it. All input is
checked — policy and scenario names, seeds, the cluster spec, every trace row, jobs that could never
fit — before anything is simulated; bad input exits with code 2 and a message naming what is wrong.
A run that ends with jobs still waiting (a policy that can never place them: stalled) is a failure:
the tables, JSON and plots are still written, then the command exits with code 3 naming the first
stuck jobs, unless `--allow-stall`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from disagg.cli.common import fail
from disagg.cli.tables import print_table
from disagg.model import SpecError, load_cluster, never_fits
from disagg.model.tenants import Tenants, load_tenants
from disagg.profiles.learn import EXPLORE
from disagg.sim.engine import FailureModel
from disagg.sim.report import RunOutput, stall_notes, tables, write_json, write_plots
from disagg.sim.scenarios import SCENARIOS, UnknownScenarioError, get_scenario
from disagg.sim.sweep import RunSpec, TraceSource, default_workers, grid, run_local, run_one, run_ray
from disagg.sim.trace import TRACE_FORMATS, read_trace

DEFAULT_POLICIES = "drmaestro,drmaestro-na,firmament,greedy,random-remote,fifo"
#: Exit code of a simulation in which a policy left jobs waiting for good (see `--allow-stall`).
EXIT_STALLED = 3


class BadInput(ValueError):
    """Input that stops the command before it simulates anything (exit code 2)."""


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_policies(text: str) -> list[str]:
    from disagg.placement.registry import UnknownPolicyError, get_policy

    names = _split(text)
    if not names:
        raise BadInput("--policies: give at least one policy name")
    for name in names:
        try:
            get_policy(name)
        except UnknownPolicyError as exc:
            raise BadInput(f"--policies: {exc}") from None
    return list(dict.fromkeys(names))


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in _split(text):
        try:
            seeds.append(int(part))
        except ValueError:
            raise BadInput(f"--seeds: value {part!r} is not an integer (e.g. --seeds 1,2,3)") from None
    if not seeds:
        raise BadInput("--seeds: give at least one seed (e.g. --seeds 1,2,3)")
    return list(dict.fromkeys(seeds))


def parse_scenarios(text: str) -> list[str]:
    names = _split(text)
    if not names:
        raise BadInput(f"--scenario: give a name; known scenarios: {', '.join(SCENARIOS)}")
    for name in names:
        try:
            get_scenario(name)
        except UnknownScenarioError as exc:
            raise BadInput(f"--scenario: {exc}") from None
    return names


def trace_source(cluster: Path, trace: Path, fmt: str | None) -> TraceSource:
    """Read the cluster spec and the whole trace; every job must be able to fit on the cluster."""
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise BadInput(f"--trace-format: value {fmt!r} is not known; known formats: {', '.join(TRACE_FORMATS)}")
    snapshot = load_cluster(cluster)
    subs = read_trace(trace, fmt)
    problems = []
    for sub in subs:
        why = never_fits(sub.job, snapshot)
        if why:
            problems.append(f"job {sub.job.name!r} can never fit on {cluster}: {why}")
    if problems:
        raise SpecError(str(trace), problems[:20])
    return TraceSource(trace.stem, snapshot, tuple(subs))


def failure_model(mtbf: float | None, mttr: float) -> FailureModel | None:
    if mtbf is None:
        return None
    if mtbf <= 0 or mttr <= 0:
        raise BadInput(f"--mtbf/--mttr: values {mtbf:g}/{mttr:g} are not allowed: both must be > 0 seconds")
    return FailureModel(mtbf, mttr)


def parse_tenants_option(value: str | None) -> tuple[Tenants | None, bool]:
    """`--tenants`: a tenants spec file, or `none` (the plain policies, even on a scenario with
    tenants); not given: the scenario's own spec, if any. Returns (spec, fairness on)."""
    if value is None:
        return None, True
    if value.strip().lower() == "none":
        return None, False
    path = Path(value)
    if not path.exists():
        raise BadInput(f"--tenants: file {value!r} does not exist (give a tenants spec, or 'none')")
    return load_tenants(path), True


def build_specs(
    scenario: str | None, cluster: Path | None, trace: Path | None, trace_format: str | None,
    policies: str, seeds: str, interval: float, sweep: bool, failures: FailureModel | None = None,
    tenants: str | None = None,
    starvation_rounds: int | None = None,
) -> list[RunSpec]:
    """Validate every input and return the runs to do; raises BadInput or SpecError."""
    spec, fairness = parse_tenants_option(tenants)
    if interval <= 0:
        raise BadInput(f"--interval: value {interval:g} is not allowed: must be > 0 seconds")
    if starvation_rounds is not None and starvation_rounds < 1:
        raise BadInput(f"--starvation-rounds: value {starvation_rounds} is not allowed: must be >= 1 round")
    names = parse_policies(policies)
    seed_list = parse_seeds(seeds)
    if scenario is not None and (cluster is not None or trace is not None):
        raise BadInput("give either --scenario NAME or --cluster C --trace T, not both")
    if scenario is not None:
        scenarios = parse_scenarios(scenario)
        if len(scenarios) > 1 and not sweep:
            raise BadInput("several scenarios need --sweep (or run them one at a time)")
        return grid(scenarios, names, seed_list, interval, failures=failures, tenants=spec, fairness=fairness,
                    starvation_rounds=starvation_rounds)
    if cluster is None or trace is None:
        raise BadInput(f"give --scenario NAME (known: {', '.join(SCENARIOS)}) or both --cluster and --trace")
    source = trace_source(cluster, trace, trace_format)
    return grid([source.name], names, seed_list, interval, source, failures, spec, fairness, starvation_rounds)


def with_knowledge(specs: list[RunSpec], truth: Path | None, profiles: Path | None, learn: bool,
                   knowledge: str | None, explore: int = EXPLORE) -> list[RunSpec]:
    """Each run once per kind of knowledge the policies are given (`sim.learning`), with the true
    profiles the jobs run by. Default: learned with --learn, the given table with --profiles, else shipped."""
    from disagg.model.spec import load_profiles
    from disagg.sim.learning import KNOWLEDGE

    kinds = _split(knowledge) if knowledge is not None else [
        "learned" if learn else "given" if profiles is not None else "shipped"]
    for kind in kinds:
        if kind not in KNOWLEDGE:
            raise BadInput(f"--knowledge: value {kind!r} is not known; known: {', '.join(KNOWLEDGE)}")
        if kind == "oracle" and truth is None:
            raise BadInput("--knowledge oracle: the policies would know the truth, but no --truth FILE is given")
        if kind == "given" and profiles is None:
            raise BadInput("--knowledge given: give the table with --profiles FILE")
    true_table = load_profiles(truth) if truth is not None else None
    given = load_profiles(profiles) if profiles is not None else None
    if explore < 0:
        raise BadInput(f"--explore: value {explore} is not allowed: must be >= 0 remote observations")
    return [replace(spec, truth=true_table, knowledge=kind, profiles=given, explore=explore)
            for spec in specs for kind in kinds]


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def execute(specs: list[RunSpec], sweep: bool, ray_address: str | None, workers: int,
            console: Console) -> list[RunOutput]:
    """Run the specs with a progress bar: in order here, or spread over local cores / a Ray cluster."""
    outputs: list[RunOutput] = []
    with _progress(console) as bar:
        task = bar.add_task("simulating", total=len(specs))
        if ray_address is not None or sweep:
            where = f"Ray at {ray_address}" if ray_address else f"{workers or default_workers()} local workers"
            bar.update(task, description=f"simulating on {where}")

            def done(out: RunOutput) -> None:
                bar.advance(task)
                bar.update(task, description=f"done {out.scenario}/{out.summary['policy']}/seed {out.summary['seed']}")

            if ray_address is not None:
                return run_ray(specs, ray_address, done)
            return run_local(specs, workers, done)
        for i, spec in enumerate(specs):
            bar.update(task, description=f"{spec.scenario} · {spec.policy} · seed {spec.seed}")

            def step(share: float, base: int = i) -> None:
                bar.update(task, completed=base + share)

            outputs.append(run_one(spec, step))
            bar.update(task, completed=i + 1)
    return outputs


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
    workers: Annotated[int, typer.Option(help="Local worker processes for --sweep (0 = all cores).")] = 0,
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
    console = Console()
    try:
        specs = build_specs(scenario, cluster, trace, trace_format, policies, seeds, interval, sweep,
                            failure_model(mtbf, mttr), tenants, starvation_rounds)
        specs = with_knowledge(specs, truth, profiles, learn, knowledge, explore)
    except (BadInput, SpecError) as exc:
        raise fail(str(exc)) from None
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
