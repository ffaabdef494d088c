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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from disagg.model import Job
from disagg.profiles import NEUTRAL, Profile, lookup, normalize_image, with_profiles
from disagg.profiles.learn import (
    EXPLORE,
    REFERENCE_LOAD,
    Estimate,
    Observation,
    cold_bound,
    exploring,
    fit,
    remote_slowdown,
    to_profile,
    typical_of,
)
from disagg.profiles.table import ProfileTable

#: What the policies may know, by name (`--knowledge`).
KNOWLEDGE = ("shipped", "given", "oracle", "neutral", "learned")
#: Remote runs an image may make placed blind to link load while its load term is unsure (`load_blind`).
#: 0 (never): measured in docs/profiles.md ("Second pass: exploring across loads"), blind for 4 gained
#: 3 + 2 pairs on seeds 1–27 but lost 1 on seeds 28–45, did not widen the loads an image meets, and cost
#: about 3% more violations. Read when a `Knowledge` is made (`knowledge_for`), so that
#: scripts/measure-learning.py --blind can compare settings.
BLIND_EXPLORE = 0
#: The load term counts as unsure while its sd is over this share of itself.
BLIND_SD = 0.25


@dataclass
class Knowledge:
    """The table the policies see this round, and (when learning) what the finished jobs taught."""

    kind: str = "shipped"
    table: ProfileTable | None = None        # given or oracle; None: shipped
    truth: ProfileTable | None = None        # for the convergence record only
    observations: dict[str, list[Observation]] = field(default_factory=dict)
    estimates: dict[str, Estimate] = field(default_factory=dict)
    #: Per image: the profile it is placed by while `exploring` (its estimate), or blind to load.
    learned: dict[str, Profile] = field(default_factory=dict)
    convergence: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    #: Remote observations an image needs before the policies see its pessimistic profile: until then
    #: they see the estimate itself (optimism under uncertainty, the bandit's way to learn); 0: cautious
    #: from the first observation.
    explore: int = EXPLORE
    #: Remote observations an image may make while placed blind to link load (`load_blind`), as long
    #: as its load term is unsure (`slope_unsure`): so that its first remote runs meet whatever load
    #: the placement brings, not only the quietest path. 0: never.
    blind: int = 0
    blind_sd: float = BLIND_SD
    #: Per image: its pessimistic profile, which it is placed by once it is no longer `exploring`.
    bounds: dict[str, Profile] = field(default_factory=dict)
    #: The images placed blind to load now (`load_blind`), whatever runs are in flight.
    blinded: set[str] = field(default_factory=set)
    #: Per image: its jobs running with remote devices, as of the round being placed.
    in_flight: dict[str, int] = field(default_factory=dict)
    #: What an image without a finished run is placed by once its remote runs in flight reach `explore`
    #: (`learn.cold_bound`); None: to be worked out (the typical terms changed).
    cold: Profile | None = None

    def apply(self, jobs: Sequence[Job], in_flight: Mapping[str, int] | None = None) -> list[Job]:
        """The jobs as the policy sees them (`Job.profile` set), or as they are for the shipped table.
        `in_flight`: per image, its jobs running with remote devices now (`learn.exploring`)."""
        self.in_flight = dict(in_flight or {})
        if self.kind == "shipped":
            return list(jobs)
        if self.kind == "neutral":
            return with_profiles(jobs, {})
        if self.kind == "learned":
            return [self._learned(j) for j in jobs]
        return with_profiles(jobs, self.table)

    def _learned(self, job: Job) -> Job:
        key = _key(job.image)
        if key == NEUTRAL.name:  # a job that names no image: neutral, as in the controller (never learned)
            return replace(job, profile=lookup(job.image, self.table) if self.table is not None else NEUTRAL)
        profile = self.learned.get(key)
        est = self.estimates.get(key)
        if (est is not None and key in self.bounds and key not in self.blinded
                and not exploring(est.remote_observations, self.in_flight.get(key, 0), self.explore)):
            profile = self.bounds[key]
        if profile is None:
            profile = lookup(job.image, self.table) if self.table is not None else NEUTRAL
            if not profile.known and not exploring(0, self.in_flight.get(key, 0), self.explore):
                profile = self._cold_bound()
        return replace(job, profile=profile)

    def _cold_bound(self) -> Profile:
        """`learn.cold_bound` with the typical terms of the images learned so far (kept until the next
        observation changes them)."""
        if self.cold is None:
            self.cold = cold_bound("unseen", typical_of(self.estimates.values()))
        return self.cold

    def observe(self, image: str, obs: Observation) -> None:
        """A finished job of `image`: refit the image (learning) and record how far the estimate is."""
        key = _key(image)
        if self.kind != "learned" or key == NEUTRAL.name:  # `unknown`: jobs with nothing in common to learn
            return
        runs = self.observations.setdefault(key, [])
        runs.append(obs)
        self.cold = None
        prior = lookup(image, self.table) if self.table is not None else None
        others = (e for k, e in self.estimates.items() if k != key)
        est = fit(key, runs, prior if prior is not None and prior.known else None, typical_of(others))
        self.estimates[key] = est
        self.bounds[key] = est.profile(pessimistic=True)
        if est.remote_observations < self.blind and slope_unsure(est, self.blind_sd):
            self.learned[key] = load_blind(est, runs)
            self.blinded.add(key)
        else:
            self.blinded.discard(key)
            self.learned[key] = est.profile()  # while exploring; `_learned` hands out the bound after
        point = {"n": float(len(runs)), "remote": float(est.remote_observations), "slowdown": est.slowdown(),
                 "pessimistic": remote_slowdown(self.bounds[key]), "sd": est.slowdown_sd()}
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


def slope_unsure(est: Estimate, rel_sd: float = BLIND_SD) -> bool:
    """Whether the load term's doubt at the reference load (sd of C · REFERENCE_LOAD) is over `rel_sd`
    of the remote extra there (B + C · REFERENCE_LOAD): measured against what remote costs at that
    load, not against C alone, so that an image whose remote cost is all fixed (C near 0) is not
    taken for unsure when its slope cannot matter."""
    _, b, c = est.coef
    return est.sd[2] * REFERENCE_LOAD > rel_sd * max(b + c * REFERENCE_LOAD, 1e-9)


def load_blind(est: Estimate, runs: Sequence[Observation]) -> Profile:
    """The estimate with its load term folded into the fixed one at the mean load its remote runs met
    (none: idle): the remote cost it has seen, the same at every load. The network-aware policy prices
    each remote arc by φ at the path's load, so an image whose remote runs are costly goes remote only
    on the quietest path, and runs that all meet one narrow band of loads pin B + C·load there and
    nothing of the slope C, which the issue's φ(1, 0.5) needs (docs/profiles.md). Blind to load, the
    image's machine is chosen as if every uplink were alike, so its runs meet the loads that placement
    brings; its cost is what was seen, so the SLO still holds it back where that already misses."""
    a, b, c = est.coef
    loads = [o.load for o in runs if o.remote_share > 0]
    seen = sum(loads) / len(loads) if loads else 0.0
    return to_profile(est.image, a, b + c * seen, 0.0, est.prior,
                      f"learned from {est.observations} tasks ({est.remote_observations} with remote devices), "
                      f"placed blind to load while its load term is unsure", est.drawn_gbps)


def _key(image: str) -> str:
    return normalize_image(image)


def knowledge_for(kind: str, given: ProfileTable | None, truth: ProfileTable | None, explore: int = EXPLORE,
                  blind: int | None = None) -> Knowledge:
    """A fresh `Knowledge` of `kind` (one per run: learning is per run); `blind`: BLIND_EXPLORE unless given."""
    if kind not in KNOWLEDGE:
        raise ValueError(f"knowledge {kind!r} is not known; known: {', '.join(KNOWLEDGE)}")
    if kind == "oracle":
        if truth is None:
            raise ValueError("knowledge 'oracle' needs the true profiles (--truth FILE)")
        return Knowledge("oracle", truth, truth)
    if kind == "given" and given is None:
        raise ValueError("knowledge 'given' needs a table (--profiles FILE)")
    return Knowledge(kind, given, truth, explore=explore, blind=BLIND_EXPLORE if blind is None else blind)
