#!/usr/bin/env python3
"""How well drmaestro-na learns profiles (issue 26; docs/profiles.md, "Measured"): per (trace, image) the
error of the learned φ(1, 0.5)/φ(0) after the image's 20th finished job, and QoS violations with learned,
oracle and neutral knowledge. Traces are tests/sim/test_sim_learning.py's generator (600 jobs, seeds
1–9 by default) on examples/learning's cluster and truth. One simulation at a time; JSON on stdout.

    PYTHONPATH=src .venv/bin/python scripts/measure-learning.py [--seeds 1-9] [--compare 1-3] [--explore 8]
        [--blind 4]

`--compare ""` runs no oracle or neutral traces (only the learned ones).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.progress import Progress

from disagg.model import load_cluster
from disagg.model.spec import load_profiles
from disagg.profiles.learn import EXPLORE
from disagg.sim import learning
from disagg.sim.sweep import RunSpec, TraceSource, run_one
from disagg.sim.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
LEARNING = ROOT / "examples" / "learning"


def _generator() -> Any:
    """The tests' trace generator, so that the measured traces are the ones the tests judge on."""
    spec = importlib.util.spec_from_file_location("test_sim_learning", ROOT / "tests/sim/test_sim_learning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._trace


def _seeds(text: str) -> list[int]:
    """`1-9` or `1,4,7`."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",") if s]


def _run(trace: Path, knowledge: str, explore: int) -> dict[str, Any]:
    source = TraceSource("learning", load_cluster(LEARNING / "cluster.yaml"), tuple(read_trace(trace)))
    spec = RunSpec("learning", "drmaestro-na", 1, 5.0, source, truth=load_profiles(LEARNING / "truth.yaml"),
                   knowledge=knowledge, explore=explore)
    return run_one(spec).summary


def _pairs(seed: int, learning: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for image, v in learning["images"].items():
        p = v["after_20"] or {}
        out.append({"seed": seed, "image": image, "error": p.get("error"), "remote": p.get("remote"),
                    "slowdown": p.get("slowdown"), "sd": p.get("sd"), "truth": p.get("truth"),
                    "pessimistic": p.get("pessimistic"),
                    "final_error": v["final"].get("error"), "final_remote": v["final"].get("remote"),
                    "settled_n": _settled(v["points"])})
    return out


def _settled(points: list[dict[str, Any]], within: float = 0.10) -> int | None:
    """The number of finished jobs from which the estimate stays within `within` of the truth for the
    rest of the trace (None: it does not by the trace's end)."""
    settled = None
    for p in points:
        error = p.get("error")
        if error is None or error > within:
            settled = None
        elif settled is None:
            settled = int(p["n"])
    return settled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-9", help="traces judged for the error after 20 jobs")
    ap.add_argument("--compare", default="1-3", help="traces also run with oracle and neutral knowledge")
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--explore", type=int, default=EXPLORE)
    ap.add_argument("--blind", type=int, default=learning.BLIND_EXPLORE,
                    help="remote runs an image may make placed blind to load while its load term is unsure")
    args = ap.parse_args()
    learning.BLIND_EXPLORE = args.blind  # read by every Knowledge the runs make
    make = _generator()
    seeds, compare = _seeds(args.seeds), _seeds(args.compare)
    runs = [(s, "learned") for s in seeds] + [(s, k) for s in compare for k in ("oracle", "neutral")]
    pairs: list[dict[str, Any]] = []
    violations: dict[str, dict[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, Progress(transient=True, console=None) as bar:
        task = bar.add_task("simulating", total=len(runs))
        for seed, knowledge in runs:
            bar.update(task, description=f"trace {seed}, {knowledge}")
            summary = _run(make(Path(tmp) / f"trace-{seed}.csv", args.jobs, seed), knowledge, args.explore)
            violations.setdefault(knowledge, {})[seed] = int(summary["qos_violations"])
            if knowledge == "learned":
                pairs += _pairs(seed, summary["learning"])
            bar.advance(task)
    errors = [p["error"] for p in pairs if p["error"] is not None]
    print(json.dumps({
        "jobs": args.jobs, "explore": args.explore, "blind": args.blind, "pairs": pairs,
        "within_10": sum(e <= 0.10 for e in errors), "within_13": sum(e <= 0.13 for e in errors), "of": len(pairs),
        "worst": max(errors, default=None),
        # How many finished jobs each image took to get within 10% for good (issue 26: "say how many").
        "settled_by": {str(n): sum(1 for p in pairs if p["settled_n"] is not None and p["settled_n"] <= n)
                       for n in (20, 30, 40, 60, 100)},
        "never_settled": [f"{p['seed']}/{p['image']}" for p in pairs if p["settled_n"] is None],
        "settled_n": sorted(p["settled_n"] for p in pairs if p["settled_n"] is not None),
        "misses": [f"{p['seed']}/{p['image']} {p['error']:.3f}" for p in pairs if (p["error"] or 0) > 0.10],
        "violations": violations,
        "violations_compare_sum": {k: sum(v.get(s, 0) for s in compare) for k, v in violations.items()},
        "violations_all_sum": {k: sum(v.values()) for k, v in violations.items()},
    }, indent=1))


if __name__ == "__main__":
    sys.exit(main())
