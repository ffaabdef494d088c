"""NA's device decoder: the one-pass walk over a task's paths within reach (`trial_loads`, `SloCheck`'s
`first_kept`, `retrace_paths`) against the path-by-path walk it stands for (`take_at` on each in turn:
headroom, the SLO re-check, the rounding a rejected try leaves on the links), a held task's walk past
every path without pricing them (`SloCheck.from_machine`) against pricing each, and the monotonicity in
φ that lets `SloCheck` bracket `outwaited`."""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from disagg.model import Job
from disagg.placement.commit import EPS
from disagg.placement.cost import goal_s, outwaits, phi, profile_of, remote_gbps
from disagg.placement.cost_models import REFUSE_ALL, DRMaestroNACostModel, RemoteCheck, SloCheck
from disagg.placement.jobstate import RoundJob, SloGuard
from disagg.placement.phase_device import SCAN_LIMIT, take_at, take_remote, take_within_reach
from disagg.placement.state import FreeState
from tests.builders import make_cluster, make_job

#: Link sums that do not come back from + g − g (0.1, 0.7), some that do, a few at or past capacity.
_USED = st.sampled_from([0.0, 0.1, 0.3, 0.7, 1.7, 2.5, 3.3, 5.1, 0.0, 0.1, 0.3, 0.7, 1.7, 2.5, 3.3, 5.1, 7.9, 8.3,
                         9.9, 10.0, 40.0, 99.9])


def _job_state(job: Job) -> RoundJob:
    profile = profile_of(job)
    t = job.tasks
    wants = {k: t.wants(k) for k in t.kinds}
    shape = (t.cpus, t.memory_gb, tuple(sorted(wants.items())), ())
    return RoundJob(job, 0, profile, goal_s(job, profile), job.importance, remote_gbps(job, profile),
                    phi(job, profile, 0.0, 0.0), shape, wants, t.count, t.cpus, t.memory_gb, job.wait_rounds)


@st.composite
def _rounds(draw: st.DrawFn) -> tuple[FreeState, FreeState, RoundJob, RoundJob, int]:
    """Two equal states (machines and pools over a few racks, links loaded at awkward sums) and two equal
    job states of one held job, with traffic of its own already on some links."""
    cluster = make_cluster(machines=draw(st.integers(2, 9)), gpus=draw(st.integers(0, 2)),
                           pools=draw(st.integers(1, 3)), racks=draw(st.integers(1, 3)),
                           rack_uplink_gbps=draw(st.sampled_from([10.0, 100.0])))
    states = FreeState(cluster), FreeState(cluster)
    used = draw(st.lists(_USED, min_size=len(states[0].link_used), max_size=len(states[0].link_used)))
    job = make_job("j", image=draw(st.sampled_from(["rodinia/nw", "rodinia/srad", "rodinia/lud"])),
                   slo_s=draw(st.sampled_from([50.0, 120.0, 210.0, 400.0])),
                   wait_rounds=draw(st.sampled_from([0, 5, 200, 700])), importance=draw(st.sampled_from([1.0, 5.0])))
    jobs = _job_state(job), _job_state(job)
    guard = draw(st.sampled_from(list(SloGuard)))
    own = draw(st.integers(0, states[0].n_machines - 1))
    mine = draw(st.lists(st.integers(0, len(used) - 1), max_size=3, unique=True))
    for state, js in zip(states, jobs, strict=True):
        state.link_used[:] = used
        js.guard = guard
        js.taken_traffic.append((tuple(mine), js.gbps))
    return states[0], states[1], jobs[0], jobs[1], own


@settings(max_examples=300, deadline=None)
@given(_rounds(), st.booleans())
def test_the_one_pass_walk_takes_what_the_path_by_path_walk_took(case: tuple[FreeState, FreeState, RoundJob,
                                                                             RoundJob, int], pinned: bool) -> None:
    fast, plain, js_fast, js_plain, own = case
    model = DRMaestroNACostModel()
    wanted = "P100" if pinned else None
    got, why = take_within_reach(fast, js_fast, "gpu", own, wanted, model.remote_check(fast, js_fast))
    # The walk as it was: every location within reach in turn, in the rack first, each tried by take_at.
    check = model.remote_check(plain, js_plain)
    free = plain.free_count["gpu"]
    cand = np.nonzero((free > 0) & plain.remote_reach(own, js_plain.gbps))[0]
    same = plain.loc_rack[cand] == plain.loc_rack[own]
    want, why_plain = None, ""
    for loc in np.concatenate([cand[same], cand[~same]])[:SCAN_LIMIT].tolist():
        want, reason = take_at(plain, js_plain, "gpu", own, loc, wanted, check)
        if want is not None:
            why_plain = ""
            break
        why_plain = reason or why_plain
    assert (got, why) == (want, why_plain)
    assert fast.link_used.tobytes() == plain.link_used.tobytes()  # the same sums, to the last bit
    assert (js_fast.slo_risk, js_fast.slo_held, js_fast.taken_traffic, js_fast.taken_devices) == (
        js_plain.slo_risk, js_plain.slo_held, js_plain.taken_traffic, js_plain.taken_devices)


@settings(max_examples=300, deadline=None)
@given(_rounds(), st.sampled_from([0.1, 1.7, 2.5, 3.0, 10.0]), st.integers(0, 2**16))
def test_reach_and_its_order_are_the_path_tests_spelt_out(case: tuple[FreeState, FreeState, RoundJob, RoundJob, int],
                                                          gbps: float, among_bits: int) -> None:
    """`remote_reach` (one headroom test over every link, read per location) against each path's links
    tested in turn, and `reach_order` against the rack-first order the decoder tried them in."""
    state, _, _, _, own = case
    n_loc = len(state.loc_rack)
    headroom = state.link_cap - state.link_used
    plain = np.array([loc != own and all(headroom[link] + EPS >= gbps for link in state.path(own, loc))
                      for loc in range(n_loc)])
    assert state.remote_reach(own, gbps).tolist() == plain.tolist()
    among = np.array([(among_bits >> (loc % 16)) & 1 == 1 for loc in range(n_loc)])
    cand = np.nonzero(among & plain)[0]
    same = state.loc_rack[cand] == state.loc_rack[own]
    assert state.reach_order(own, gbps, among).tolist() == np.concatenate([cand[same], cand[~same]]).tolist()


@settings(max_examples=300, deadline=None)
@given(_rounds(), st.sampled_from([0.0, 0.1, 1.7, 2.5, 3.0, 10.0]), st.integers(0, 2**16), st.sampled_from([1, 3, 64]))
def test_reach_trial_is_the_order_and_then_its_trial(case: tuple[FreeState, FreeState, RoundJob, RoundJob, int],
                                                     gbps: float, among_bits: int, limit: int) -> None:
    """`reach_trial` (both tests over every link at once) against `reach_order` cut to `limit` and then
    `trial_fits` of those paths (no traffic, 0 Gb/s: where it takes their way)."""
    state, _, _, _, own = case
    n_loc = len(state.loc_rack)
    among = np.array([(among_bits >> (loc % 16)) & 1 == 1 for loc in range(n_loc)])
    order, fits = state.reach_trial(own, gbps, among, limit)
    expected = state.reach_order(own, gbps, among)[:limit]
    assert order.tolist() == expected.tolist()
    plain = state.trial_fits(own, expected, gbps)
    assert (fits is None) == (plain is None)
    if fits is not None and plain is not None:
        assert fits.tolist() == plain.tolist()


class _PricesEach(SloCheck):
    """`SloCheck` that never stands down for `REFUSE_ALL`: it prices every path it is asked of."""

    __slots__ = ()

    def from_machine(self, own: int) -> RemoteCheck:
        return self


@settings(max_examples=300, deadline=None)
@given(_rounds(), st.lists(st.tuples(st.integers(0, 20), st.integers(0, 2)), max_size=6),
       st.sampled_from([0.0, 0.5, 0.95, 1.0]))
def test_a_held_task_walks_past_every_path_as_pricing_each_did(case: tuple[FreeState, FreeState, RoundJob, RoundJob,
                                                                           int],
                                                               listed: list[tuple[int, int]], busy: float) -> None:
    """`take_remote` with `from_machine` (a held task's paths refused without pricing them) against the
    same check pricing every path: the same device or reason, the same link sums to the bit, the same
    notes on the job, the flow's list counted down alike."""
    fast, plain, js_fast, js_plain, own = case
    n_loc = len(fast.loc_rack)
    model = DRMaestroNACostModel()
    outcomes, refused = [], []
    for state, js, check in ((fast, js_fast, SloCheck(model, fast, js_fast)),
                             (plain, js_plain, _PricesEach(model, plain, js_plain))):
        state.link_used[own] = busy * state.link_cap[own]  # from idle to full: where a refusal can be told at once
        entries = [[loc % n_loc, count] for loc, count in listed]
        refused.append(check.from_machine(own) is REFUSE_ALL)
        outcomes.append((take_remote(state, js, "gpu", own, None, entries, check), entries))
    event(f"refused {refused[0]}")
    assert not refused[1]
    assert outcomes[0] == outcomes[1]
    assert fast.link_used.tobytes() == plain.link_used.tobytes()
    assert (js_fast.slo_risk, js_fast.slo_held, js_fast.taken_traffic, js_fast.taken_devices) == (
        js_plain.slo_risk, js_plain.slo_held, js_plain.taken_traffic, js_plain.taken_devices)


@settings(max_examples=300, deadline=None)
@given(_rounds(), st.sampled_from([0.1, 1.7, 2.5, 3.0]))
def test_trial_loads_and_retrace_paths_are_the_path_by_path_steps(case: tuple[FreeState, FreeState, RoundJob,
                                                                              RoundJob, int], gbps: float) -> None:
    fast, plain, _, _, own = case
    locs = np.array([loc for loc in range(len(fast.loc_rack)) if loc != own], dtype=np.int64)
    trial = fast.trial_loads(own, locs, gbps)
    assert trial is not None
    paths = [fast.path(own, loc) for loc in locs.tolist()]
    assert trial[0].tolist() == [fast.fits_traffic(p, gbps) for p in paths]
    assert trial[1].tolist() == [fast.load_with(p, gbps) for p in paths]
    done = fast.retrace_paths(own, locs, gbps)
    expected = len(paths)
    for i, p in enumerate(paths):
        if plain.retrace_traffic(p, gbps):
            expected = i + 1
            break
    assert done == expected
    assert fast.link_used.tobytes() == plain.link_used.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 900.0), st.integers(1, 10), st.integers(0, 1500), st.sampled_from([1.0, 1.05, 1.1]),
       st.sampled_from([0, 400_000]))
def test_outwaits_holds_up_to_some_phi_and_not_beyond(tau: float, z: int, wait: int, pref: float, extra: int) -> None:
    """What lets `SloCheck` bracket `outwaited` by the answers it has: a longer expected time never
    outwaits waiting where a shorter one did not (its roundings included: φ on a fine grid)."""
    grid = np.concatenate([np.linspace(0.0, 3.0 * tau, 600), tau * (1 + np.arange(-50, 50) * 1e-12)])
    answers = [outwaits(float(p), tau, float(z), wait, pref, extra) for p in np.sort(grid)]
    assert answers == sorted(answers, reverse=True)


def test_a_job_that_draws_no_bandwidth_is_refused_a_remote_device_without_giving_back_traffic() -> None:
    """A job with no traffic of its own (network_gbps 0) takes none on the path, so a remote device the
    SLO re-check refuses has none to give back (the path-by-path walk popped the job's last traffic, or
    failed on an empty list)."""
    state = FreeState(make_cluster(machines=2, gpus=1, pools=1, pool_gpus=4))
    js = _job_state(make_job("z", slo_s=50.0))  # nw: 208 s with a remote GPU, far past its goal
    js.gbps, js.guard = 0.0, SloGuard.ALL
    before = state.link_used.copy()
    assert take_at(state, js, "gpu", 0, 2, None, DRMaestroNACostModel().remote_check(state, js)) == (None, "slo")
    assert js.taken_traffic == [] and (state.link_used == before).all()
