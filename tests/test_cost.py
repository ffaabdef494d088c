"""The cost model: Eq. 6 utility, Eqs. 7–8 costs, W rising, and φ from the profiles."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from disagg.placement.cost import outwaits, placing_cost, postponement, unscheduled_cost, utility
from disagg.placement.jobstate import expected_vec
from disagg.profiles import NEUTRAL, RODINIA, expected_s, lookup, normalize_image


@pytest.mark.parametrize(("phi", "tau", "z", "want"), [
    (0.0, 100.0, 1, 1.0),          # instant: full utility
    (50.0, 100.0, 5, 0.5),         # half the goal left
    (100.0, 100.0, 1, 0.0),        # exactly on the goal
    (150.0, 100.0, 1, -0.5),       # late, most important: full penalty
    (150.0, 100.0, 10, 0.0),       # late, least important: no penalty
    (200.0, 100.0, 4, -1.0 * 6 / 9),
], ids=["instant", "half", "on-goal", "late-z1", "late-z10", "late-z4"])
def test_utility_is_eq6(phi: float, tau: float, z: float, want: float) -> None:
    assert utility(phi, tau, z) == pytest.approx(want)


def test_placing_beats_waiting_and_waiting_cost_rises_with_w() -> None:
    place = placing_cost(120.0, 100.0, 1, 1.0)
    waits = unscheduled_cost(np.full(5, 100.0), np.ones(5), np.arange(5))
    assert np.all(np.diff(waits) > 0), "W must raise the unscheduled cost every round"
    assert waits[0] > place, "an SLO-meeting-ish placement must beat waiting at W=0"
    # More important jobs (lower z) wait at a higher price.
    assert unscheduled_cost(100.0, 1, 0) > unscheduled_cost(100.0, 9, 0)


def test_remote_and_load_raise_phi_by_the_profile() -> None:
    nw = RODINIA["nw"]
    local = expected_s(nw, 0.0, 0.0)
    remote = expected_s(nw, 1.0, 0.0)
    loaded = expected_s(nw, 1.0, 1.0)
    assert local == nw.base_s < remote < loaded


@pytest.mark.parametrize(("app", "idle", "loaded"), [("nw", 0.17, 0.49), ("hotspot", 0.002, 0.01)])
def test_sensitivity_reproduces_seed_experiment_1(app: str, idle: float, loaded: float) -> None:
    """Seed 001, Experiment 1: the network share of a remote-GPU run grows from `idle` to `loaded`
    under a saturating load. With the transfer part measured remote (remote_factor 1) our profile
    must give back exactly those shares."""
    p = replace(RODINIA[app], remote_factor=1.0)
    for load, share in ((0.0, idle), (1.0, loaded)):
        total = expected_s(p, 1.0, load)
        transfer = total - p.base_s * (1 - p.transfer_share)
        assert transfer / total == pytest.approx(share, abs=0.005)


def test_vector_phi_matches_scalar_phi() -> None:
    share = np.linspace(0, 1, 7)
    load = np.linspace(0, 1.5, 7)
    for p in [*list(RODINIA.values()), NEUTRAL]:
        vec = expected_vec(p, share, load, 300.0)
        scalar = [expected_s(p, s, lo, 300.0) for s, lo in zip(share, load, strict=True)]
        assert np.allclose(vec, scalar)


@pytest.mark.parametrize(("image", "name"), [
    ("rodinia/nw", "nw"), ("registry.io:5000/rodinia/nw:1.2", "nw"), ("rodinia-b+tree", "b+tree"),
    ("rodinia/btree", "b+tree"), ("lavaMD", "lavamd"), ("library/ubuntu:22.04", "unknown"),
])
def test_lookup_by_image(image: str, name: str) -> None:
    assert lookup(image).name == name
    assert normalize_image(image) == normalize_image(image.upper()) or name == "unknown"


def test_unknown_image_is_neutral() -> None:
    p = lookup("someone/else")
    assert not p.known
    # Neutral: φ = τ, so utility 0 and cost = preference, local or remote alike.
    assert expected_s(p, 1.0, 1.0, 250.0) == expected_s(p, 0.0, 0.0, 250.0) == 250.0


def test_the_scalar_outwait_check_gives_the_vector_functions_answer() -> None:
    """The NA decoder's plain-float re-check must decide as Eqs. 7-8 plus the postponement do, on
    ordinary inputs, on ties at the rounding boundary and on extreme ones."""
    rng = np.random.default_rng(7)
    tau = rng.uniform(1.0, 600.0, 4000)
    cases = [(float(t * f), float(t), float(z), int(w), p, e) for t, f, z, w, p, e in zip(
        tau, rng.uniform(0.0, 3.0, 4000), rng.integers(1, 11, 4000), rng.integers(0, 1200, 4000),
        rng.choice([1.0, 1.05, 1.1], 4000), rng.choice([0, 400_000], 4000), strict=True)]
    cases += [(100.0, 100.0, 1.0, 0, 1.1, 0), (1e308, 1e-3, 10.0, 5, 1.1, 0), (float("inf"), 10.0, 1.0, 3, 1.0, 0),
              (float("nan"), 10.0, 1.0, 3, 1.0, 0), (120.0, 0.0, 1.0, 3, 1.0, 0), (-5.0, 10.0, 1.0, 0, 1.0, 0)]
    # Placing and waiting tie to the unit (`extra` makes up the difference), so the +1 decides.
    for phi_s, t, z, w in [(150.0, 100.0, 1.0, 40), (130.0, 100.0, 4.0, 333), (101.0, 100.0, 9.0, 7)]:
        gap = int(unscheduled_cost(t, z, w) - placing_cost(phi_s, t, z, 1.1) - postponement(phi_s, t))
        cases += [(phi_s, t, z, w, 1.1, gap + d) for d in (-1, 0, 1)]
    decided = set()
    with np.errstate(all="ignore"):
        for phi_s, t, z, w, pref, extra in cases:
            want = bool(placing_cost(phi_s, t, z, pref) + postponement(phi_s, t) + extra < unscheduled_cost(t, z, w))
            assert outwaits(phi_s, t, z, w, pref, extra) == want, (phi_s, t, z, w, pref, extra)
            decided.add(want)
    assert decided == {True, False}, "the cases must include both answers"


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=20),
       st.sampled_from([(-1000.0, 1.0), (0.0, 1000.0), (-3.0, -3.0)]))
def test_within_is_clip_of_nan_to_num(values: list[float], bounds: tuple[float, float]) -> None:
    """`cost._within_nan_low` and `_within_nan_high` replace `np.clip(np.nan_to_num(x, nan=...), low,
    high)` with NaN taken to the low or the high bound (±inf clipped either way), the same values (a
    zero's sign aside: the costs round it away)."""
    from disagg.placement.cost import _within_nan_high, _within_nan_low

    low, high = bounds
    x = np.array(values, dtype=np.float64)
    for within, nan in ((_within_nan_low, low), (_within_nan_high, high)):
        expected = np.clip(np.nan_to_num(x, nan=nan), low, high)
        assert np.array_equal(within(x, low, high) + 0.0, expected + 0.0)


@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True),
                          st.floats(allow_nan=True, allow_infinity=True),
                          st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=20))
def test_utility_clamps_as_where_maximum_minimum_did(rows: list[tuple[float, float, float]]) -> None:
    """`utility`'s clamp (`fmin(fmax(x, -UT_FLOOR), 1)`) gives the very floats, zeros' signs included,
    that its earlier `where(x != x, -UT_FLOOR, minimum(maximum(x, -UT_FLOOR), 1))` gave: NaN at the
    floor, ±inf at the bounds (the decisions' hashes rest on it)."""
    from disagg.placement.cost import UT_FLOOR

    phi, tau, z = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
    with np.errstate(all="ignore"):
        base = (tau - phi) / tau
        ut = np.where(phi <= tau, base, base * (10.0 - z) / 9.0)
        before = np.where(ut != ut, -UT_FLOOR, np.minimum(np.maximum(ut, -UT_FLOOR), 1.0))
        got = utility(phi, tau, z)
    assert np.array_equal(got, before)
    assert np.array_equal(np.signbit(got), np.signbit(before))
