"""What `disagg simulate` runs, apart from its options: every input checked (`BadInput`, exit code 2),
the runs built (`build_specs`, `with_knowledge`) and executed with a progress bar (`execute`). Kept out of
`simulate.py`, which every `disagg` command imports for the help: this module brings the simulator,
the policies and NumPy.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from disagg.model import SpecError, load_cluster, never_fits
from disagg.model.tenants import Tenants, load_tenants
from disagg.profiles.learn import EXPLORE
from disagg.sim.engine import FailureModel
from disagg.sim.report import RunOutput
from disagg.sim.scenarios import SCENARIOS, UnknownScenarioError, get_scenario
from disagg.sim.sweep import RunSpec, TraceSource, default_workers, grid, run_local, run_one, run_ray
from disagg.sim.trace import TRACE_FORMATS, read_trace


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
    if not (0 < mtbf < math.inf and 0 < mttr < math.inf):
        raise BadInput(f"--mtbf/--mttr: values {mtbf:g}/{mttr:g} are not allowed: both must be finite numbers "
                       "> 0 seconds")
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
    if not 0 < interval < math.inf:
        raise BadInput(f"--interval: value {interval:g} is not allowed: must be a finite number > 0 seconds")
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
