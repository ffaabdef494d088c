"""A stateful Hypothesis machine over the scheduling loop and the store: the fast complement of
`disagg bench chaos` (issue 21).

One controller, in this process, on SQLite with the emulated fabric and an in-memory engine
(`chaos_engine`), driven one step at a time, with no loop thread: submit (tenants with quotas and a
cohort, shapes), fail or repair a device or a link, cancel, run a round (monitor, poll, plan and
commit), do one slice's work (compose or tear down), end a running task, restart (close the service
and open it again on the same store and state directory: reconcile). After every step:
  - nothing is over-committed (cpus and memory per machine, a device in one live slice at most);
  - no device is leaked (attached on the fabric or held in the store without a live slice);
  - an ended job stays as it ended (never re-queued);
  - a job whose run ended with exit 0 is never launched again (finished work is final);
  - a reservation is made only for a job that is not waiting for its own tenant's quota.
A failure it finds and shrinks is written down below as a plain regression test.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from chaos_engine import NAME, WORLDS, FakeEngine
from control_helpers import SAME_USER, TEST_CGROUP
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import disagg.control.loop as loop_module
import disagg.store.compositions as store_compositions
import disagg.store.jobs as store_jobs
import disagg.store.plans as store_plans
from disagg.bench.crash import device_leaks
from disagg.control.config import Config
from disagg.control.jobs import JobRejected
from disagg.control.service import Service, open_service
from disagg.placement.backfill import Round
from disagg.placement.decisions import Reason

TENANTS: list[dict[str, Any]] = [
    {"name": "qa", "quota": {"gpu": 1}},  # no cohort: its second GPU job waits for its own quota
    {"name": "qb", "cohort": "c", "quota": {"gpu": 2, "nvme": 1}, "borrow": {"gpu": 2, "nvme": 1}},
    {"name": "qc", "cohort": "c", "quota": {"gpu": 2, "nvme": 2}},
]
DEVICES = [f"iobox0/gpu{i}" for i in range(5)] + [f"iobox1/nvme{i}" for i in range(4)]
LINKS = ["up:node0", "up:node1", "up:node2", "up:node3", "up:iobox0", "up:iobox1"]

#: The rounds planned since the last step (the loop's `place_round`, wrapped below).
ROUNDS: list[Round] = []
_place_round = loop_module.place_round


def _recording_place_round(*args: Any, **kwargs: Any) -> Round:
    found = _place_round(*args, **kwargs)
    ROUNDS.append(found)
    return found


#: Ids in the order things are made (fresh for each example): the store's random ones would make the same
#: steps pick other slices on a replay, and Hypothesis could not shrink what it found.
IDS = itertools.count()


def _counted_id(prefix: str) -> str:
    return f"{prefix}-{next(IDS):012x}"


def _config(root: Path) -> Config:
    return Config(db=f"sqlite:///{root / 'disagg.db'}", state_dir=str(root / "state"), latency_scale=0.0,
                  engine=NAME, tenants=TENANTS, starvation_rounds=1, parallel_steps=False, preempt_grace_s=0.0,
                  cgroup_parent=TEST_CGROUP, allow_same_user=SAME_USER, workers=1)


class World:
    """One controller driven by hand, and what the checks remember between steps."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="disagg-chaos-machine-"))
        self.config = _config(self.root)
        self.svc: Service = open_service(self.config)
        self.runs = WORLDS[(self.root / "state").resolve()]
        self.jobs: list[str] = []
        self.ended: dict[str, str] = {}
        self.launches_at_finish: dict[str, int] = {}

    @property
    def engine(self) -> FakeEngine:
        assert isinstance(self.svc.engine, FakeEngine)
        return self.svc.engine

    def close(self) -> None:
        self.svc.close()
        WORLDS.pop((self.root / "state").resolve(), None)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the steps ---------------------------------------------------------------------------
    def submit(self, tenant: str, count: int, gpu: int, nvme: int) -> str | None:
        body = {"name": "m", "image": "rodinia/nw", "command": ["true"], "max_retries": 3,
                "tasks": {"count": count, "cpus": 1.0, "memory_gb": 1.0, "gpu": gpu, "nvme": nvme}}
        try:
            job, _ = self.svc.jobs.submit(tenant, body)
        except JobRejected:
            return None
        self.jobs.append(str(job["id"]))
        return str(job["id"])

    def round(self) -> None:
        """What the loop's tick does, placing every time (`Controller.tick` without its clock)."""
        c = self.svc.controller
        c.monitor()
        c._in_grace = c.preempter.step()
        c.poll()
        c.schedule()

    def work(self, pick: int) -> None:
        todo = self.svc.store.slices_to_work()
        if todo:
            slice_id, state, _tenant = todo[pick % len(todo)]
            self.svc.controller._work(slice_id, state)

    def end(self, pick: int, code: int) -> None:
        """A running task exits with `code` while its slice runs (not one a fault already sends to teardown:
        `test_an_exit_during_teardown_is_not_run_again` is that case)."""
        live = {sid for sid, _ in self.svc.store.running_slices()}
        running = [h for h in self.runs.running() if h in live]
        if running:
            handle = running[pick % len(running)]
            job = self.runs.runs[handle].spec.job_id
            self.engine.end(handle, code)
            if code == 0:
                self.launches_at_finish.setdefault(job, len(self.runs.launches.get(job, [])))

    def restart(self) -> None:
        self.svc.close()
        self.svc = open_service(self.config)

    # --- the checks --------------------------------------------------------------------------
    def over_committed(self) -> list[str]:
        snapshot = self.svc.store.cluster()
        used: Counter[str] = Counter()
        memory: Counter[str] = Counter()
        held: Counter[str] = Counter()
        for a in snapshot.allocations:
            used[a.machine] += a.cpus
            memory[a.machine] += a.memory_gb
            held.update(a.devices)
        bad = [f"{m.name}: {used[m.name]} cpus of {m.cpus}" for m in snapshot.machines if used[m.name] > m.cpus + 1e-9]
        bad += [f"{m.name}: {memory[m.name]} GB of {m.memory_gb}" for m in snapshot.machines
                if memory[m.name] > m.memory_gb + 1e-9]
        return bad + [f"{d} held {n} times" for d, n in held.items() if n > 1]

    def leaks(self) -> list[str]:
        live = {r.id: r for r in self.svc.store.live_slices()}
        return device_leaks(self.svc.store, self.svc.fabric, live)

    def changed_ends(self) -> list[str]:
        bad = []
        for j in self.svc.store.job_summaries():
            if j.id in self.ended and j.state != self.ended[j.id]:
                bad.append(f"job {j.id} ended {self.ended[j.id]} and is now {j.state} ({j.reason})")
            elif j.state.final:
                self.ended[j.id] = j.state
        return bad

    def reruns(self) -> list[str]:
        return [f"job {job} finished (exit 0) and was launched again ({self.runs.launches[job]})"
                for job, n in self.launches_at_finish.items() if len(self.runs.launches.get(job, [])) > n]


def reservation_problems(rounds: list[Round]) -> list[str]:
    """Rounds that reserved for a head held back by its own tenant's quota."""
    bad = []
    for r in rounds:
        if r.head is None or r.reservation is None:
            continue
        reasons = [u for u in r.decisions.unplaced if u.job == r.head and u.reason == Reason.QUOTA]
        if reasons:
            bad.append(f"a reservation for {r.head}, which waits for its own quota: {reasons[0].message}")
    return bad


class ChaosMachine(RuleBasedStateMachine):
    #: Whether the checks of the bugs issue 21 names (reproductions 2 and 5) are made.
    known_bugs_checked = True

    def __init__(self) -> None:
        global IDS
        super().__init__()
        ROUNDS.clear()
        IDS = itertools.count()
        self.world = World()

    def teardown(self) -> None:
        self.world.close()

    @rule(tenant=st.sampled_from(["qa", "qb", "qc", "free"]), count=st.integers(1, 2), gpu=st.integers(0, 2),
          nvme=st.integers(0, 1))
    def submit(self, tenant: str, count: int, gpu: int, nvme: int) -> None:
        self.world.submit(tenant, count, gpu, nvme)

    @initialize(shapes=st.lists(st.tuples(st.sampled_from(["qa", "qb", "qc", "free"]), st.integers(1, 2),
                                          st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=4))
    def some_jobs_run(self, shapes: list[tuple[str, int, int, int]]) -> None:
        """Start with jobs placed and running, so that the steps find work to hurt."""
        for shape in shapes:
            self.world.submit(*shape)
        self.settle()

    @rule(part=st.sampled_from(DEVICES + LINKS), fail=st.booleans())
    def fail_or_repair(self, part: str, fail: bool) -> None:
        """Any device or link, used or not."""
        if part.startswith("up:"):
            self.world.svc.jobs.set_link(part, "fail" if fail else "repair")
        else:
            self.world.svc.jobs.set_device(part, "fail" if fail else "repair")

    @rule(pick=st.integers(0, 1000), link=st.booleans())
    def hurt_live_work(self, pick: int, link: bool) -> None:
        """A fault where it hurts: a device a live slice holds, or a link on the path of one."""
        store = self.world.svc.store
        if link:
            used = sorted({lk for r in store.live_slices() for t, d in r.placement.devices()
                           for lk in (f"up:{t.machine}", f"up:{d.location}")})
            if used:
                self.world.svc.jobs.set_link(used[pick % len(used)], "fail")
        else:
            held = sorted(store.held_devices())
            if held:
                self.world.svc.jobs.set_device(held[pick % len(held)], "fail")

    @precondition(lambda self: bool(self.world.jobs))
    @rule(pick=st.integers(0, 1000))
    def cancel(self, pick: int) -> None:
        self.world.svc.jobs.cancel(self.world.jobs[pick % len(self.world.jobs)])

    @rule()
    def round(self) -> None:
        self.world.round()

    @rule(pick=st.integers(0, 1000))
    def work(self, pick: int) -> None:
        self.world.work(pick)

    @rule()
    def settle(self) -> None:
        """A round, then every slice's work: what a few ticks of the loop do."""
        self.world.round()
        for _ in range(len(self.world.svc.store.slices_to_work())):
            self.world.work(0)

    @rule(pick=st.integers(0, 1000), code=st.sampled_from([0, 0, 0, 1]))
    def end(self, pick: int, code: int) -> None:
        self.world.end(pick, code)

    @rule()
    def restart(self) -> None:
        self.world.restart()

    @invariant()
    def nothing_over_committed(self) -> None:
        assert self.world.over_committed() == []

    @invariant()
    def no_device_leaked(self) -> None:
        assert self.world.leaks() == []

    @invariant()
    def ended_jobs_stay_ended(self) -> None:
        assert self.world.changed_ends() == []

    @invariant()
    def finished_work_is_final(self) -> None:
        if self.known_bugs_checked:
            assert self.world.reruns() == []

    @invariant()
    def reservations_only_for_jobs_not_blocked_by_their_quota(self) -> None:
        found = reservation_problems(ROUNDS)
        ROUNDS.clear()
        if self.known_bugs_checked:
            assert found == []


@pytest.fixture
def recorded_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's rounds recorded (for the reservations' check), and ids counted, not drawn."""
    monkeypatch.setattr(loop_module, "place_round", _recording_place_round)
    for module in (store_jobs, store_plans, store_compositions):
        monkeypatch.setattr(module, "new_id", _counted_id)


#: About 30 s on a quiet machine.
MACHINE_SETTINGS = settings(max_examples=15, stateful_step_count=40, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.usefixtures("recorded_rounds")
def test_the_chaos_machine_keeps_every_invariant() -> None:
    run_state_machine_as_test(ChaosMachine, settings=MACHINE_SETTINGS)


# --- what the machine found, shrunk, as plain regression tests ----------------------------------------------


@pytest.fixture
def world(recorded_rounds: None) -> Any:
    w = World()
    yield w
    w.close()


def _running(world: World, tenant: str = "free", gpu: int = 1, nvme: int = 0) -> str:
    job = world.submit(tenant, 1, gpu, nvme)
    assert job is not None
    world.round()
    world.work(0)
    assert world.runs.running(), "the job's task runs"
    return job


def test_a_task_that_exited_0_is_not_run_again_after_a_later_link_fault(world: World) -> None:
    """Found by the machine (and reproduction 5 of issue 21): the task exits 0, then, before the loop polls it,
    the link to its device drops; the slice is torn down and the job re-queued, and it runs a second time."""
    job = _running(world)
    world.end(0, 0)
    world.svc.jobs.set_link("up:iobox0", "fail")
    world.svc.jobs.set_link("up:iobox0", "repair")
    for _ in range(3):
        world.round()
        world.work(0)
    assert world.reruns() == []
    assert {j.id: j.state for j in world.svc.store.job_summaries()}[job] == "completed"


def test_an_exit_during_teardown_is_not_run_again(world: World) -> None:
    """Found by the machine, shrunk: a device of the running slice fails (the slice goes to teardown); the task
    exits 0 before the teardown stops it; the teardown then finds its exit record, and still re-queues the
    job, which runs again."""
    job = _running(world, nvme=1, gpu=0)
    world.svc.jobs.set_device(sorted(world.svc.store.held_devices())[0], "fail")
    handle = world.runs.running()[0]
    world.engine.end(handle, 0)
    world.launches_at_finish[job] = len(world.runs.launches[job])
    for _ in range(3):
        world.round()
        world.work(0)
    assert world.reruns() == []


def test_a_job_waiting_for_its_own_quota_reserves_nothing(world: World) -> None:
    """Found by the machine (and reproduction 2 of issue 21): qa (quota 1 GPU) runs a GPU job; its second GPU
    job waits for qa's quota, starves (W >= starvation_rounds), and is given a reservation on the idle
    cluster, which then holds a GPU against every other tenant's jobs."""
    _running(world, "qa")
    world.submit("qa", 1, 1, 0)
    world.submit("free", 1, 1, 0)
    ROUNDS.clear()
    for _ in range(4):
        world.round()
    assert reservation_problems(ROUNDS) == []
