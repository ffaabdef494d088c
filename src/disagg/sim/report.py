"""Reports of simulation runs: a side-by-side Rich table, the `--json` document and PNG plots.

Input is a list of `RunOutput` (one per scenario × policy × seed). The table shows, per scenario and
policy, the mean ± standard deviation over seeds; the plots show the first seed of each policy:
GPUs in use over time (the seed's Figs. 4, 5, 7, 9), the CDF of scheduler latency (Figs. 6, 8) and the
normalized job execution time sorted from worst to best (Fig. 10).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from disagg.model.states import JobState
from disagg.sim.engine import SimResult
from disagg.sim.metrics import normalized_exec, summarize

#: Longest series kept per run for plots (memory stays flat however long the run).
MAX_POINTS = 4000


@dataclass(frozen=True)
class RunOutput:
    """One run's summary row plus the series its plots need (downsampled). Picklable for workers."""

    scenario: str
    summary: dict[str, Any]
    gpu_times: list[float] = field(default_factory=list)
    gpu_in_use: list[float] = field(default_factory=list)
    total_gpus: int = 0
    latencies_s: list[float] = field(default_factory=list)
    normalized_exec: list[float] = field(default_factory=list)
    #: Sample times and each tenant's weighted dominant share at them (runs that report tenants).
    tenant_times: list[float] = field(default_factory=list)
    tenant_shares: dict[str, list[float]] = field(default_factory=dict)


def _thin(values: np.ndarray, n: int = MAX_POINTS) -> np.ndarray:
    if len(values) <= n:
        return values
    idx = np.linspace(0, len(values) - 1, n).round().astype(np.int64)
    return values[idx]


def run_output(scenario: str, result: SimResult, seed: int) -> RunOutput:
    """Summarize a result and keep thinned series: a step series keeps its shape at MAX_POINTS points."""
    times = np.asarray(result.gpu_times, dtype=np.float64)
    use = np.asarray(result.gpu_in_use, dtype=np.float64)
    idx = _thin(np.arange(len(times)))
    lat = np.sort(np.asarray(result.latencies_s, dtype=np.float64))
    norm = np.sort(normalized_exec(result.records))[::-1]
    summary = summarize(result, seed)
    summary["scenario"] = scenario
    if result.learning is not None:
        summary["learning"] = result.learning
    series: dict[str, Any] = {}
    if result.tenants is not None:
        summary["tenants"] = result.tenants["tenants"]
        summary["fairness"] = result.tenants["fairness"]
        series = result.tenants.get("series", {})
    return RunOutput(
        scenario=scenario, summary=summary, gpu_times=times[idx].tolist(), gpu_in_use=use[idx].tolist(),
        total_gpus=result.total_gpus, latencies_s=_thin(lat).tolist(), normalized_exec=_thin(norm).tolist(),
        tenant_times=list(series.get("times", [])), tenant_shares=dict(series.get("shares", {})),
    )


# -- JSON -----------------------------------------------------------------------------------------------


def to_json(outputs: Sequence[RunOutput]) -> dict[str, Any]:
    """`{"scenario": ..., "results": [...]}`; with several scenarios, each row names its own."""
    scenarios = list(dict.fromkeys(o.scenario for o in outputs))
    return {
        "scenario": scenarios[0] if len(scenarios) == 1 else ",".join(scenarios),
        "results": [o.summary for o in outputs],
    }


def write_json(outputs: Sequence[RunOutput], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(outputs), indent=2) + "\n")


# -- table ----------------------------------------------------------------------------------------------

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("makespan_s", "makespan s", "{:.0f}"),
    ("qos_violations", "QoS viol.", "{:.1f}"),
    ("mean_jct_s", "mean JCT s", "{:.0f}"),
    ("gpu_utilization", "GPU util", "{:.2f}"),
    ("remote_gpu_share", "remote GPU", "{:.2f}"),
    ("sched_latency_p50_s", "lat p50 ms", "{:.2f}"),
    ("sched_latency_p99_s", "lat p99 ms", "{:.2f}"),
    ("wall_s", "wall s", "{:.1f}"),
)


def _cell(values: list[float], fmt: str, scale: float = 1.0) -> str:
    arr = np.asarray(values, dtype=np.float64) * scale
    mean = fmt.format(float(arr.mean()))
    if len(arr) < 2:
        return mean
    return f"{mean} ± {fmt.format(float(arr.std(ddof=1)))}"


def grouped(outputs: Sequence[RunOutput]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """scenario → policy → summary rows (one per seed), in first-seen order."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for o in outputs:
        out[o.scenario][o.summary["policy"]].append(o.summary)
    return out


def tables(outputs: Sequence[RunOutput]) -> list[Table]:
    """One table per scenario, one row per policy: mean ± spread (sample std) over seeds."""
    result = []
    for scenario, by_policy in grouped(outputs).items():
        seeds = max(len(rows) for rows in by_policy.values())
        table = Table(title=f"{scenario} ({seeds} seed{'s' if seeds > 1 else ''}; mean ± std)")
        table.add_column("policy", no_wrap=True)
        table.add_column("done", justify="right", no_wrap=True)
        for _, title, _ in COLUMNS:
            table.add_column(title, justify="right", no_wrap=True)  # a number is never cut (cli.tables splits)
        fair = any("fairness" in r for rows in by_policy.values() for r in rows)
        if fair:
            table.add_column("Jain", justify="right", no_wrap=True)
        for policy, rows in by_policy.items():
            done = f"{sum(r[JobState.COMPLETED] for r in rows) / len(rows):.0f}/{rows[0]['jobs']}"
            if any(r.get("stalled_jobs") for r in rows):
                done += " stalled" if any(r.get("stalled") for r in rows) else " unfinished"
            cells = []
            for key, _, fmt in COLUMNS:
                scale = 1000.0 if key.startswith("sched_latency") else 1.0
                cells.append(_cell([float(r[key]) for r in rows], fmt, scale))
            if fair:
                jain = [float(r.get("fairness", {}).get("jain_dominant_share", 1.0)) for r in rows]
                cells.append(_cell(jain, "{:.2f}"))
            table.add_row(policy, done, *cells)
        result.append(table)
    return result


def stall_notes(outputs: Sequence[RunOutput], shown: int = 3) -> list[str]:
    """One line per run that ended with jobs still waiting: a failure, said as such (issue 14), e.g.
    `paper-4m-128j/fifo/seed 1: done 89/120 — stalled: 31 jobs can never be placed by fifo; first:
    t089 (why), …`. A job one policy can never place while another can is the comparison itself."""
    lines = []
    for o in outputs:
        r = o.summary
        stuck = r.get("stalled_jobs") or []
        if not stuck:
            continue
        what = (f"stalled: {len(stuck)} jobs can never be placed by {r['policy']}" if r.get("stalled") else
                f"unfinished: {len(stuck)} jobs still waiting when the run stopped at {r['sim_end_s']:g} s")
        first = ", ".join(f"{x['job']} ({x['reason']})" for x in stuck[:shown])
        more = " …" if len(stuck) > shown else ""
        lines.append(f"{o.scenario}/{r['policy']}/seed {r['seed']}: done {r[JobState.COMPLETED]}/{r['jobs']} — "
                     f"{what}; first: {first}{more}")
    return lines


# -- plots ----------------------------------------------------------------------------------------------


def _first_seed(outputs: Sequence[RunOutput]) -> dict[str, dict[str, RunOutput]]:
    out: dict[str, dict[str, RunOutput]] = defaultdict(dict)
    for o in outputs:
        out[o.scenario].setdefault(o.summary["policy"], o)
    return out


def write_plots(outputs: Sequence[RunOutput], directory: Path) -> list[Path]:
    """Three PNGs per scenario; returns their paths. Uses matplotlib's file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for scenario, by_policy in _first_seed(outputs).items():
        seed = next(iter(by_policy.values())).summary["seed"]
        # GPUs in use over time (a step function per policy).
        fig, ax = plt.subplots(figsize=(8, 4.5))
        # One policy stuck far longer than the others would squash everyone else into the left edge:
        # cut the axis at 1.5x the median end and say in the legend who runs past it.
        ends = {p: (o.gpu_times[-1] if o.gpu_times else 0.0) for p, o in by_policy.items()}
        cut = min(max(ends.values(), default=0.0), 1.5 * float(np.median(list(ends.values()) or [0.0])))
        for policy, o in by_policy.items():
            label = policy if ends[policy] <= cut else f"{policy} (runs to {ends[policy]:.0f} s)"
            ax.step(o.gpu_times, o.gpu_in_use, where="post", label=label, linewidth=1.2)
        if cut > 0:
            ax.set_xlim(0, cut * 1.02)
        total = next(iter(by_policy.values())).total_gpus
        ax.axhline(total, color="grey", linestyle=":", linewidth=1, label=f"{total} GPUs")
        ax.set(xlabel="simulated time (s)", ylabel="GPUs in use", title=f"{scenario}: GPUs in use (seed {seed})")
        ax.legend(fontsize=8)
        written.append(_save(fig, directory / f"{scenario}-gpus-in-use.png"))
        # CDF of scheduler latency.
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for policy, o in by_policy.items():
            lat = np.asarray(o.latencies_s) * 1000.0
            if len(lat):
                ax.step(lat, np.linspace(1 / len(lat), 1.0, len(lat)), where="post", label=policy)
        ax.set_xscale("log")
        ax.set(xlabel="scheduler latency per round (ms, wall clock)", ylabel="CDF",
               title=f"{scenario}: scheduler latency")
        ax.legend(fontsize=8)
        written.append(_save(fig, directory / f"{scenario}-sched-latency-cdf.png"))
        # Normalized execution time, worst to best.
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for policy, o in by_policy.items():
            norm = np.asarray(o.normalized_exec)
            if len(norm):
                ax.plot(np.linspace(0.0, 100.0, len(norm)), norm, label=policy, linewidth=1.2)
        ax.set(xlabel="jobs, worst to best (%)", ylabel="execution time / base time",
               title=f"{scenario}: normalized job execution time")
        ax.legend(fontsize=8)
        written.append(_save(fig, directory / f"{scenario}-normalized-exec.png"))
        if any(o.tenant_shares for o in by_policy.values()):
            written.append(_tenant_plot(scenario, by_policy, directory))
        if any(o.summary.get("learning") for o in by_policy.values()):
            written.append(_learning_plot(scenario, by_policy, directory))
    return written


def _learning_plot(scenario: str, by_policy: dict[str, RunOutput], directory: Path) -> Path:
    """The learned remote slowdown's relative error against each image's finished jobs, one panel
    per learning run (`--learn`): how fast the estimate converges, and where the 10% line is."""
    import matplotlib.pyplot as plt

    runs = [(p, o.summary["learning"]) for p, o in by_policy.items() if o.summary.get("learning")]
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.8 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (policy, learning) in zip(axes[:, 0], runs, strict=True):
        for image, data in learning["images"].items():
            points = [p for p in data["points"] if "error" in p]
            if points:
                ax.plot([p["n"] for p in points], [100.0 * p["error"] for p in points], label=image, linewidth=1.2)
        ax.axhline(10.0, color="grey", linestyle=":", linewidth=1, label="10%")
        ax.axvline(20.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set(ylabel="slowdown error (%)", title=f"{policy}: learned φ(1, 0.5)/φ(0) against the truth",
               ylim=(0, None))
        ax.legend(fontsize=7, loc="upper right", ncol=2)
    axes[-1, 0].set_xlabel("finished jobs of the image")
    fig.suptitle(f"{scenario}: profiles learned from finished jobs")
    return _save(fig, directory / f"{scenario}-learning.png")


def _tenant_plot(scenario: str, by_policy: dict[str, RunOutput], directory: Path) -> Path:
    """Each tenant's weighted dominant share over time, one panel per policy (with Jain's index)."""
    import matplotlib.pyplot as plt

    runs = [(p, o) for p, o in by_policy.items() if o.tenant_shares]
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.4 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (policy, o) in zip(axes[:, 0], runs, strict=True):
        for k, (tenant, shares) in enumerate(sorted(o.tenant_shares.items())):
            # dashed lines after the first: equal shares would otherwise hide each other
            ax.step(o.tenant_times, shares, where="post", label=tenant, linewidth=1.4,
                    linestyle=("-", "--", ":", "-.")[k % 4])
        index = o.summary.get("fairness", {}).get("jain_dominant_share")
        ax.set(ylabel="share / weight", title=f"{policy}: Jain's index {index}", ylim=(0, None))
        ax.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.suptitle(f"{scenario}: each tenant's dominant share over time")
    return _save(fig, directory / f"{scenario}-tenant-shares.png")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
