"""The cost model: the seed's utility (Eq. 6) and arc costs (Eqs. 7 and 8), integer-scaled.

Ut(φ) = (τ − φ)/τ                      if φ ≤ τ
Ut(φ) = ((τ − φ)/τ) · (10 − z)/9        if φ > τ         (z: importance, 1 = most important)
c     = (1 − Ut(φ)) · P                 placing arcs (Eq. 7)
c_U   = (1 − Ut(φ_U)) · P + W           the unscheduled arc (Eq. 8)

φ_U, the "expected time" of waiting, is taken as 2τ: waiting is worse than any placement that
finishes within twice the goal, and worse for important jobs (their utility falls faster). W grows
by `WAIT_STEP` each round the job waits, so no job starves. The network-aware policy adds
`postponement` (π = WAIT_STEP · SLO_PATIENCE · min((φ − τ)/τ, 1)) to a placing arc that misses the SLO
while waiting can help, which W outgrows. Costs are multiplied by `SCALE` and rounded, because the
solver works on integers.

No input makes a cost non-finite or out of the solver's range: τ is kept within [TAU_MIN_S, TAU_MAX_S]
and z within [1, 10] (`clamp_goal`, `clamp_importance`; NaN counts as the least favourable value),
and a utility below −UT_FLOOR counts as −UT_FLOOR (φ a thousand times τ is as bad as it gets). The
API refuses such inputs already; this keeps one job that slipped past it (a row written by hand, an
old store) from failing every scheduling round.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from disagg.model import Job
from disagg.profiles import Profile, expected_s, lookup

SCALE = 1_000_000
#: At most this much (in SCALE units, a thousandth of a utility unit) is added to the unscheduled arc
#: of the oldest job, so that of two equally good jobs the one that has waited longer is placed.
AGE_TIEBREAK = 1000
#: What one round of waiting adds to the unscheduled arc (in utility units, before SCALE).
WAIT_STEP = 0.1
#: How many rounds (W) a network-aware policy holds a job back for a placement that misses its SLO by
#: as much as waiting itself is priced at (φ = 2τ, Eq. 8's φ_U) while waiting can help; a smaller miss
#: is held proportionally fewer rounds (`postponement`). Not a hard limit: the hold is a cost on the
#: placing arc that the unscheduled arc's W term outgrows, so no job is held for ever (the bound:
#: `cost_models.hold_bound`). At the simulator's 5 s rounds, 500 rounds are 42 minutes (10-40 Rodinia
#: run times). Not from the seed, which postpones without a bound; docs/design-decisions.md ("No job
#: waits forever") and docs/reproduction.md (what it does to the paper's scenarios).
SLO_PATIENCE = 500
#: Preferences P: the device on the task's own machine, in its rack, across racks.
P_LOCAL = 1.0
P_RACK = 1.05
P_CROSS = 1.1
#: A small preference against spending a machine's cpus on a task that does not want the devices
#: sitting idle there (keeps CPU-only work away from GPU machines while others fit).
P_SPARE_DEVICES = 0.05
#: Tie-break that spreads tasks over machines by how busy their cpus are (Firmament's load spreading).
SPREAD = 0.02
#: The range τ is kept in, seconds, and the lowest utility a placement can have (see the module docstring).
TAU_MIN_S = 1e-3
TAU_MAX_S = 1e9
UT_FLOOR = 1000.0


def clamp_goal(tau: float) -> float:
    """τ within [TAU_MIN_S, TAU_MAX_S] (NaN: the loosest goal)."""
    return TAU_MAX_S if tau != tau else min(max(tau, TAU_MIN_S), TAU_MAX_S)


def clamp_importance(z: float) -> float:
    """z within [1, 10] (NaN: 10, the least important)."""
    return 10.0 if z != z else min(max(z, 1.0), 10.0)


def utility(phi: ArrayLike, tau: ArrayLike, z: ArrayLike) -> NDArray[np.float64]:
    """Eq. 6, vectorised."""
    phi_a = np.asarray(phi, dtype=np.float64)
    tau_a = np.asarray(tau, dtype=np.float64)
    z_a = np.asarray(z, dtype=np.float64)
    base = (tau_a - phi_a) / tau_a
    ut = np.where(phi_a <= tau_a, base, base * (10.0 - z_a) / 9.0)
    return _within_nan_low(ut, -UT_FLOOR, 1.0)


def _within_nan_low(x: NDArray[np.float64], low: float, high: float) -> NDArray[np.float64]:
    """`np.clip(np.nan_to_num(x, nan=low), low, high)` for `low` ≤ `high` finite (±inf are clipped
    either way), in two ufunc calls: `fmax` passes over a NaN to `low`, then `fmin` caps. `nan_to_num`
    and `clip` are Python functions over several numpy calls each, and the rounds price a few elements
    at a time, thousands of times a simulated run. (One difference: a −0.0 clipped up to `low` = 0.0
    comes out −0.0 or +0.0; the costs round it to 0 either way.)"""
    out: NDArray[np.float64] = np.fmin(np.fmax(x, low), high)
    return out


def _within_nan_high(x: NDArray[np.float64], low: float, high: float) -> NDArray[np.float64]:
    """`np.clip(np.nan_to_num(x, nan=high), low, high)` likewise: `fmin` takes a NaN to `high`, then
    `fmax` raises to `low`."""
    out: NDArray[np.float64] = np.fmax(np.fmin(x, high), low)
    return out


def placing_cost(phi: ArrayLike, tau: ArrayLike, z: ArrayLike, preference: ArrayLike) -> NDArray[np.int64]:
    """Eq. 7, scaled to integers. Never negative (Ut ≤ 1)."""
    c = (1.0 - utility(phi, tau, z)) * np.asarray(preference, dtype=np.float64)
    out: NDArray[np.int64] = np.rint(np.maximum(c, 0.0) * SCALE).astype(np.int64)
    return out


def unscheduled_cost(tau: ArrayLike, z: ArrayLike, wait_rounds: ArrayLike) -> NDArray[np.int64]:
    """Eq. 8 with φ_U = 2τ. The +1 breaks the tie with a placement of the same cost in favour of placing."""
    tau_a = np.asarray(tau, dtype=np.float64)
    c = (1.0 - utility(2.0 * tau_a, tau_a, z)) * P_LOCAL + WAIT_STEP * np.asarray(wait_rounds, np.float64)
    return np.rint(c * SCALE).astype(np.int64) + 1


def relative_miss(phi: ArrayLike, tau: ArrayLike) -> NDArray[np.float64]:
    """m = (φ − τ)/τ where φ > τ, else 0: by how much of its goal a placement misses the SLO."""
    phi_a = np.asarray(phi, dtype=np.float64)
    tau_a = np.asarray(tau, dtype=np.float64)
    return _within_nan_high((phi_a - tau_a) / tau_a, 0.0, UT_FLOOR)


def postponement(phi: ArrayLike, tau: ArrayLike) -> NDArray[np.int64]:
    """The network-aware policy's postponement: what a placement that misses the SLO costs on top of
    Eq. 7 while waiting could help, `WAIT_STEP · SLO_PATIENCE · min(m, 1)` scaled (m: `relative_miss`).
    The unscheduled arc grows by WAIT_STEP a round, so a job held for a miss m is outwaited after about
    `SLO_PATIENCE · min(m, 1)` rounds of W: the larger the expected miss, the longer the flow prefers
    waiting; the longer the job has waited, the smaller a miss it then accepts. Capped at a miss of 1
    (φ = 2τ, what Eq. 8 prices waiting at): a placement worse than that is one Eq. 7 itself prices
    above waiting, so the cap keeps every hold finite without changing which placements are held."""
    m = np.minimum(relative_miss(phi, tau), 1.0)
    out: NDArray[np.int64] = np.rint(WAIT_STEP * SLO_PATIENCE * m * SCALE).astype(np.int64)
    return out


def outwaits(phi: float, tau: float, z: float, wait_rounds: int, preference: float, extra: int) -> bool:
    """Whether one placement expected to take `phi`, at `preference`, with its `postponement` and `extra`
    on top, costs less than the job's unscheduled arc at W = `wait_rounds`: `placing_cost(...) +
    postponement(...) + extra < unscheduled_cost(...)`, in plain floats. The NA decoder asks this for
    every path it tries (tens of thousands a round at 12,500 machines), where numpy's per-call overhead
    made most of the round (docs/benchmarks.md). The same operations in the same order as the vector
    functions, so the same integers; inputs outside the ordinary range (τ ≤ 0, a non-finite value)
    go to the vector functions themselves."""
    if not (tau > 0 and math.isfinite(phi) and math.isfinite(tau) and math.isfinite(z)):
        arc = placing_cost(phi, tau, z, preference) + postponement(phi, tau) + extra
        return bool(np.all(arc < unscheduled_cost(tau, z, wait_rounds)))
    m = min(max((phi - tau) / tau, 0.0), UT_FLOOR, 1.0)
    place = (round(max((1.0 - _utility1(phi, tau, z)) * preference, 0.0) * SCALE)
             + round(WAIT_STEP * SLO_PATIENCE * m * SCALE) + extra)
    wait = round(((1.0 - _utility1(2.0 * tau, tau, z)) * P_LOCAL + WAIT_STEP * float(wait_rounds)) * SCALE) + 1
    return place < wait


def _utility1(phi: float, tau: float, z: float) -> float:
    """Eq. 6 for one finite placement with τ > 0, as `utility` computes it (its clip to [−UT_FLOOR, 1])."""
    base = (tau - phi) / tau
    ut = base if phi <= tau else base * (10.0 - z) / 9.0
    return -UT_FLOOR if ut != ut else min(max(ut, -UT_FLOOR), 1.0)


def age_bonus(order: ArrayLike, n: int) -> NDArray[np.int64]:
    """Tie-break for the unscheduled arc: the earlier in the queue (longer wait), the larger."""
    o = np.asarray(order, dtype=np.float64)
    return np.rint(AGE_TIEBREAK * (n - o) / max(n, 1)).astype(np.int64)


def goal_s(job: Job, profile: Profile) -> float:
    """τ: the job's SLO, or 1.5× its profile's local time, or 1 s for an unknown image (neutral).

    An SLO below the job's own best time (a known profile's local time, alone on an idle cluster) is
    read as that time. Taken as given, no placement meets it and every one misses by the same
    hopeless margin, so Eq. 8 prefers waiting until W outgrows the miss — some 10,000 rounds for an
    SLO of a millisecond — while waiting cannot help the job at all; and a job left waiting that
    long becomes the starving head whose reservation holds what it asked for against every other
    tenant (docs/design-decisions.md, "No job waits forever")."""
    if job.slo_s is not None:
        tau = clamp_goal(job.slo_s)
        best = expected_s(profile, 0.0, 0.0) if profile.known else tau
        return clamp_goal(best) if tau < best else tau
    if profile.known:
        return 1.5 * profile.base_s
    return 1.0


def profile_of(job: Job) -> Profile:
    """What the round knows of the job's image: the caller's (`Job.profile`), else the shipped table's."""
    return job.profile if job.profile is not None else lookup(job.image)


def phi(job: Job, profile: Profile, remote_share: float, load: float) -> float:
    return expected_s(profile, remote_share, load, goal_s(job, profile))


def remote_gbps(job: Job, profile: Profile) -> float:
    """Bandwidth one remote device of this job draws on its path."""
    return job.network_gbps if job.network_gbps is not None else profile.network_gbps
