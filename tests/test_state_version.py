"""`FreeState.version`: what is cached under it (`reachable`, `machines_with_local`) reads only free
devices and link usage, so a rollback that gives back only cpus and memory keeps it (a job the device
phase fails holds its phase-1 cpus), and every other change moves it. Checked against the answers worked
out afresh after any mix of takes and rollbacks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.placement.state import FreeState, Journal
from tests.builders import make_cluster

_STEP = st.tuples(st.sampled_from(["cpu", "device", "traffic", "rollback"]), st.integers(0, 5), st.integers(0, 5))


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEP, max_size=14), st.sampled_from([0.5, 3.0, 9.0]))
def test_cached_reach_after_takes_and_rollbacks_is_worked_out_afresh(steps: list[tuple[str, int, int]],
                                                                      gbps: float) -> None:
    state = FreeState(make_cluster(machines=4, gpus=1, pools=2, pool_gpus=2, racks=2))
    n_loc = len(state.loc_rack)
    journals = [Journal(), Journal()]
    shape = (1.0, 1.0, (("gpu", 1),), ())
    for op, a, b in steps:
        journal = journals[b % 2]
        before = state.version
        if op == "cpu":
            state.take_cpu(a % state.n_machines, 2.0, 4.0, journal)
        elif op == "device":
            state.take_device("gpu", a % n_loc, None, journal)
        elif op == "traffic":
            state.take_traffic(state.path(a % n_loc, b % n_loc), gbps, journal)
        else:
            gives_back = bool(journal.taken_devices or journal.taken_traffic)
            state.rollback(journal)
            assert (state.version != before) == gives_back
        for own in range(state.n_machines):  # (cached once asked: the next step reads the cache)
            assert state.reachable("gpu", own, gbps) == state._reachable("gpu", own, gbps, None)
        mask, where = state.machines_with_local(shape)
        assert mask.tolist() == (state.local_free("gpu") >= 1).tolist()
        assert where.tolist() == [m for m in range(state.n_machines) if mask[m]]
