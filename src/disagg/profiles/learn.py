"""Learning an image's profile from its finished tasks: Bayesian least squares on φ's three terms.

φ (`model.expected_s`) is linear in three unknowns per image:

    run_s = A + B·r + C·r·load        A = base_s,  B = base_s·s·(f − 1),  C = base_s·s·f·σ

with r the share of the task's devices that were remote, load the load on its remote path while it
ran, s the transfer share, f the remote factor and σ the load sensitivity. Every finished task is one
observation (r, load, run_s); a least-squares fit of (A, B, C) with its covariance is all the
learning needs. It starts from a prior — the operator's table entry for the image, else the typical
remote terms of the images already learned, else a wide, neutral one — so that the first estimates
are the prior's and each observation moves them by what it says (Gaussian prior, Gaussian noise:
the posterior is closed form, no iteration, no clock).

Caution: while the remote terms are uncertain (every run so far was local, say), the network-aware
policy is handed the *pessimistic* profile: a remote time at or over the fit's one-sided `PESSIMISM`
upper bound at every load (`Estimate._pessimistic`), so that uncertainty never reads as "remote is free"
(nor as "remote is cheap on a quiet path"). s and f cannot be
told apart by run times alone (only s·(f − 1) and s·f·σ can): a learned profile keeps its prior's
transfer share and solves f and σ from B and C, which gives the same φ for every r and load.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from disagg.profiles.model import NEUTRAL, Profile, expected_s
from disagg.profiles.table import BOUNDS

#: Standard deviations above the estimate for the pessimistic remote terms (one-sided 95%).
PESSIMISM = 1.645
#: The link load at which the pessimistic estimate is taken, and the issue's yardstick φ(1, 0.5)/φ(0).
REFERENCE_LOAD = 0.5
#: The loads (0 to this) at which the pessimistic profile's remote time is kept at or over the fit's
#: upper bound (`Estimate._pessimistic`): every load there is. Measured in docs/profiles.md ("Third
#: pass"), 45 traces: 1,858 QoS violations against 2,212 with the bound at the reference load alone and
#: 1,896 with a span of 0.5 (the oracle: 1,777).
PESSIMISM_SPAN = 1.0
#: Prior spread of B and C relative to A when nothing is known about the image's remote behaviour: wide
#: enough for a transfer-bound image (C = 4.8·A for examples/learning's acme/etl) and for a few remote
#: runs to decide, so that its pessimistic bound covers the truth; measured against 0.25/0.5 (too
#: confident: etl's bound stayed 18% under the truth) and 1.0/3.0 (more violations, slower to settle)
#: in docs/profiles.md. An image with only local runs is then placed as if remote were about 1.9x slower
#: at load 0.5 (1.645 · √(0.5² + (0.5 · 2)²) ≈ 1.84 A extra).
WIDE_B, WIDE_C = 0.5, 2.0
#: The same spreads when the prior is an operator's table entry (trusted more, still movable).
TABLE_B, TABLE_C = 0.1, 0.2
#: Run-time noise floor, relative to A: a perfect fit still leaves this much doubt.
NOISE_FLOOR = 0.02
#: Observations needed before the residuals are trusted as the noise level.
MIN_FOR_NOISE = 5
#: How much smaller the residual of runs scaled by their jobs' SLOs must be than the unscaled runs' for
#: the fit to take them (`sized_runs`): SLOs that track sizes cut it several-fold (±10% sizes: about a
#: quarter), while SLOs drawn apart from the sizes beat the plain runs by chance in 3 of 800 draws of
#: the tests' generator at "any smaller", none at half.
SIZE_EVIDENCE = 0.5
#: A transfer share for a learned image whose prior says nothing (neutral).
DEFAULT_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished task: how long it ran, the share of its devices that were remote, the load
    (0..1) on its remote path while it ran, its job's SLO (None: none was given), the one
    statement of the job's own size the scheduler is told (`sized_runs`), and the bandwidth each of
    its remote devices drew on its path, as the fabric measured it (None: not measured; `drawn_gbps`)."""

    run_s: float
    remote_share: float
    load: float
    slo_s: float | None = None
    gbps: float | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """What the observations of one image say: (A, B, C), their covariance, and how sure it is."""

    image: str
    coef: tuple[float, float, float]
    cov: tuple[tuple[float, float, float], ...]
    observations: int
    remote_observations: int
    rmse_s: float
    prior: Profile
    prior_kind: str  # "table", "typical" or "neutral"
    #: What one remote device of the image draws, as its remote runs measured it (`drawn_gbps`); None:
    #: none measured, the prior's stands.
    drawn_gbps: float | None = None

    @property
    def sd(self) -> tuple[float, float, float]:
        return (math.sqrt(max(self.cov[0][0], 0.0)), math.sqrt(max(self.cov[1][1], 0.0)),
                math.sqrt(max(self.cov[2][2], 0.0)))

    def profile(self, pessimistic: bool = False) -> Profile:
        """The estimate as a `Profile` (the policies' form). `pessimistic`: a profile whose remote time is
        at least the fit's PESSIMISM upper bound at every load up to PESSIMISM_SPAN (`_pessimistic`)."""
        a, b, c = self.coef
        if pessimistic:
            a, b, c = self._pessimistic()
        source = (f"learned from {self.observations} tasks ({self.remote_observations} with remote devices), "
                  f"prior: {self.prior_kind}" + (", pessimistic" if pessimistic else ""))
        return to_profile(self.image, a, b, c, self.prior, source, self.drawn_gbps)

    def _pessimistic(self) -> tuple[float, float, float]:
        """(A, B, C) to place by while unsure. A: the coefficients within the PESSIMISM confidence
        ellipsoid that make the remote extra at the reference point (r = 1, load = REFERENCE_LOAD)
        largest — (A, B, C) + z·Σg/√(gᵀΣg) with g = (0, 1, load); along what the runs measured the
        ellipsoid is thin, so a term the data pins down barely moves (when every run was remote, A + B
        is known and local looks faster; when every run was local, A stays). The remote time then runs
        along the chord of its upper bound u(load) = A + B + C·load + z·√(hᵀΣh), h = (1, 1, load), from
        load 0 to PESSIMISM_SPAN: u is convex, so the chord is above it over that span, and remote is
        never priced under its bound at any load the span covers (with the span 1: at any load). Why
        not the ellipsoid's point alone: it is a line tangent to the bound at the reference load and
        under it elsewhere, and remote runs that met one narrow band of loads leave B and C
        anti-correlated, so making B + C·0.5 largest raised C and *lowered* B: the 'pessimistic'
        profile priced a quiet path under the estimate itself (examples/learning's trainer, 1.0x at
        load 0 against a true 1.24x: the network-aware policy sent it remote on quiet paths, where it
        missed its SLO; docs/profiles.md, "Third pass")."""
        cov = np.array(self.cov)
        g = np.array([0.0, 1.0, REFERENCE_LOAD])
        spread = float(g @ cov @ g)
        if spread <= 0.0:
            return self.coef
        step = PESSIMISM * (cov @ g) / math.sqrt(spread)
        a = float(self.coef[0] + step[0])
        at_zero, at_span = (remote_bound(self.coef, self.cov, x) for x in (0.0, PESSIMISM_SPAN))
        return a, at_zero - a, (at_span - at_zero) / PESSIMISM_SPAN

    def slowdown(self, remote_share: float = 1.0, load: float = REFERENCE_LOAD, pessimistic: bool = False) -> float:
        """φ(r, load) / φ(0): how much slower the image runs with remote devices under that load."""
        return remote_slowdown(self.profile(pessimistic), remote_share, load)

    def slowdown_sd(self, load: float = REFERENCE_LOAD) -> float:
        """The posterior standard deviation of φ(1, load)/φ(0) (delta method on the fit's covariance):
        how far the estimate itself says it may be off. Remote runs that all met one narrow band of
        loads pin B + C·load there but not the split, so the extrapolation to another load stays as
        unsure as the prior makes it, and this says so where the run count cannot (docs/profiles.md)."""
        return ratio_sd(self.coef, self.cov, load)


#: Remote runs, finished or running, an image is placed by its estimate for before its pessimistic bound
#: (`exploring`; `serve`'s `profiles_explore`, `simulate --explore`). Measured over 45 traces, with runs
#: reporting their devices' mean load, jobs drawing their true bandwidth and its draw learned
#: (docs/profiles.md, "Sixth pass"): QoS violations against the oracle's 1,777 and (trace, image) pairs
#: within 10% after 20 jobs of 180: 2: 1,769 (+0%), 177 (etl off 12-74% on three traces); **3: 1,992
#: (+12%), 180 (worst 5.0%)**; 4: 2,058 (+16%), 180; 5: 2,332, 179; 6: 2,611 (+47%), 180. Each remote run
#: of a costly image while exploring is a likely miss (etl is 1.6-4.4x slower remote), so exploring
#: costs violations in proportion; with the runs' loads reported right, three remote runs teach enough.
EXPLORE = 3


def exploring(remote_observations: int, remote_in_flight: int, explore: int) -> bool:
    """Whether an image is still placed by its estimate rather than its pessimistic bound: while its
    finished *and running* remote runs are fewer than `explore`. Running ones count because a remote
    run that has not finished yet will teach what one that has would: counting only finished runs, a
    long image (examples/learning's trainer, 300–450 s a run) had ten jobs sent remote on the neutral
    prior's "remote is free" before its first remote run ended, and all ten missed their SLOs
    (docs/profiles.md, "Fourth pass")."""
    return remote_observations + remote_in_flight < explore


def cold_bound(image: str, typical_profile: Profile | None) -> Profile:
    """What an image with no finished run and no table entry is placed by once its remote runs in flight
    reach `explore`: its prior's pessimistic profile (`fit` of no runs: the typical learned images'
    terms, else the wide neutral ones) with its base unknown, so that each job's own SLO stands for it
    as for the neutral profile (`expected_s`): local at the goal, remote by the bound's slowdown over
    it. The base's own doubt is left out (the SLO stands for it, not the prior's guess of 1): the bound
    is then what the same prior gives an image whose runs were all local, 3.1x at load 0.5 when
    neutral. Until its first run ends an image has no estimate to be cautious with, and the neutral
    profile said "remote is free" to every job of it: a long image (400 s) sent its first dozen jobs
    remote, nearly all of which missed their SLOs (docs/profiles.md, "Sixth pass")."""
    est = fit(image, [], None, typical_profile)
    known_base = tuple((0.0, 0.0, 0.0) if i == 0 else (0.0, row[1], row[2]) for i, row in enumerate(est.cov))
    bound = replace(est, cov=known_base).profile(pessimistic=True)
    return replace(bound, base_s=0.0, known=False,
                   source=f"no finished task yet: the {est.prior_kind} prior's 95% bound, relative to each job's SLO")


def remote_bound(coef: Sequence[float], cov: Sequence[Sequence[float]], load: float, z: float = PESSIMISM) -> float:
    """The one-sided upper bound (z standard deviations) of the remote run time A + B + C·load for
    (A, B, C) ~ (coef, cov)."""
    h = np.array([1.0, 1.0, load])
    mean = coef[0] + coef[1] + coef[2] * load
    return float(mean + z * math.sqrt(max(float(h @ np.array(cov, dtype=np.float64) @ h), 0.0)))


def remote_slowdown(profile: Profile, remote_share: float = 1.0, load: float = REFERENCE_LOAD) -> float:
    """φ(r, load) / φ(0, 0) of a profile (1 for the neutral one)."""
    local = expected_s(profile, 0.0, 0.0, 1.0)
    return expected_s(profile, remote_share, load, 1.0) / local if local > 0 else 1.0


def ratio_sd(coef: Sequence[float], cov: Sequence[Sequence[float]], load: float = REFERENCE_LOAD) -> float:
    """Standard deviation of 1 + (B + C·load)/A for (A, B, C) ~ (coef, cov), to first order: the
    gradient (−(B + C·load)/A², 1/A, load/A) through the covariance. 0 for a non-positive A (no base
    time: no ratio to be unsure of)."""
    a, b, c = coef
    if a <= 0.0:
        return 0.0
    grad = np.array([-(b + c * load) / a ** 2, 1.0 / a, load / a])
    return math.sqrt(max(float(grad @ np.array(cov, dtype=np.float64) @ grad), 0.0))


def coefficients(profile: Profile, base_s: float | None = None) -> tuple[float, float, float]:
    """(A, B, C) of a profile: the linear form of φ. `base_s` stands in for an unknown profile's base."""
    a = profile.base_s if profile.known else (base_s or 1.0)
    s, f, sigma = profile.transfer_share, profile.remote_factor, profile.load_sensitivity
    return a, a * s * (f - 1.0), a * s * f * sigma


def to_profile(image: str, a: float, b: float, c: float, prior: Profile, source: str,
               gbps: float | None = None) -> Profile:
    """A profile with φ = A + B·r + C·r·load: the prior's transfer share kept (raised where f would
    pass its bound), f and σ solved, every field clamped to the table's bounds; the bandwidth `gbps`
    where it was measured, else the prior's."""
    lo_base, hi_base = BOUNDS["base_s"]
    a = min(max(a, lo_base), hi_base)
    b, c = max(b, 0.0), max(c, 0.0)
    s = prior.transfer_share if prior.known and prior.transfer_share > 0 else DEFAULT_SHARE
    f_max = BOUNDS["remote_factor"][1]
    s = min(max(s, b / (a * (f_max - 1.0))), 1.0)
    f = min(1.0 + b / (a * s), f_max)
    sigma = min(c / (a * s * f), BOUNDS["load_sensitivity"][1])
    if gbps is None:
        gbps = prior.network_gbps if prior.known else NEUTRAL.network_gbps
    lo_gbps, hi_gbps = BOUNDS["network_gbps"]
    return Profile(image, a, s, f, sigma, min(max(gbps, lo_gbps), hi_gbps), source)


def typical(fits: Iterable[tuple[Sequence[float], int, float | None]], min_remote: int = 5) -> Profile | None:
    """The observed images' typical remote terms (medians of B/A and C/A over the fits — (A, B, C), their
    count of remote observations and their measured bandwidth, `Estimate.drawn_gbps` — with at least
    `min_remote` remote observations), and their median bandwidth, as a profile a new image's prior can
    borrow; None if there are none."""
    kept = [(coef, gbps) for coef, remote, gbps in fits if remote >= min_remote and coef[0] > 0]
    if not kept:
        return None
    rb, rc = (float(np.median([coef[i] / coef[0] for coef, _ in kept])) for i in (1, 2))
    drawn = [g for _, g in kept if g is not None]
    return to_profile("typical", 1.0, rb, rc, NEUTRAL, f"typical of {len(kept)} learned images",
                      float(np.median(drawn)) if drawn else None)


def typical_of(estimates: Iterable[Estimate]) -> Profile | None:
    """`typical` of fitted images."""
    return typical((e.coef, e.remote_observations, e.drawn_gbps) for e in estimates)


def fit(image: str, observations: Sequence[Observation], prior: Profile | None = None,
        typical_profile: Profile | None = None) -> Estimate:
    """The posterior of (A, B, C) for one image, from its observations and a prior.

    Prior: `prior` (the operator's table entry) if given and known, else `typical_profile` with the
    base taken from the runs, else a neutral one (B = C = 0) with wide spreads."""
    obs = [o for o in observations if o.run_s > 0 and math.isfinite(o.run_s)]
    x = np.array([[1.0, o.remote_share, o.remote_share * min(max(o.load, 0.0), 1.0)] for o in obs]).reshape(-1, 3)
    y = sized_runs(obs, x)
    kind, used = _prior_kind(prior, typical_profile)
    m0 = _prior_mean(kind, used, x, y)
    scale = max(m0[0], 1e-3)
    spread_b, spread_c = (TABLE_B, TABLE_C) if kind == "table" else (WIDE_B, WIDE_C)
    sd0 = np.array([scale, spread_b * scale, spread_c * scale])
    precision0 = np.diag(1.0 / sd0 ** 2)
    if not obs:
        cov = np.linalg.inv(precision0)
        return _estimate(image, m0, cov, 0, 0, 0.0, used, kind, None)
    noise = _noise(x, y, scale)
    precision = precision0 + x.T @ x / noise ** 2
    cov = np.linalg.inv(precision)
    mean = physical_mode(cov @ (precision0 @ m0 + x.T @ y / noise ** 2), precision)
    rmse = float(np.sqrt(np.mean((x @ mean - y) ** 2)))
    remote = int(np.count_nonzero(x[:, 1] > 0))
    return _estimate(image, mean, cov, len(obs), remote, rmse, used, kind, drawn_gbps(obs))


def drawn_gbps(obs: Sequence[Observation]) -> float | None:
    """What one remote device of the image draws: the median of its remote runs' measured draws (None:
    none measured). The network-aware policy reserves it on the device's path and prices the path's
    load with it; a learned profile that kept its prior's (the neutral 1 Gbit/s) let an image that
    draws 6 crowd its links past what the policy reckoned (docs/profiles.md, "Sixth pass")."""
    draws = [o.gbps for o in obs if o.remote_share > 0 and o.gbps is not None and math.isfinite(o.gbps) and o.gbps > 0]
    return float(np.median(draws)) if draws else None


def sized_runs(obs: Sequence[Observation], x: np.ndarray) -> np.ndarray:
    """The run times, brought to the image's median job size when its jobs' SLOs say how big each is.

    Jobs of one image differ in size, and φ's terms cannot see it: the spread reads as noise, and worse,
    the network-aware policy sends a job remote when its SLO leaves room for the remote cost, so the
    longer jobs (larger SLOs) run remote more often and their extra length is read as remote cost (a
    trace whose jobs are ±30% around their image's base, SLO 1.3x each job's own: estimates 14–23% off
    after 150 jobs, docs/profiles.md). Where the SLOs track the run times, each run is scaled by the
    median SLO over its own, which takes the sizes out. Whether they do is the data's to say: the scaled
    runs are used only when the plain least-squares fit leaves them a residual under SIZE_EVIDENCE of
    the unscaled runs' (SLOs unrelated to size add their own spread, and lose)."""
    y = np.array([o.run_s for o in obs], dtype=np.float64)
    slo = np.array([o.slo_s if o.slo_s is not None else np.nan for o in obs], dtype=np.float64)
    if y.size < MIN_FOR_NOISE or not np.all(np.isfinite(slo) & (slo > 0)) or np.ptp(slo) <= 1e-9 * slo.max():
        return y
    scaled: np.ndarray = y * (float(np.median(slo)) / slo)
    return scaled if _residual(x, scaled) < SIZE_EVIDENCE * _residual(x, y) else y


def _residual(x: np.ndarray, y: np.ndarray) -> float:
    """The ordinary least-squares residuals' spread (per degree of freedom)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = max(y.size - np.linalg.matrix_rank(x), 1)
    return float(np.sqrt(np.sum((x @ coef - y) ** 2) / dof))


def physical_mode(mean: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """The posterior's most likely (A, B, C) with B, C ≥ 0: a remote device never makes a run faster
    (f ≥ 1, σ ≥ 0). Unconstrained, a prior whose load term is far too large for this image (a typical
    one borrowed from transfer-bound images) is met by runs at a narrow band of loads with a large C
    and a negative B, which extrapolates to a slowdown at load 0.5 that no run showed (acme/infer
    estimated 22% slow instead of 5% after 20 jobs); the constrained mode keeps the fit to what the
    runs say. A quadratic with two bounds: try each set of active bounds, keep the best feasible one."""
    if mean[1] >= 0.0 and mean[2] >= 0.0:
        return mean
    best: tuple[float, np.ndarray] | None = None
    for fixed in ([1], [2], [1, 2]):
        free = [i for i in range(3) if i not in fixed]
        theta = mean.copy()
        theta[fixed] = 0.0
        # minimise (θ − μ)ᵀ P (θ − μ) over the free terms with the fixed ones at 0
        theta[free] = mean[free] + np.linalg.solve(precision[np.ix_(free, free)],
                                                   precision[np.ix_(free, fixed)] @ mean[fixed])
        if theta[1] < -1e-12 or theta[2] < -1e-12:
            continue
        gap = theta - mean
        value = float(gap @ precision @ gap)
        if best is None or value < best[0]:
            best = (value, theta)
    assert best is not None  # both at 0 then A free is always feasible
    mode: np.ndarray = np.maximum(best[1], [-np.inf, 0.0, 0.0])
    return mode


def _prior_kind(prior: Profile | None, typical_profile: Profile | None) -> tuple[str, Profile]:
    if prior is not None and prior.known:
        return "table", prior
    if typical_profile is not None:
        return "typical", typical_profile
    return "neutral", NEUTRAL


def _prior_mean(kind: str, used: Profile, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(A, B, C)'s prior mean. A typical profile's terms are relative (its A is 1): scaled by this image's
    base as its runs show it (`_base_guess`). So are a table entry's once the image has runs: what an entry
    says of remote devices is its shape (s, f, σ: dimensionless, B/A and C/A), while its `base_s` is one
    job's size, which the image's jobs need not share; the base is the local runs' mean, else the remote
    runs' mean over what the entry's shape says their slowdown was. Taken in seconds, an entry whose base is
    far from the runs' kept its remote terms and their spreads (and the noise floor, all relative to the
    prior's A) in the entry's seconds: the chaos soak's `rodinia/nw` (table base 200 s, runs of 0.2-1 s)
    was learned after 104 runs as 9.5x slower remote at load 0.5 (C = 20 s on a 0.6 s job), so that any
    remote path with a little load missed its goal (docs/profiles.md, "Fourth pass"). With no run the
    entry stands as it is."""
    if kind == "typical":
        return np.array(coefficients(used)) * _base_guess(x, y)
    if kind == "table" and y.size:
        shape = np.array(coefficients(used)) / used.base_s
        local = y[x[:, 1] == 0]
        base = float(local.mean()) if local.size else float(np.mean(y / (x @ shape)))
        return shape * base
    return np.array(coefficients(used, _base_guess(x, y)))


def _base_guess(x: np.ndarray, y: np.ndarray) -> float:
    """A's prior mean when no table gives it: the local runs' mean, else every run's minimum."""
    if y.size == 0:
        return 1.0
    local = y[x[:, 1] == 0]
    return float(local.mean()) if local.size else float(y.min())


def _noise(x: np.ndarray, y: np.ndarray, scale: float) -> float:
    """The run-time noise: the ordinary least-squares residuals' spread once there are enough runs,
    never below NOISE_FLOOR of A; before that, five times the floor."""
    floor = NOISE_FLOOR * scale
    if y.size < MIN_FOR_NOISE:
        return 5.0 * floor
    return max(_residual(x, y), floor)


def _estimate(image: str, mean: np.ndarray, cov: np.ndarray, n: int, remote: int, rmse: float,
              prior: Profile, kind: str, gbps: float | None) -> Estimate:
    c = tuple((float(row[0]), float(row[1]), float(row[2])) for row in cov)
    return Estimate(image, (float(mean[0]), float(mean[1]), float(mean[2])), c, n, remote, rmse, prior, kind, gbps)
