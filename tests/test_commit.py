"""The one over-commit check: each refusal with its message, the ledger, and agreement with `FreeState`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Job
from disagg.placement import DeviceGrant, JobPlacement, TaskPlacement
from disagg.placement.commit import EPS, RoomLedger, exceeds, over_commit
from disagg.placement.registry import POLICIES, get_policy
from disagg.placement.state import FreeState, Journal
from tests.strategies import clusters, queues


def ledger() -> RoomLedger:
    """m0 with 4 cpus, 16 GB and two free GPUs; box0/gpu0 behind a 1 Gbit/s uplink; some devices not usable."""
    return RoomLedger(
        cpus={"m0": 4.0, "m1": 3.0}, memory={"m0": 16.0, "m1": 10.0},
        devices={"m0/gpu0": None, "m0/gpu1": None, "m1/gpu0": "is already held", "m1/gpu1": "is failed",
                 "m1/gpu2": "is drained", "box0/gpu0": None, "box1/gpu0": None},
        bandwidth={"up:m0": 1.0, "up:box0": 10.0, "up:m1": -0.5}, down={"up:box1"})


def local(*ids: str) -> tuple[DeviceGrant, ...]:
    return tuple(DeviceGrant(i, "gpu", False, i.split("/")[0]) for i in ids)


def remote(device: str, machine: str = "m0", gbps: float = 0.5) -> DeviceGrant:
    box = device.split("/")[0]
    return DeviceGrant(device, "gpu", True, box, (f"up:{machine}", f"up:{box}"), gbps)


def job(*tasks: tuple[str, float, float, tuple[DeviceGrant, ...]]) -> JobPlacement:
    return JobPlacement("j", tuple(TaskPlacement(f"j/{i}", m, c, mem, d) for i, (m, c, mem, d) in enumerate(tasks)))


@pytest.mark.parametrize(("placement", "problem"), [
    (job(("m0", 4, 16, local("m0/gpu0", "m0/gpu1"))), None),
    (job(("m0", 2, 8, (remote("box0/gpu0", gbps=1.0),))), None),
    (job(("m0", 1, 1, (DeviceGrant("box0/gpu0", "gpu", True, "box0", ("up:m0", "spine"), 0.5),))), None),
    (job(("m9", 1, 1, ())), "machine m9 is not in the inventory"),
    (job(("m0", 1, 1, local("m0/gpu7"))), "device m0/gpu7 is not in the inventory"),
    (job(("m1", 1, 1, local("m1/gpu0"))), "device m1/gpu0 is already held"),
    (job(("m0", 1, 1, local("m0/gpu0")), ("m0", 1, 1, local("m0/gpu0"))), "device m0/gpu0 is already held"),
    (job(("m1", 1, 1, local("m1/gpu1"))), "device m1/gpu1 is failed"),
    (job(("m1", 1, 1, local("m1/gpu2"))), "device m1/gpu2 is drained"),
    (job(("m0", 1, 1, (remote("box1/gpu0"),))), "link up:box1 to device box1/gpu0 is down"),
    (job(("m0", 4.5, 1, ())), "machine m0 has 4 cpus free, the job needs 4.5"),
    (job(("m0", 3, 1, ()), ("m0", 2, 1, ())), "machine m0 has 4 cpus free, the job needs 5"),
    (job(("m1", 3, 12, ())), "machine m1 has 10 GB free, the job needs 12"),
    (job(("m0", 1, 1, (remote("box0/gpu0", gbps=2.0),))), "link up:m0 has 1 Gbit/s left, the job needs 2"),
    (job(("m1", 1, 1, (remote("box0/gpu0", "m1"),))), "link up:m1 has 0 Gbit/s left, the job needs 0.5"),
], ids=["fits", "fits-remote", "unmetered-link", "unknown-machine", "unknown-device", "held", "granted-twice",
        "failed", "drained", "link-down", "cpus", "cpus-summed-over-tasks", "memory", "bandwidth",
        "bandwidth-already-short"])
def test_over_commit_names_the_first_problem(placement: JobPlacement, problem: str | None) -> None:
    assert over_commit(placement, ledger()) == problem


def test_the_ledger_checks_each_placement_against_what_those_before_it_took() -> None:
    room = ledger()
    first = job(("m0", 3, 8, (*local("m0/gpu0"), remote("box0/gpu0", gbps=0.75))))
    assert over_commit(first, room) is None
    room.take(first)
    assert over_commit(job(("m0", 1, 8, local("m0/gpu1"))), room) is None  # what is left still fits
    assert over_commit(job(("m0", 2, 1, ())), room) == "machine m0 has 1 cpus free, the job needs 2"
    assert over_commit(job(("m0", 1, 9, ())), room) == "machine m0 has 8 GB free, the job needs 9"
    assert over_commit(job(("m0", 1, 1, local("m0/gpu0"))), room) == "device m0/gpu0 is already held"
    assert over_commit(job(("m0", 1, 1, (remote("box0/gpu0"),))), room) == "device box0/gpu0 is already held"
    assert room.bandwidth == {"up:m0": 0.25, "up:box0": 9.25, "up:m1": -0.5}


def test_exceeds_allows_rounding_but_not_more() -> None:
    assert not exceeds(0.1 + 0.2, 0.3)
    assert not exceeds(4.0 + EPS / 2, 4.0)
    assert exceeds(4.0 + 2 * EPS, 4.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), queue=queues(), seed=st.integers(0, 1000))
def test_no_policy_placement_over_commits_the_snapshots_room(cluster: Cluster, queue: list[Job], seed: int) -> None:
    """What a policy placed, committed in its order to the room the snapshot leaves, always fits: the
    policies' `FreeState` and the commit's check agree."""
    for name in POLICIES:
        room = RoomLedger.of(cluster)
        for p in get_policy(name).place(cluster, queue, 100.0, np.random.default_rng(seed)).placed:
            assert over_commit(p, room) is None, f"{name}: {p.job}"
            room.take(p)


@settings(max_examples=60, deadline=None)
@given(cluster=clusters(), data=st.data())
def test_over_commit_agrees_with_free_state_on_cpus_memory_and_links(cluster: Cluster, data: st.DataObject) -> None:
    """One task on a random machine asking for up to what is free there, or one cpu (GB, Gbit/s) more:
    `over_commit` refuses exactly what `FreeState.take_cpu` and `take_traffic` refuse."""
    state, room = FreeState(cluster), RoomLedger.of(cluster)
    m = data.draw(st.integers(0, len(cluster.machines) - 1))
    name = cluster.machines[m].name
    cpus = max(float(state.cpu[m]), 0.0) + data.draw(st.sampled_from([-0.5, 0.0, 1.0]))
    memory = float(state.mem[m]) + data.draw(st.sampled_from([-1.0, 0.0, 1.0]))
    fits = state.take_cpu(m, cpus, memory, Journal())
    problem = over_commit(job((name, cpus, memory, ())), room)
    assert (problem is None) == fits, problem
    if cpus > state.cpu[m] + 0.5 and not fits:
        assert problem == f"machine {name} has {room.cpus[name]:g} cpus free, the job needs {cpus:g}"
    others = [loc for loc in cluster.locations if loc != name]
    if not others:
        return
    loc = data.draw(st.sampled_from(others))
    path = state.path(m, cluster.location_index[loc])
    gbps = data.draw(st.sampled_from([0.5, 4.0, 12.0, 50.0]))
    grant = DeviceGrant("any", "gpu", True, loc, tuple(state.link_names[i] for i in path), gbps)
    room.devices["any"] = None
    assert (over_commit(job((name, 0.0, 0.0, (grant,))), room) is None) == state.take_traffic(path, gbps, Journal())


def test_the_ledger_of_a_snapshot_is_what_free_state_leaves() -> None:
    from tests.builders import make_cluster

    cluster = make_cluster(machines=3, gpus=2, pools=1, racks=2, taken_cpus={"m0": 6.0}, traffic={"m1": 3.0})
    state, room = FreeState(cluster), RoomLedger.of(cluster)
    assert [room.cpus[m.name] for m in cluster.machines] == state.cpu.tolist()
    assert [room.memory[m.name] for m in cluster.machines] == state.mem.tolist()
    assert [room.bandwidth[n] for n in state.link_names] == (state.link_cap - state.link_used).tolist()
