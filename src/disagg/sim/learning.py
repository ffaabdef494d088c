"""What the simulated policies know of each image, apart from how jobs really run (issue 26).

`disagg simulate --truth FILE` runs every job by the true profiles in FILE (the execution model), while
the policies see one of:

- `shipped`: the shipped table (neutral for images it does not know) — the default;
- `given`: a table given with `--profiles`;
- `oracle`: the truth itself;
- `neutral`: nothing (every image neutral);
- `learned` (`--learn`): what the finished jobs so far say, fitted as the live controller fits it
  (`profiles.learn`, pessimistic while unsure), with `--profiles`' entries as priors.

`Knowledge.observe` takes each finished job as an observation and records, per image, the estimate's
error against the number of its finished jobs: the convergence the report shows and plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from disagg.model import Job
from disagg.profiles import NEUTRAL, Profile, lookup, normalize_image, with_profiles
from disagg.profiles.learn import (
    REFERENCE_LOAD,
    Estimate,
    Observation,
    fit,
    remote_slowdown,
    split_prior,
    to_profile,
    typical,
)
from disagg.profiles.table import ProfileTable

#: What the policies may know, by name (`--knowledge`).
KNOWLEDGE = ("shipped", "given", "oracle", "neutral", "learned")


@dataclass
class Knowledge:
    """The table the policies see this round, and (when learning) what the finished jobs taught."""

    kind: str = "shipped"
    table: ProfileTable | None = None        # given or oracle; None: shipped
    truth: ProfileTable | None = None        # for the convergence record only
    observations: dict[str, list[Observation]] = field(default_factory=dict)
    estimates: dict[str, Estimate] = field(default_factory=dict)
    learned: dict[str, Profile] = field(default_factory=dict)
    convergence: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    #: Remote observations an image needs before the policies see its pessimistic profile: until then
    #: they see the estimate itself (optimism under uncertainty, the bandit's way to learn); 0: cautious
    #: from the first observation.
    explore: int = 8
    #: Whether a new image's prior ties its load term to its fixed one by the ratio that images whose
    #: loads were spread agree on (`profiles.learn.split_prior`).
    share_split: bool = False
    #: Remote observations an image may make while placed blind to link load (`load_blind`), as long
    #: as its load term is unsure (relative sd over `blind_sd`): so that its first remote runs meet
    #: whatever load the placement brings, not only the quietest path. 0: never.
    blind: int = 0
    blind_sd: float = 0.25
    blind_load: float = -1.0

    def apply(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs as the policy sees them (`Job.profile` set), or as they are for the shipped table."""
        if self.kind == "shipped":
            return list(jobs)
        if self.kind == "neutral":
            return with_profiles(jobs, {})
        if self.kind == "learned":
            return [self._learned(j) for j in jobs]
        return with_profiles(jobs, self.table)

    def _learned(self, job: Job) -> Job:
        key = _key(job.image)
        profile = self.learned.get(key)
        if profile is None:
            profile = lookup(job.image, self.table) if self.table is not None else NEUTRAL
        return replace(job, profile=profile)

    def observe(self, image: str, obs: Observation) -> None:
        """A finished job of `image`: refit the image (learning) and record how far the estimate is."""
        if self.kind != "learned":
            return
        key = _key(image)
        runs = self.observations.setdefault(key, [])
        runs.append(obs)
        prior = lookup(image, self.table) if self.table is not None else None
        others = ((e.coef, e.remote_observations) for k, e in self.estimates.items() if k != key)
        split = None
        if self.share_split:
            split = split_prior((e.coef, e.cov) for k, e in self.estimates.items() if k != key)
        est = fit(key, runs, prior if prior is not None and prior.known else None, typical(others), split)
        self.estimates[key] = est
        if est.remote_observations < self.blind and _slope_unsure(est, self.blind_sd):
            self.learned[key] = load_blind(est, runs, None if self.blind_load < 0 else self.blind_load)
        else:
            self.learned[key] = est.profile(pessimistic=est.remote_observations >= self.explore)
        point = {"n": float(len(runs)), "remote": float(est.remote_observations), "slowdown": est.slowdown(),
                 "pessimistic": est.slowdown(pessimistic=True), "sd": est.slowdown_sd()}
        if self.truth is not None:
            true = remote_slowdown(lookup(image, self.truth))
            point["truth"] = true
            point["error"] = abs(est.slowdown() - true) / true
        self.convergence.setdefault(key, []).append(point)

    def report(self) -> dict[str, Any] | None:
        """Per image: its estimate's error against the number of its finished jobs (learning only)."""
        if self.kind != "learned":
            return None
        return {"knowledge": self.kind, "images": {
            image: {"points": points, "final": points[-1],
                    "after_20": next((p for p in points if p["n"] >= 20), None)}
            for image, points in sorted(self.convergence.items())}}


def _slope_unsure(est: Estimate, rel_sd: float) -> bool:
    """Whether the load term C is known to no better than `rel_sd` of itself (or of the remote extra
    at the reference load, where C is near 0)."""
    _, b, c = est.coef
    return est.sd[2] > rel_sd * max(c, (b + c * REFERENCE_LOAD) / REFERENCE_LOAD, 1e-9)


def load_blind(est: Estimate, runs: Sequence[Observation], at: float | None = None) -> Profile:
    """The estimate with its load term folded into the fixed one at the mean load its remote runs met:
    the remote cost it has seen, the same at every load, so that the network-aware policy does not
    keep the image to the quietest path (and learns nothing of its slope there)."""
    a, b, c = est.coef
    loads = [o.load for o in runs if o.remote_share > 0]
    seen = sum(loads) / len(loads) if loads else 0.0
    if at is not None:
        seen = at
    return to_profile(est.image, a, b + c * seen, 0.0, est.prior,
                      f"learned from {est.observations} tasks, placed blind to load while its slope is unsure")


def _key(image: str) -> str:
    return normalize_image(image)


def knowledge_for(kind: str, given: ProfileTable | None, truth: ProfileTable | None, explore: int = 8) -> Knowledge:
    """A fresh `Knowledge` of `kind` (one per run: learning is per run)."""
    if kind not in KNOWLEDGE:
        raise ValueError(f"knowledge {kind!r} is not known; known: {', '.join(KNOWLEDGE)}")
    if kind == "oracle":
        if truth is None:
            raise ValueError("knowledge 'oracle' needs the true profiles (--truth FILE)")
        return Knowledge("oracle", truth, truth)
    if kind == "given" and given is None:
        raise ValueError("knowledge 'given' needs a table (--profiles FILE)")
    return Knowledge(kind, given, truth, explore=explore)
