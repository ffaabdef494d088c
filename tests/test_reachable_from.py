"""`FreeState.reachable_from` (every machine's reachable devices at once, by rack sums) against
`FreeState.reachable` asked machine by machine, over drawn link loads and free devices."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.placement.state import FreeState
from tests.builders import make_cluster


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_reachable_from_many_machines_is_reachable_from_each(data: st.DataObject) -> None:
    racks = data.draw(st.integers(1, 3))
    cluster = make_cluster(machines=6, gpus=2, cpus=16, pools=2, pool_gpus=4, racks=racks)
    state = FreeState(cluster)
    n_links = len(state.link_cap)
    state.link_used[:] = data.draw(st.lists(st.sampled_from([0.0, 5.0, 20.0, 24.5, 25.0, 99.0, 100.0, 1e9]),
                                            min_size=n_links, max_size=n_links))
    free = state.free_count["gpu"]
    free[:] = np.minimum(free, data.draw(st.lists(st.integers(0, 4), min_size=len(free), max_size=len(free))))
    gbps = data.draw(st.sampled_from([0.0, 1.0, 5.0, 25.0]))
    owns = np.arange(state.n_machines)
    for model in (None, "no-such-model", *state.free_by_model("gpu")[0]):
        want = [state.reachable("gpu", int(m), gbps, model) for m in owns]
        assert state.reachable_from("gpu", owns, gbps, model).tolist() == want
    assert state.reachable_from("fpga", owns, gbps).tolist() == [state.reachable("fpga", int(m), gbps) for m in owns]
