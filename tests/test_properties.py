"""Hypothesis properties over random clusters and queues, for every policy."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Job, TaskRequest
from disagg.placement import Reason
from disagg.placement.registry import POLICIES, get_policy
from tests.harness import SERVER_CENTRIC
from tests.invariants import check_decisions
from tests.strategies import clusters, queues


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), queue=queues(), seed=st.integers(0, 1000))
def test_no_policy_over_commits_or_splits_a_gang(cluster: Cluster, queue: list[Job], seed: int) -> None:
    for name in POLICIES:
        decisions = get_policy(name).place(cluster, queue, 100.0, np.random.default_rng(seed))
        # check_decisions: every job decided once with a reason, gangs whole, no device twice or held,
        # models honoured, no cpu/memory/link over-committed, server-centric policies never remote.
        check_decisions(cluster, queue, decisions, server_centric=name in SERVER_CENTRIC)


@settings(max_examples=25, deadline=None)
@given(cluster=clusters(), queue=queues())
def test_flow_policies_are_deterministic(cluster: Cluster, queue: list[Job]) -> None:
    for name in ("drmaestro", "drmaestro-na", "firmament"):
        a = get_policy(name).place(cluster, queue, 100.0, np.random.default_rng(1))
        b = get_policy(name).place(cluster, queue, 100.0, np.random.default_rng(2))
        assert a.placed == b.placed and a.unplaced == b.unplaced


@settings(max_examples=25, deadline=None)
@given(cluster=clusters(), queue=queues())
def test_waiting_longer_never_makes_waiting_win(cluster: Cluster, queue: list[Job]) -> None:
    """W only raises the price of waiting: a job alone in the queue that is placed is never left to wait
    (postponed, or refused at the flow's unscheduled arc) once it has waited longer.

    What W does not promise: that the same machines come out. When costs change the solver may break a
    tie between equal machines the other way, and phase 1 cannot see every link a device phase will
    need, so on a tight cluster a later round can still lose a job to bandwidth (Hypothesis finds such
    clusters; the decoder's fall-back to devices within reach and phase 1's uplink bound make them rare).
    """
    for job in queue[:2]:
        first = get_policy("drmaestro").place(cluster, [job], 0.0, np.random.default_rng(0))
        later = get_policy("drmaestro").place(cluster, [job.waited().waited()], 0.0, np.random.default_rng(0))
        if first.placed and not later.placed:
            (why,) = later.unplaced
            assert why.reason in (Reason.NO_BANDWIDTH, Reason.NO_DEVICES), why


@st.composite
def long_queues(draw: st.DrawFn) -> list[Job]:
    """Longer queues than `queues`, with requests shared between jobs and fractional memory, so that
    what is left runs out part way along the queue."""
    shared = [TaskRequest(draw(st.integers(1, 3)), draw(st.sampled_from([0.5, 1, 3])),
                          draw(st.sampled_from([0.1, 0.3, 7.7, 16.0])),
                          {"gpu": draw(st.integers(0, 2))} if draw(st.booleans()) else {},
                          {"gpu": "K80"} if draw(st.booleans()) else {})
              for _ in range(draw(st.integers(1, 4)))]
    return [Job(f"j{i}", "rodinia/nw", draw(st.sampled_from(shared)), submit_s=float(i))
            for i in range(draw(st.integers(0, 40)))]


@settings(max_examples=80, deadline=None)
@given(cluster=clusters(), queue=long_queues(), probe=st.sampled_from([0, 1, 3, 8]))
def test_admission_takes_the_head_at_once_as_the_walk_would(cluster: Cluster, queue: list[Job], probe: int) -> None:
    """Admission decides the queue's head with running sums (looking among the first `probe` jobs,
    then the whole queue); it must take and refuse exactly what the job-by-job walk does, with the
    same reasons."""
    from disagg.placement.queue import admit
    from disagg.placement.state import FreeState

    at_once = admit(FreeState(cluster), queue, probe=probe)
    walked = admit(FreeState(cluster), queue, vectorised=False)
    assert at_once[0] == walked[0]
    assert at_once[1] == walked[1]


@settings(max_examples=80, deadline=None)
@given(cluster=clusters(), shapes=st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.7, 16.0, float("inf")]),
                                                    st.sampled_from([0.0, 0.1, 4.0, 7.7, 64.0, float("nan")])),
                                          min_size=1, max_size=10))
def test_admission_asks_a_few_shapes_fit_one_by_one_as_per_distinct_shape(
        cluster: Cluster, shapes: list[tuple[float, float]]) -> None:
    """The head asks a few requests' fit one by one (`_Admission._asked_fit`, finite positive shapes): the
    same counts, and the same memo of fits by shape, as asking once per distinct shape (np.unique)."""
    import warnings
    from unittest import mock

    from disagg.placement import queue as queue_module
    from disagg.placement.queue import Asks, _Admission
    from disagg.placement.state import FreeState

    cpus, memory = (np.array(c, dtype=np.float64) for c in zip(*shapes, strict=True))
    few = _Admission(FreeState(cluster), Asks(), {})
    each = _Admission(FreeState(cluster), Asks(), {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (an infinite or NaN shape's counts, both ways)
        got = few._asked_fit(cpus, memory)
        with mock.patch.object(queue_module, "_FEW_REQUESTS", -1):
            want = each._asked_fit(cpus, memory)
    assert got.tolist() == want.tolist()
    if all(0 < c < np.inf and 0 < m < np.inf for c, m in shapes):
        assert few.shape_fit == each.shape_fit


@settings(max_examples=80, deadline=None)
@given(cluster=clusters(), queue=long_queues())
def test_admission_refuses_the_rest_at_once_as_one_look_per_job_would(cluster: Cluster, queue: list[Job]) -> None:
    """Once every request of a walk is refused with nothing taken since, the walk refuses the rest of the
    queue at once; that must take and refuse exactly what a look at every job (`consider`, no memo) does,
    with the same reasons."""
    from disagg.placement.queue import Asks, _Admission, admit
    from disagg.placement.state import FreeState

    walked = admit(FreeState(cluster), queue, vectorised=False)
    one_by_one = _Admission(FreeState(cluster), Asks(), {})
    codes: dict[tuple[object, ...], int] = {}
    for at, job in enumerate(queue):
        t = job.tasks
        ask = (t.count, t.cpus, t.memory_gb, tuple(t.devices.items()), tuple(t.models.items()))
        one_by_one.consider(job, at, codes.setdefault(ask, len(codes)))
    assert walked[0] == one_by_one.taken
    assert walked[1] == one_by_one.refused
    assert list(walked[1]) == list(one_by_one.refused)  # and in queue order


@settings(max_examples=60, deadline=None)
@given(cluster=clusters(), queue=long_queues(), first=st.integers(0, 40))
def test_admission_with_the_rounds_request_codes_decides_as_without(cluster: Cluster, queue: list[Job],
                                                                    first: int) -> None:
    """A round takes its queue's request codes once (`Asks.codes_of`) and re-admission hands the walk
    its jobs' codes: the walk must take and refuse exactly what it does when it finds the codes itself,
    with one `Asks` shared by the round's admissions as the flow placer shares it."""
    from disagg.placement.queue import Asks, admit
    from disagg.placement.state import FreeState

    asks = Asks()
    codes = asks.codes_of([j.tasks for j in queue])
    late = queue[min(first, len(queue)):]
    given = admit(FreeState(cluster), late, vectorised=False, asks=asks, codes=codes[len(queue) - len(late):])
    found = admit(FreeState(cluster), late, vectorised=False)
    assert given[0] == found[0]
    assert list(given[1].items()) == list(found[1].items())


@settings(max_examples=60, deadline=None)
@given(cluster=clusters(), queue=long_queues(), vectorised=st.booleans())
def test_admission_with_its_tail_deferred_refuses_as_when_written(cluster: Cluster, queue: list[Job],
                                                                  vectorised: bool) -> None:
    """A flow round keeps the walk's tail as places and codes (`admit_deferred`) and writes it at the
    end: the refusals written then, with those of the dict, must be what `admit` writes at once."""
    from disagg.placement.queue import admit, admit_deferred
    from disagg.placement.state import FreeState

    taken, refused, tail = admit_deferred(FreeState(cluster), queue, vectorised=vectorised, probe=3)
    written = admit(FreeState(cluster), queue, vectorised=vectorised, probe=3)
    assert taken == written[0]
    if tail is not None:
        assert not set(refused) & {j.name for j in queue[tail.start:]}
        assert len(tail.codes) == len(queue) - tail.start > 0
        tail.write(queue, refused)
    assert refused == written[1]


@st.composite
def remote_holdings(draw: st.DrawFn) -> Cluster:
    """A cluster whose allocations hold devices anywhere (their own machine's, another machine's, a
    pool's, across racks), with traffic or none."""
    from dataclasses import replace

    from disagg.model import Allocation

    cluster = draw(clusters())
    free = [d.id for d in cluster.devices]
    allocations = list(cluster.allocations)
    for k in range(draw(st.integers(0, 6))):
        taken = draw(st.lists(st.sampled_from(free), max_size=3, unique=True)) if free else []
        free = [d for d in free if d not in taken]
        machine = draw(st.sampled_from(cluster.machines)).name
        allocations.append(Allocation(f"r{k}", machine, 1.0, 1.0, tuple(taken),
                                      draw(st.sampled_from([0.0, 0.3, 1.0, 7.0]))))
    return replace(cluster, allocations=tuple(allocations))


@settings(max_examples=80, deadline=None)
@given(cluster=remote_holdings())
def test_remote_traffic_adds_up_as_one_path_at_a_time(cluster: Cluster) -> None:
    """FreeState puts an allocation's traffic on the path to each remote device it holds (an even share
    each) as arrays: the same sums, bit for bit, as adding path by path in the allocations' order."""
    from disagg.placement.state import FreeState

    state = FreeState(cluster)
    expected = np.zeros(len(state.link_cap))
    index = cluster.location_index
    for a in cluster.allocations:
        expected[index[a.machine]] += a.network_gbps
    for a in cluster.allocations:
        if a.network_gbps <= 0:
            continue
        remote = [cluster.device_by_id[d].location for d in a.devices
                  if cluster.device_by_id[d].location != a.machine]
        for loc in remote:
            for link in state.path(index[a.machine], index[loc])[1:]:
                expected[link] += a.network_gbps / len(remote)
    assert state.link_used.tobytes() == expected.tobytes()


def test_admission_walks_a_short_head_and_looks_for_a_long_one_from_where_its_walk_took_every_job() -> None:
    """`admit_deferred` walks the first `probe` jobs while each is taken (`take_front`): on a full cluster it
    stops at the first refusal and the walk goes on alone (a walk that starts with every request of its
    jobs refused already is all tail); where it took every one, the head is looked for from there
    (`take_head`'s `start`). Both take and refuse exactly what the walk of the whole queue does, with the
    same reasons, the tail written or left to the caller."""
    from disagg.placement.queue import Asks, _Admission, admit, admit_deferred
    from disagg.placement.state import FreeState
    from tests.builders import make_cluster, make_job

    small, large = make_job("s", cpus=2, memory_gb=8), make_job("l", cpus=8, memory_gb=32, gpu=2)
    huge = make_job("h", cpus=64, memory_gb=8, gpu=0)  # fits no machine: refused, whatever is left
    for machines, pattern in ((8, "sl"), (2, "sl"), (2, "lls"), (1, "ssssslhh"), (3, "hsl"), (6, "slsslsh"), (1, "s"),
                             (2, "l")):
        cluster = make_cluster(machines=machines, gpus=4, cpus=20, memory_gb=128)
        kinds = {"s": small, "l": large, "h": huge}
        queue = [Job(f"j{i}", "rodinia/nw", kinds[pattern[i % len(pattern)]].tasks, submit_s=float(i))
                 for i in range(60)]
        walked = admit(FreeState(cluster), queue, vectorised=False)
        for probe in (0, 1, 4, 16, 59):
            front = _Admission(FreeState(cluster), Asks(), {})
            decided, every = front.take_front(queue, probe)
            assert every == (decided == probe and front.taken == list(range(probe)))
            assert front.taken == [i for i in walked[0] if i < decided]
            at_once = admit(FreeState(cluster), queue, probe=probe)
            assert at_once[0] == walked[0] and at_once[1] == walked[1], (machines, pattern, probe)
            taken, refused, tail = admit_deferred(FreeState(cluster), queue, probe=probe)
            if tail is not None:
                tail.write(queue, refused)
            assert taken == walked[0] and refused == walked[1], (machines, pattern, probe)


def test_a_refusal_for_room_names_the_most_free_machine_read_when_it_is_made() -> None:
    """A job whose gang no machines can take is refused naming how many tasks fit and the most free cpus
    and memory on one machine (`_Admission.most_free`, read when the refusal is made, not with each
    shape's fit): those of the state admission reads, which it never changes, for the first job refused
    so and, through the memo of refusals, the next."""
    from disagg.placement.queue import admit
    from disagg.placement.state import FreeState
    from tests.builders import make_cluster, make_job

    cluster = make_cluster(machines=3, gpus=4, cpus=20, memory_gb=100, taken_cpus={"m0": 5.0, "m1": 12.5})
    state = FreeState(cluster)
    queue = [make_job("fits", cpus=2, memory_gb=8), make_job("wide", count=4, cpus=15, memory_gb=40),
             make_job("wide2", count=4, cpus=15, memory_gb=40), make_job("tall", cpus=30, memory_gb=8)]
    for vectorised in (False, True):
        taken, refused = admit(FreeState(cluster), queue, vectorised=vectorised, probe=0)
        assert taken == [0]
        most = f"most free on one machine: {float(state.cpu.max()):g} cpus, {float(state.mem.max()):g} GB"
        assert refused["wide"].message == refused["wide2"].message == (
            f"needs 4 task(s) of 15 cpus and 40 GB each on machines; 2 fit now ({most})")
        assert refused["tall"].message == f"needs 1 task(s) of 30 cpus and 8 GB each on machines; 0 fit now ({most})"
        assert refused["wide"].reason == Reason.NO_CAPACITY
