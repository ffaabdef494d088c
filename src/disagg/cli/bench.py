"""`disagg bench placement | slices | api | crash | chaos | failover | controller | sim`: benchmarks, JSON out.

The benchmarks themselves are library functions in `disagg.bench` and `disagg.sim.bench` that return
data; these commands check the options, show progress, and print the JSON. The benchmark modules are
imported inside the commands, so that `disagg --help` loads none of them.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from disagg.cli.common import fail
from disagg.cli.serve import serve_main

bench_app = typer.Typer(help="Performance benchmarks (JSON out).", no_args_is_help=True)

#: The stores `bench api` and `bench crash` run on: a file, or a throw-away server.
BACKENDS = ("sqlite", "postgres")


def _check_backends(backends: list[str]) -> None:
    for name in backends:
        if name not in BACKENDS:
            raise fail(f"--backend: {name!r} is not allowed; use sqlite or postgres")


def _print_results(results: list[dict[str, Any]]) -> None:
    """One result as an object, several (one per backend) as a list; indented."""
    sys.stdout.write(json.dumps(results if len(results) > 1 else results[0], indent=2) + "\n")


@bench_app.command("placement")
def bench_placement(
    machines: Annotated[int, typer.Option(min=1, max=200_000)] = 1000,
    gpus_per_machine: Annotated[int, typer.Option(min=0, max=64)] = 4,
    pending: Annotated[int, typer.Option(min=0, max=1_000_000)] = 1000,
    policy: Annotated[str, typer.Option()] = "drmaestro",
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1)] = 1,
    repeat: Annotated[int, typer.Option(min=1, max=100, help="Run the round N times; report the fastest.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (always JSON; kept for scripts).")] = True,
    tenants: Annotated[int, typer.Option(min=0, max=10_000, help=(
        "With N tenants (quotas, cohorts, fair share; the policy inside FairPolicy), against the same "
        "round without them (CPU seconds).")) ] = 0,
    learned_images: Annotated[int, typer.Option(min=0, max=1_000_000, help=(
        "With every job an image of a learned table of N images (profiles the round is told), against "
        "the same round on the shipped table (CPU seconds).")) ] = 0,
) -> None:
    """One round on a synthetic cluster (racks of 40, a GPU pool per rack, half the CPUs taken)."""
    from disagg.bench.placement import run_placement_bench
    from disagg.placement.registry import UnknownPolicyError, get_policy

    try:
        get_policy(policy)
    except UnknownPolicyError as exc:
        raise fail(str(exc)) from None
    if tenants and learned_images:
        raise fail("--tenants and --learned-images measure one thing each: give one of them")
    result = run_placement_bench(machines, gpus_per_machine, pending, policy, seed, repeat, tenants, learned_images)
    sys.stdout.write(json.dumps(result) + "\n")


@bench_app.command("slices")
def bench_slices(
    scale: Annotated[float, typer.Option(min=0.0001, max=1.0, help="Scale of the testbed's latencies.")] = 0.05,
    repeats: Annotated[int, typer.Option(min=1, max=20)] = 2,
    engine: Annotated[str, typer.Option(help="local (emulated testbed) | slurm (throw-away Slurm, root)")] = "local",
    fabric: Annotated[str, typer.Option(help="emulated | redfish (composing through a Redfish service that "
                                              "serves the emulated testbed)")] = "emulated",
) -> None:
    """Slice composition, steps in parallel vs one by one, for 1x4, 2x2, 4x1 machines x GPUs (JSON out).

    `--engine slurm`: the same shapes on a real Slurm, step by step, against a plain `sbatch` and through the
    controller on both engines (`disagg.bench.slurm`)."""
    if engine == "slurm":
        from disagg.bench.slurm import main as slurm_bench

        raise typer.Exit(slurm_bench(["--repeats", str(repeats)]))
    if engine != "local":
        raise fail(f"--engine: unknown engine {engine!r}; known: local, slurm")
    if fabric not in ("emulated", "redfish"):
        raise fail(f"--fabric: unknown fabric {fabric!r}; known: emulated, redfish")
    from disagg.bench.slices import run_slices_bench

    sys.stdout.write(json.dumps(run_slices_bench(scale, repeats, fabric), indent=2) + "\n")


@bench_app.command("api")
def bench_api(
    backend: Annotated[list[str], typer.Option(help="sqlite and/or postgres (repeat the option).")] = ["sqlite"],  # noqa: B006
    seconds: Annotated[float, typer.Option(min=1, max=600, help="How long to submit.")] = 10.0,
    clients: Annotated[int, typer.Option(min=1, max=64, help="Concurrent client threads.")] = 8,
    scale: Annotated[float, typer.Option(min=0.0, max=1.0, help="Scale of the testbed's latencies.")] = 0.001,
    api_process: Annotated[
        bool, typer.Option("--api-process/--one-process", help="Serve the API apart from the loop (as serve does).")
    ] = True,
) -> None:
    """Job submissions per second and p50/p99 latency of POST /v1/jobs on SQLite and PostgreSQL (JSON out)."""
    from disagg.bench.api import run_api_bench

    _check_backends(backend)
    _print_results([run_api_bench(b, seconds, clients, scale, api_process=api_process) for b in backend])


@bench_app.command("crash")
def bench_crash(
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="How many times to kill -9 the controller.")] = 200,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the kill moments and the jobs.")] = 5,
    scale: Annotated[float, typer.Option(min=0.001, max=1.0, help="Scale of the testbed's latencies.")] = 0.01,
    backend: Annotated[
        list[str], typer.Option(help="sqlite and/or postgres (a throw-away server; repeat the option).")
    ] = ["sqlite"],  # noqa: B006
    db: Annotated[
        str | None, typer.Option(help="An empty store to use instead (e.g. postgresql://…); overrides --backend.")
    ] = None,
) -> None:
    """kill -9 of the controller at random moments; invariants checked after each (JSON out)."""
    from rich.progress import Progress

    from disagg.bench.crash import run_crash_bench

    _check_backends(backend)
    results = []
    runs: list[str | None] = [None] if db else list(backend)
    for b in runs:
        with Progress(auto_refresh=False, transient=True) as progress:
            task = progress.add_task(f"kill -9 trials ({b or 'given store'})", total=trials)

            def advance(_trial: int, task: Any = task) -> None:
                progress.advance(task)
                progress.refresh()

            results.append(run_crash_bench(b, serve_main, trials, seed, scale, advance, db=db))
    _print_results(results)
    if any(r["violations"] for r in results):
        raise typer.Exit(1)


@bench_app.command("chaos")
def bench_chaos(
    minutes: Annotated[float | None, typer.Option(min=0.05, max=1440, help="Length of the fault phase, minutes.")
                       ] = None,
    seconds: Annotated[float | None, typer.Option(min=1, max=86_400, help="The same in seconds (short runs).")
                       ] = None,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of every action of the soak (replays it).")] = 1,
    tenants: Annotated[int, typer.Option(min=1, max=26, help="Tenants (quotas, a cohort, borrowing).")] = 4,
    rate: Annotated[float, typer.Option(min=0.01, max=20, help="Submissions per second.")] = 0.5,
    latency_scale: Annotated[float, typer.Option(min=0.001, max=1.0, help="Scale of the testbed's latencies.")
                             ] = 0.02,
    max_wait_rounds: Annotated[int, typer.Option(min=1, max=1_000_000, help=(
        "A job that waits more rounds than this while what it fits is free and reachable is stuck."))] = 10,
    drain_s: Annotated[float, typer.Option(min=1, max=86_400, help="At most this long for the queue to drain.")
                       ] = 180.0,
    keep_dir: Annotated[str | None, typer.Option(help="Run in this directory and keep it (server log, store, "
                                                     "the tasks' markers), to look into a failing seed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (always JSON; kept for scripts).")] = True,
) -> None:
    """A seeded chaos soak of a real controller: jobs, device and link faults, kill -9, cancels; then the
    invariants (JSON out; exit 1 when one fails, with the command that replays the seed)."""
    from rich.console import Console
    from rich.progress import Progress

    from disagg.bench.chaos import ChaosOptions, run_chaos

    if minutes is not None and seconds is not None:
        raise fail("--minutes and --seconds: give one of them, not both")
    length = seconds if seconds is not None else (minutes if minutes is not None else 2.0) * 60
    opts = ChaosOptions(seconds=length, seed=seed, tenants=tenants, rate=rate, latency_scale=latency_scale,
                        max_wait_rounds=max_wait_rounds, drain_s=drain_s, keep_dir=keep_dir)
    with Progress(console=Console(stderr=True), auto_refresh=False, transient=True) as bar:
        task = bar.add_task(f"chaos seed {seed}", total=length)

        def advance(done: float, total: float, phase: str) -> None:
            bar.update(task, completed=done, total=total, description=f"chaos seed {seed}: {phase}")
            bar.refresh()

        result = run_chaos(serve_main, opts, advance)
    _print_results([result])
    if result["violations"]:
        sys.stderr.write(f"invariants failed; replay: {result['replay']}\n")


@bench_app.command("failover")
def bench_failover(
    trials: Annotated[int, typer.Option(min=1, max=10_000,
                                        help="Leader failures (kill -9, SIGSTOP, SIGTERM in turn).")] = 50,
    replicas: Annotated[int, typer.Option(min=2, max=5, help="Replicas of the controller.")] = 2,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the failure moments and the jobs.")] = 7,
    scale: Annotated[float, typer.Option(min=0.001, max=1.0, help="Scale of the testbed's latencies.")] = 0.01,
) -> None:
    """Replicas on a throw-away PostgreSQL; the leader killed or paused past its lease (JSON out; exit 1 on
    any job lost or run twice, any device leaked, any fenced write accepted)."""
    from rich.progress import Progress

    from disagg.bench.failover import run_failover_bench

    with Progress(auto_refresh=False, transient=True) as progress:
        task = progress.add_task("leader failures", total=trials)

        def advance(_trial: int) -> None:
            progress.advance(task)
            progress.refresh()

        result = run_failover_bench(serve_main, trials, replicas, seed, scale, advance)
    _print_results([result])
    if result["violations"]:
        raise typer.Exit(1)


@bench_app.command("controller")
def bench_controller(
    machines: Annotated[int, typer.Option(min=1, max=200_000, help="Machines of the synthetic cluster.")] = 12_500,
    gpus_per_machine: Annotated[int, typer.Option(min=0, max=64, help="Local GPUs per machine.")] = 4,
    rate: Annotated[float, typer.Option(min=0.1, max=100_000, help="Submissions per second, all clients.")] = 1000.0,
    clients: Annotated[int, typer.Option(min=1, max=256, help="Client threads submitting.")] = 8,
    seconds: Annotated[float, typer.Option(min=1, max=3600, help="How long to submit.")] = 10.0,
    db: Annotated[str, typer.Option(help="sqlite, or postgresql (a throw-away server).")] = "sqlite",
    window: Annotated[int, typer.Option(min=1, max=1_000_000, help="The controller's window.")] = 32,
    backfill: Annotated[int, typer.Option(min=0, max=1_000_000, help="The controller's backfill.")] = 64,
    round_gap_s: Annotated[float, typer.Option(min=0, max=60, help="The controller's round gap.")] = 0.5,
    tick_s: Annotated[float, typer.Option(min=0.001, max=60, help="The controller's loop period.")] = 0.25,
    workers: Annotated[int, typer.Option(min=1, max=1024, help="Slices composed or torn down at once.")] = 16,
    latency_scale: Annotated[float, typer.Option(min=0, max=1, help="Scale of the fabric's latencies.")] = 0.001,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "drmaestro-na",
    drain_s: Annotated[float, typer.Option(min=0, max=3600, help="After submitting, wait this long at most "
                                                               "for the queue to empty.")] = 30.0,
    batch: Annotated[int, typer.Option(min=1, max=100, help="Jobs per request (more than 1: POST "
                                                            "/v1/job-batches, as a job array).")] = 1,
) -> None:
    """Jobs placed and committed per second by a real controller on a large synthetic cluster, and
    submit -> placed latency, beside the round time (JSON out; `docs/benchmarks.md`)."""
    from rich.console import Console
    from rich.progress import Progress

    from disagg.bench.controller import DB_KINDS, ControllerOptions, run_controller_bench
    from disagg.placement.registry import UnknownPolicyError, get_policy

    if db not in DB_KINDS:
        raise fail(f"--db: {db!r} is not allowed; use sqlite or postgresql")
    try:
        get_policy(policy)
    except UnknownPolicyError as exc:
        raise fail(f"--policy: {exc}") from None
    import signal

    # `timeout` and Ctrl-C end the run through its cleanup: the server's processes and PostgreSQL are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    opts = ControllerOptions(machines=machines, gpus_per_machine=gpus_per_machine, rate=rate, clients=clients,
                             seconds=seconds, db=db, window=window, backfill=backfill, round_gap_s=round_gap_s,
                             tick_s=tick_s,
                             workers=workers, latency_scale=latency_scale, policy=policy, drain_s=drain_s,
                             batch=batch)
    with Progress(console=Console(stderr=True), auto_refresh=False, transient=True) as bar:
        task = bar.add_task("controller", total=seconds)

        def advance(done: float, total: float, phase: str, submitted: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{phase}: {submitted} accepted")
            bar.refresh()

        result = run_controller_bench(opts, advance)
    _print_results([result])


@bench_app.command("sim")
def bench_sim(
    which: Annotated[str, typer.Argument(help="paper (paper-128m-4096j × six policies) or large "
                                              "(100,000 jobs on 1,000 machines).")] = "paper",
    jobs: Annotated[int, typer.Option(min=1, help="large: jobs in the synthetic trace.")] = 100_000,
    machines: Annotated[int, typer.Option(min=1, help="large: machines.")] = 1000,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1)] = 1,
    interval: Annotated[float, typer.Option(min=0.001, max=86_400, help="Seconds between rounds (simulated).")] = 5.0,
    workers: Annotated[int, typer.Option(min=0, help="paper: processes, one policy each (0 = every core, "
                                                     "1 = one after another in this process).")] = 0,
    max_iterations: Annotated[int | None, typer.Option(
        min=1, max=10, help="paper: passes a flow policy's round may make (drmaestro, drmaestro-na, firmament; "
                            "default: their own, 3). An experiment's knob: docs/benchmarks.md.")] = None,
) -> None:
    """Simulator benchmarks; prints one JSON object."""
    from disagg.sim.bench import bench_large, bench_paper

    if which == "paper":
        out = bench_paper(seed, interval, workers, max_iterations=max_iterations)
    elif max_iterations is not None:
        raise fail(f"--max-iterations {max_iterations}: only the paper benchmark takes it, not {which!r}")
    elif which == "large":
        out = bench_large(jobs, machines, seed, interval_s=interval)
    else:
        raise fail(f"unknown benchmark {which!r}; known: paper, large")
    sys.stdout.write(json.dumps(out) + "\n")


def register(app: typer.Typer) -> None:
    """Add the `bench` group to the `disagg` app."""
    app.add_typer(bench_app, name="bench")
