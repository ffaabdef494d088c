"""`Replanning._stretch` writes the execution model's factors out for speed: it must agree with
`execution.task_stretch` to the bit (a finish time one ulp off would change a run)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from disagg.profiles import Profile, expected_s
from disagg.sim.execution import path_factor, task_stretch
from disagg.sim.kernel import Kernel, Priority
from disagg.sim.records import Event, JobFinished
from disagg.sim.replan import Replanning, plan_of
from disagg.sim.simcluster import Grant, Running, SimTask


def _reference(state: SimpleNamespace, run: Running) -> tuple[float, float]:
    """The stretch as the model's functions compute it (the loop `_stretch` replaced), and the mean of
    the remote devices' loads, each capped at 1."""
    worst, loads = 1.0, []
    for t in run.tasks:
        for g in t.transfer:
            if g.peers and not g.remote:
                g.pcie = sum(state.link_share.get(p, 0.0) for p in g.peers)
        for g in t.remote_transfer:
            g.load = max([0.0, *((state.link_used[lk] - run.own_traffic.get(lk, 0.0)) / cap
                                 for lk, cap in zip(g.links, g.caps, strict=True))])
            loads.append(min(g.load, 1.0))
        total = state.machines[t.machine].cpus
        others = (state.cpu_used[t.machine] - t.cpus) / total if total > 0 else 0.0
        cache = t.memory_gb / (t.memory_gb + t.remote_memory_gb) if t.remote_memory_gb > 0.0 else None
        worst = max(worst, task_stretch(run.profile, t.transfer, others, cache))
    return worst, (sum(loads) / len(loads) if loads else 0.0)


def _case(rng: random.Random, one_path: bool = False, one_local: bool = False) -> tuple[SimpleNamespace, Running]:
    """A random cluster use and run; `one_path`: of the commonest shape (`replan.one_path_stretch`);
    `one_local`: of the next (`simcluster.OneLocal`)."""
    one = one_path or one_local
    links = [f"l{i}" for i in range(4)]
    state = SimpleNamespace(
        link_used={lk: rng.uniform(0.0, 30.0) for lk in links},
        # (a negative share and loads past 1 reach the clamps of pcie_factor and link_load_factor)
        link_share={d: rng.uniform(-0.2, 1.2) for d in range(8) if rng.random() < 0.6},
        cpu_used=[rng.uniform(0.0, 40.0) for _ in range(3)],
        machines=[SimpleNamespace(cpus=rng.choice([0.0, 16.0, 32.0])) for _ in range(3)])
    tasks = []
    for i in range(1 if one else rng.randint(1, 3)):
        grants = []
        for d in range(1 if one else rng.randint(0, 4)):
            remote = one_path or (not one_local and rng.random() < 0.5)
            path = tuple(rng.sample(links, rng.randint(1, 3))) if remote else ()
            caps = tuple(rng.choice([1.0, 10.0, 25.0]) for _ in path)
            grants.append(Grant(d, remote, path, 1.0, "gpu", caps, min(caps, default=10.0),
                                peers=() if remote else tuple(rng.sample(range(8), rng.randint(0, 2)))))
        t = SimTask(f"t{i}", rng.randrange(3), rng.uniform(1.0, 16.0), rng.uniform(1.0, 64.0), grants)
        t.remote_transfer = [g for g in grants if g.remote]
        t.transfer = [g for g in grants if not g.remote] + t.remote_transfer
        t.remote_memory_gb = 0.0 if one else rng.choice([0.0, 0.0, rng.uniform(0.1, 32.0)])
        tasks.append(t)
    profile = Profile("x", 100.0, rng.choice([0.0, rng.uniform(0.01, 0.9)]), rng.uniform(1.0, 3.0),
                      rng.uniform(0.0, 2.0), 1.0)
    for t in tasks:  # as the engine makes them: a remote grant's path factor for its holder's profile
        for g in t.remote_transfer:
            g.path_factor = path_factor(profile, g.bottleneck_gbps)
    run = Running(None, SimpleNamespace(name="j"), profile, tasks, 0.0, 100.0, 1.0, 0.0)  # type: ignore[arg-type]
    run.own_traffic = {lk: rng.uniform(0.0, 5.0) for lk in links if rng.random() < 0.3}
    return state, run


@pytest.mark.parametrize("seed", range(200))
def test_stretch_matches_the_model_to_the_bit(seed: int) -> None:
    state, run = _case(random.Random(seed))
    fast = Replanning._stretch(SimpleNamespace(state=state), run)  # type: ignore[arg-type]
    assert fast == _reference(state, run)


@pytest.mark.parametrize("seed", range(200))
def test_the_one_path_stretch_matches_the_model_to_the_bit(seed: int) -> None:
    state, run = _case(random.Random(seed), one_path=True)
    assert plan_of(run, state.machines).one is not None
    fast = Replanning._stretch(SimpleNamespace(state=state), run)  # type: ignore[arg-type]
    assert fast == _reference(state, run)


@pytest.mark.parametrize("seed", range(100))
def test_phi_at_the_reported_load_is_the_runs_pace(seed: int) -> None:
    """The load a run reports (what learning observes) is the one at which φ explains its pace: with
    several remote devices on paths of different loads, their mean, not the busiest. A run on a machine
    of its own (no collocation), on reference paths, without remote memory: its stretch is exactly φ's
    over the base. Fails with the busiest device's load whenever two remote paths differ."""
    rng = random.Random(seed)
    links = [f"l{i}" for i in range(4)]
    state = SimpleNamespace(link_used={lk: rng.uniform(0.0, 12.0) for lk in links}, link_share={},
                            cpu_used=[8.0], machines=[SimpleNamespace(cpus=16.0)])
    grants = [Grant(d, remote, (links[d],) if remote else (), 1.0, "gpu", (10.0,) if remote else (), 10.0)
              for d, remote in enumerate([True, rng.random() < 0.7, rng.random() < 0.3, False][:rng.randint(2, 4)])]
    task = SimTask("t0", 0, 8.0, 16.0, grants)
    task.remote_transfer = [g for g in grants if g.remote]
    task.transfer = [g for g in grants if not g.remote] + task.remote_transfer
    profile = Profile("x", 100.0, rng.uniform(0.05, 0.9), rng.uniform(1.0, 3.0), rng.uniform(0.0, 5.0), 1.0)
    for g in task.remote_transfer:
        g.path_factor = path_factor(profile, g.bottleneck_gbps)
    run = Running(None, SimpleNamespace(name="j"), profile, [task], 0.0, 100.0, 1.0, 0.0)  # type: ignore[arg-type]
    stretch, load = Replanning._stretch(SimpleNamespace(state=state), run)  # type: ignore[arg-type]
    share = len(task.remote_transfer) / len(grants)
    assert stretch == pytest.approx(expected_s(profile, share, load) / profile.base_s, rel=1e-12)
    loads = [min(state.link_used[g.links[0]] / 10.0, 1.0) for g in task.remote_transfer]
    if max(loads) - min(loads) > 0.05:  # the busiest would price the run slower than it ran
        assert expected_s(profile, share, max(loads)) > stretch * profile.base_s * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(50))
def test_the_plan_is_read_once_and_reused(seed: int) -> None:
    """`_reevaluate` keeps a run's plan; the stretch from a kept plan agrees with a fresh one after the
    cluster's use changes (the plan holds only what a run's life does not change)."""
    rng = random.Random(seed)
    state, run = _case(rng)
    run.plan = plan_of(run, state.machines)
    kept = run.plan
    for lk in state.link_used:
        state.link_used[lk] = rng.uniform(0.0, 30.0)
    state.cpu_used = [rng.uniform(0.0, 40.0) for _ in state.cpu_used]
    fast = Replanning._stretch(SimpleNamespace(state=state), run)  # type: ignore[arg-type]
    assert run.plan is kept
    assert fast == _reference(state, run)


def test_a_plan_needs_local_transfer_devices_first() -> None:
    state, run = _case(random.Random(3))
    t = run.tasks[0]
    t.transfer = [Grant(0, True, ("l0",), 1.0, "gpu", (10.0,)), Grant(1, False, (), 0.0)]
    with pytest.raises(ValueError, match="local transfer devices must come first"):
        plan_of(run, state.machines)


@pytest.mark.parametrize(("seed", "learns"), [(s, s % 2 == 0) for s in range(90)])
def test_reevaluate_banks_progress_and_moves_the_finish_to_the_new_pace(seed: int, learns: bool) -> None:
    """`_reevaluate`'s loop (which spells `_stretch` out) against the model: progress banked at the old
    pace, the new stretch and load as `task_stretch` has them, the finish event moved to `now +
    remaining · stretch`; the load integral kept only when learning."""
    rng = random.Random(seed)
    shape = rng.choice(["one_path", "one_local", "any"])
    state, run = _case(rng, one_path=shape == "one_path", one_local=shape == "one_local")
    if shape == "one_local":
        assert plan_of(run, state.machines).local is not None
    run.stretch, run.remaining, run.last_s, run.load_now = 1.5, 100.0, 10.0, 0.25
    kernel: Kernel[Event] = Kernel()
    run.finish_seq = run.entry_seq = kernel.schedule(160.0, Priority.FINISH, JobFinished("j"))
    run.finish_at = run.entry_at = 160.0
    sim = SimpleNamespace(state=state, running={"j": run}, kernel=kernel,
                          knowledge=SimpleNamespace(kind="learned" if learns else "shipped"))
    kernel.now = 40.0
    Replanning._reevaluate(sim, {"j", "gone"}, 40.0)  # type: ignore[arg-type]
    stretch, load = _reference(state, run)
    assert (run.remaining, run.last_s, run.load_now) == (100.0 - 30.0 / 1.5, 40.0, load)
    assert (run.load_area, run.work_done) == ((0.25 * 20.0, 20.0) if learns else (0.0, 0.0))
    if abs(stretch - 1.5) < 1e-12:
        assert (run.stretch, run.finish_seq) == (1.5, 0)
    else:
        assert run.stretch == stretch
        assert run.finish_at == 40.0 + run.remaining * stretch
        # moved later than 160, the first entry stands in for it (`Kernel.deferrals`) until it pops
        assert (run.entry_seq, kernel.deferrals()) == ((0, {0: run}) if run.finish_at >= 160.0 else (1, {}))
        item = kernel.pop()
        assert item is not None and item.seq == run.finish_seq == run.entry_seq == 1
        assert (item.time, item.event) == (40.0 + run.remaining * stretch, JobFinished("j"))


def _one_path_world(seed: int) -> SimpleNamespace:
    """Eight one-path runs on five links and three machines, their traffic in the links' use (over a
    background that may leave every share of a path at or under 0), as `_reevaluate` reads a simulation."""
    rng = random.Random(seed)
    links = [f"l{i}" for i in range(5)]
    used = {lk: rng.choice([0.0, rng.uniform(0.0, 20.0)]) for lk in links}
    cpu_used = [rng.uniform(0.0, 20.0) for _ in range(3)]
    running: dict[str, Running] = {}
    for j in range(8):
        path = tuple(rng.sample(links, rng.randint(1, 4)))
        caps = tuple(rng.choice([10.0, 25.0, 100.0]) for _ in path)
        gbps = rng.choice([0.0, 1.0, rng.uniform(0.5, 8.0)])
        grant = Grant(j, True, path, gbps, "gpu", caps, min(caps))
        task = SimTask(f"t{j}", rng.randrange(3), rng.uniform(1.0, 8.0), 16.0, [grant])
        task.transfer = task.remote_transfer = [grant]
        profile = Profile("x", 100.0, rng.uniform(0.05, 0.9), rng.uniform(1.0, 3.0), rng.uniform(0.0, 2.0), 1.0)
        grant.path_factor = path_factor(profile, grant.bottleneck_gbps)
        run = Running(None, SimpleNamespace(name=f"j{j}"), profile, [task], 0.0, 100.0, 1.0, 0.0)  # type: ignore[arg-type]
        run.own_traffic, run.machines = dict.fromkeys(path, gbps), {task.machine}
        for lk in path:
            used[lk] += gbps
        cpu_used[task.machine] += task.cpus
        running[run.job.name] = run
    state = SimpleNamespace(link_used=used, link_share={}, cpu_used=cpu_used,
                            machines=[SimpleNamespace(cpus=32.0) for _ in range(3)])
    return SimpleNamespace(state=state, running=running, kernel=Kernel(), knowledge=SimpleNamespace(kind="shipped"))


@pytest.mark.parametrize("seed", range(150))
def test_a_release_spares_only_stretches_it_cannot_change(seed: int) -> None:
    """`_reevaluate(..., freed)` after a release against the same call without it (every stretch worked
    out): over starts' added use (visited without `freed`) and runs' releases in random order, every
    run's progress, stretch, load, deciding hop and finish, and the events as they pop, are the same."""
    rng = random.Random(seed)
    spared, full = _one_path_world(seed), _one_path_world(seed)
    for now in range(10, 200, 10):
        names = set(spared.running)
        if rng.random() < 0.3 or len(names) < 2:  # a start elsewhere: more use on a link and a machine
            lk, gbps, m, cpus = f"l{rng.randrange(5)}", rng.uniform(0.0, 10.0), rng.randrange(3), rng.uniform(0.0, 8.0)
            for sim in (spared, full):
                sim.state.link_used[lk] += gbps
                sim.state.cpu_used[m] += cpus
                Replanning._reevaluate(sim, names, float(now))  # type: ignore[arg-type]
        else:
            name = rng.choice(sorted(names))
            for sim, freed in ((spared, True), (full, False)):
                run = sim.running.pop(name)
                for lk, gbps in run.own_traffic.items():
                    sim.state.link_used[lk] = max(0.0, sim.state.link_used[lk] - gbps)
                sim.state.cpu_used[run.tasks[0].machine] -= run.tasks[0].cpus
                sim.kernel.cancel(run.entry_seq)
                Replanning._reevaluate(sim, names - {name}, float(now), run if freed else None)  # type: ignore[arg-type]
        for name, a in spared.running.items():
            b = full.running[name]
            assert (a.remaining, a.last_s, a.stretch, a.load_now, a.top, a.tasks[0].grants[0].load,
                    a.finish_at, a.finish_seq, a.entry_seq) == (
                    b.remaining, b.last_s, b.stretch, b.load_now, b.top, b.tasks[0].grants[0].load,
                    b.finish_at, b.finish_seq, b.entry_seq)
    while (item := spared.kernel.pop()) is not None:
        assert item == full.kernel.pop()
    assert full.kernel.pop() is None
