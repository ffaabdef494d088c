"""No job waits forever (issue 14): the liveness rule of docs/design-decisions.md, for every policy.

(1) On a cluster where nothing else runs or waits, a job that fits under the policy's own rules is
placed in the first round (`tests/oracle.py` says whether it fits, independently of the policies).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Device, Job, Machine, Pool, TaskRequest, device_id
from disagg.placement.registry import POLICIES, get_policy
from tests.harness import SERVER_CENTRIC
from tests.invariants import check_decisions
from tests.oracle import fits_idle

APPS = ["rodinia/nw", "rodinia/hotspot", "rodinia/pathfinder", "rodinia/b+tree", "other/app"]


@st.composite
def idle_clusters(draw: st.DrawFn) -> Cluster:
    """Small clusters with nothing running: machines with and without local devices, pools, tight
    uplinks, a failed device here and there."""
    racks = draw(st.integers(1, 2))
    machines = [Machine(f"m{i}", f"r{i % racks}", draw(st.sampled_from([2, 4, 8, 20])), 32.0,
                        draw(st.sampled_from([1.0, 3.0, 5.0, 10.0, 40.0]))) for i in range(draw(st.integers(1, 5)))]
    pools = [Pool(f"p{i}", f"r{i % racks}", draw(st.sampled_from([3.0, 10.0, 40.0])))
             for i in range(draw(st.integers(0, 2)))]
    devices: list[Device] = []
    for loc in [m.name for m in machines] + [p.name for p in pools]:
        for kind, most in (("gpu", 4), ("nvme", 2)):
            model = draw(st.sampled_from(["K80", "P100"])) if kind == "gpu" else "ssd"
            for i in range(draw(st.integers(0, most))):
                devices.append(Device(device_id(loc, kind, i), kind, model, loc, i,  # type: ignore[arg-type]
                                      health=draw(st.sampled_from(["healthy"] * 7 + ["failed"]))))
    return Cluster(tuple(machines), tuple(pools), tuple(devices), draw(st.sampled_from([5.0, 10.0, 100.0])))


@st.composite
def single_jobs(draw: st.DrawFn) -> Job:
    devices = {k: v for k, v in (("gpu", draw(st.integers(0, 4))), ("nvme", draw(st.integers(0, 1)))) if v}
    models = {"gpu": draw(st.sampled_from(["K80", "P100"]))} if devices.get("gpu") and draw(st.booleans()) else {}
    return Job("j", draw(st.sampled_from(APPS)),
               TaskRequest(draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])), 8.0, devices, models),
               submit_s=0.0, importance=draw(st.sampled_from([1.0, 5.0, 10.0])),
               slo_s=draw(st.sampled_from([None, 50.0, 100.0, 400.0])),
               network_gbps=draw(st.sampled_from([None, 0.5, 3.0, 6.0])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=idle_clusters(), job=single_jobs())
def test_a_job_that_fits_an_idle_cluster_is_placed_in_the_first_round(cluster: Cluster, job: Job) -> None:
    for name in POLICIES:
        server_centric = name in SERVER_CENTRIC
        decisions = get_policy(name).place(cluster, [job], 0.0, np.random.default_rng(0))
        check_decisions(cluster, [job], decisions, server_centric=server_centric)
        fits = fits_idle(cluster, job, server_centric)
        assert bool(decisions.placed) == fits, (name, fits, decisions.unplaced, cluster, job)
