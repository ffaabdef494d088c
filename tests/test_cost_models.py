"""The cost models: one object per flow policy, one answer per arc type, registered by name."""

from __future__ import annotations

import numpy as np
import pytest

from disagg.model import Job
from disagg.placement.cost import goal_s, phi, placing_cost, postponement, profile_of, remote_gbps
from disagg.placement.cost_models import (
    COST_MODELS,
    ClassRows,
    DRMaestroCostModel,
    DRMaestroNACostModel,
    FirmamentCostModel,
    MachineColumns,
    UnknownCostModelError,
    get_cost_model,
    register_cost_model,
)
from disagg.placement.jobstate import JobTable, RoundJob, SloGuard, profile_arrays
from disagg.placement.phase_one import NEVER
from disagg.placement.registry import get_policy
from disagg.placement.state import FreeState
from tests.builders import make_cluster, make_job


def job_state(job: Job, order: int = 0) -> RoundJob:
    """A job as a flow round keeps it (what `FlowPlacer` builds)."""
    profile = profile_of(job)
    t = job.tasks
    wants = {k: t.wants(k) for k in t.kinds}
    shape = (t.cpus, t.memory_gb, tuple(sorted(wants.items())), ())
    return RoundJob(job, order, profile, goal_s(job, profile), job.importance, remote_gbps(job, profile),
                    phi(job, profile, 0.0, 0.0), shape, wants, t.count, t.cpus, t.memory_gb,
                    job.wait_rounds)


def test_registry_has_one_cost_model_per_flow_policy_and_refuses_duplicates() -> None:
    assert set(COST_MODELS) == {"drmaestro", "drmaestro-na", "firmament"}
    for name in COST_MODELS:
        policy = get_policy(name)
        assert policy.options.cost_model == name  # type: ignore[attr-defined]
        assert get_cost_model(name).name == name
    with pytest.raises(ValueError, match="already registered"):
        register_cost_model("firmament", FirmamentCostModel)
    with pytest.raises(UnknownCostModelError, match="known cost models: drmaestro, drmaestro-na, firmament"):
        get_cost_model("fair")


@pytest.mark.parametrize("name", sorted(COST_MODELS))
def test_the_unscheduled_arc_rises_every_round_a_job_waits(name: str) -> None:
    jobs = [job_state(make_job(f"j{w}", wait_rounds=w), order=0) for w in range(5)]
    table = JobTable.of(jobs)
    costs = get_cost_model(name).task_to_unscheduled(table, JobTable.indices(jobs), queue_len=1)
    assert np.all(np.diff(costs) > 0)


def machines(share: list[float], load: list[float]) -> MachineColumns:
    return MachineColumns(np.array(share), np.array(load), np.ones(len(share)))


def test_network_load_is_priced_only_by_the_na_model_which_postpones_what_would_miss_the_slo() -> None:
    # nw with a tight SLO: a remote GPU is within it on an idle network, not on a saturated one.
    js = job_state(make_job("nw", slo_s=212.0))
    js.guard = SloGuard.ALL  # held back for its SLO (what `slo_guard` says while waiting can help)
    rows = ClassRows.of(profile_arrays([js]), [js])
    columns = machines([0.0, 1.0, 1.0], [1.0, 0.0, 1.0])  # local (busy uplink), remote idle, remote loaded
    blind = DRMaestroCostModel().task_to_machine(rows, columns)
    aware = DRMaestroNACostModel().task_to_machine(rows, columns)
    assert blind.cost[0, 1] == blind.cost[0, 2] and (blind.cost < NEVER).all() and blind.hold is None
    assert aware.cost[0, 2] > aware.cost[0, 1] == blind.cost[0, 1]
    # Every arc is offered; the loaded one carries the postponement of its miss on top of Eq. 7.
    assert (aware.cost < NEVER).all() and aware.hold is not None
    ph = phi(js.job, js.profile, 1.0, 1.0)
    assert aware.hold.tolist() == [[0, 0, int(postponement(ph, js.tau))]]
    assert aware.cost[0, 2] - aware.hold[0, 2] == placing_cost(ph, js.tau, js.z, 1.0)
    shape, blind_shape = (m.shape_to_machine(rows, columns) for m in (DRMaestroNACostModel(), DRMaestroCostModel()))
    assert (shape.cost < NEVER).all() and shape.cost[0, 2] - blind_shape.cost[0, 2] > 0
    assert DRMaestroCostModel().remote_to_location(np.array([0.5]), np.array([1.0])) == ([0], [0])
    rack, cross = DRMaestroNACostModel().remote_to_location(np.array([0.5]), np.array([1.0]))
    assert 0 < rack[0] < cross[0]


@pytest.mark.parametrize(("slo_s", "guard", "held"), [
    # nw remote: 208.5 s on an idle network, more under load.
    (208.0, SloGuard.TRAFFIC, [False, False, False]),  # misses even idle: waiting cannot help, no hold
    (213.0, SloGuard.TRAFFIC, [False, False, True]),   # only others' traffic makes it miss: held back
    (208.0, SloGuard.ALL, [False, True, True]),        # a local placement comes once running jobs end
    (208.0, SloGuard.NONE, [False, False, False]),     # a model blind to the SLO holds nothing back
], ids=["misses-idle", "traffic-only", "all", "none"])
def test_na_holds_a_job_back_for_its_slo_only_while_waiting_can_help(slo_s: float, guard: SloGuard,
                                                                      held: list[bool]) -> None:
    js = job_state(make_job("nw", slo_s=slo_s))
    js.guard = guard
    rows = ClassRows.of(profile_arrays([js]), [js])
    columns = machines([0.0, 1.0, 1.0], [1.0, 0.0, 1.0])  # local (busy uplink), remote idle, remote loaded
    arcs = DRMaestroNACostModel().task_to_machine(rows, columns)
    assert (arcs.cost < NEVER).all()
    hold = np.zeros((1, 3), dtype=np.int64) if arcs.hold is None else arcs.hold
    assert (hold > 0).tolist() == [held]


def test_na_guard_follows_the_idle_cluster_whatever_the_wait() -> None:
    from disagg.placement.cost import SLO_PATIENCE
    state = FreeState(make_cluster(machines=2, gpus=1, pools=1, pool_gpus=4))
    na = DRMaestroNACostModel()
    one, two = job_state(make_job("one", gpu=1)), job_state(make_job("two", gpu=2))
    assert na.slo_guard(state, one) == SloGuard.ALL       # a machine holds its GPU: local once idle
    assert na.slo_guard(state, two) == SloGuard.TRAFFIC   # no machine holds 2: some must be remote
    # No cliff at SLO_PATIENCE: the hold is a cost that W outgrows, not a guard that ends.
    late = job_state(make_job("late", gpu=1, wait_rounds=SLO_PATIENCE))
    assert na.slo_guard(state, late) == SloGuard.ALL
    assert DRMaestroCostModel().slo_guard(state, one) == SloGuard.NONE


def test_the_remote_supply_a_model_keeps_follows_the_free_state() -> None:
    """What `task_to_machine_capacity` keeps of the remote devices in reach (per free state and version)
    is what a fresh model works out: after a take of traffic, and in another state."""
    state = FreeState(make_cluster(machines=2, gpus=1, pools=1, pool_gpus=4))
    js = job_state(make_job("nw", gpu=2, cpus=1, memory_gb=1))
    local_free = {k: state.local_free(k) for k in state.kinds}
    kept = DRMaestroCostModel()
    assert kept.task_to_machine_capacity(state, js, local_free, js.gbps).tolist() == [3, 3]
    journal = job_state(make_job("taker"))
    assert state.take_traffic((0,), 5.0, journal)  # half of m0's uplink
    fresh = DRMaestroCostModel().task_to_machine_capacity(state, js, local_free, js.gbps).tolist()
    assert kept.task_to_machine_capacity(state, js, local_free, js.gbps).tolist() == fresh != [3, 3]
    other = FreeState(make_cluster(machines=2, gpus=1, pools=1, pool_gpus=4))
    assert kept.task_to_machine_capacity(other, js, local_free, js.gbps).tolist() == [3, 3]


def test_firmament_offers_no_remote_arc_and_counts_only_a_machines_own_devices() -> None:
    cluster = make_cluster(machines=2, gpus=1, pools=1, pool_gpus=4)
    state = FreeState(cluster)
    js = job_state(make_job("nw", gpu=2, cpus=1, memory_gb=1))
    local_free = {k: state.local_free(k) for k in state.kinds}
    rows = ClassRows.of(profile_arrays([js]), [js])
    firmament, drmaestro = FirmamentCostModel(), DRMaestroCostModel()
    assert firmament.task_to_machine_capacity(state, js, local_free, js.gbps).tolist() == [0, 0]
    # Disaggregated: its own GPU and the 5 remote ones its 10 Gb/s uplink carries at 1.7 Gb/s: 3 tasks of 2.
    assert drmaestro.task_to_machine_capacity(state, js, local_free, js.gbps).tolist() == [3, 3]
    assert firmament.remote_surcharge(rows) is None
    assert (drmaestro.remote_surcharge(rows) or [0])[0] > 0
    assert firmament.machines_allowed(state, js)[1].tolist() == []
    assert firmament.why_no_machine(state, js)[0] == "no-devices"
    # cpus free on both machines, 2 GPUs wanted: its own GPU and the pool's 4 are within reach
    assert drmaestro.why_no_machine(state, js)[0] == "no-bandwidth"
    # NA offers every arc (a miss is a cost, not a missing arc): no machine means what it means for DRMaestro
    assert DRMaestroNACostModel().why_no_machine(state, js) == drmaestro.why_no_machine(state, js)
