"""The chaos soak of issue 21, short: `disagg bench chaos` for 75 s of faults on one seed, each invariant a
test (the soak runs once for all of them). `disagg bench chaos --minutes M --seed S` runs the long one;
what is drawn from the seed and what each invariant means: `disagg.bench.chaos` and `chaos_plan`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from control_helpers import TEST_CGROUP  # noqa: F401 - sets the session's cgroup parent for the forked server

from disagg.bench.chaos import MOVING_S, DrainEnd, ended_since, run_chaos, unended_detail
from disagg.bench.chaos_plan import ChaosOptions, Free, fits, make_schedule, rerun_violations
from disagg.cli.serve import serve_main

#: The suite's soak: 75 s of faults, a kill -9 every 20 s or so, a drain of at most 2 minutes.
SOAK = ChaosOptions(seconds=75, seed=3, rate=0.6, kill_every_s=20.0, drain_s=120.0)


@pytest.fixture(scope="module")
def soak() -> dict[str, Any]:
    result = run_chaos(serve_main, SOAK)
    print(result)
    return result


def _holds(soak: dict[str, Any], invariant: str) -> None:
    found = [v["detail"] for v in soak["violations"] if v["invariant"] == invariant]
    assert found == [], f"{invariant}: {found} (replay: {soak['replay']})"


@pytest.mark.slow
def test_the_soak_did_what_it_was_told(soak: dict[str, Any]) -> None:
    """Jobs ran, faults and kills happened: the invariants below were checked against something."""
    assert soak["jobs"]["accepted"] >= 20 and soak["jobs"]["completed"] >= 10
    assert soak["faults"]["devices"] >= 3 and soak["faults"]["links"] >= 2
    assert soak["restarts"] >= 1 and soak["cancels"] >= 3
    assert soak["replay"].startswith("disagg bench chaos --seconds 75 --seed 3 ")
    assert soak["replay"].endswith(" --drain-s 120") and soak["drain"]["settled"]


@pytest.mark.slow
@pytest.mark.parametrize("invariant", ["lost", "leaked", "reservation", "drains"])
def test_an_invariant_of_the_soak(soak: dict[str, Any], invariant: str) -> None:
    _holds(soak, invariant)


@pytest.mark.slow
def test_every_accepted_job_ended(soak: dict[str, Any]) -> None:
    _holds(soak, "ended")


@pytest.mark.slow
def test_no_job_ran_twice(soak: dict[str, Any]) -> None:
    _holds(soak, "ran-twice")


@pytest.mark.slow
@pytest.mark.parametrize("invariant", ["wait", "healthz"])
def test_no_job_waits_while_what_it_fits_is_free(soak: dict[str, Any], invariant: str) -> None:
    _holds(soak, invariant)


# --- the soak's own parts: each check must be able to fail ------------------------------------------------------


def test_a_seed_draws_the_same_schedule(tmp_path: Path) -> None:
    opts = ChaosOptions(seconds=60, seed=11)
    one = make_schedule(opts, ["iobox0/gpu0", "iobox1/nvme0"], ["up:node0"], tmp_path / "e")
    assert one == make_schedule(opts, ["iobox0/gpu0", "iobox1/nvme0"], ["up:node0"], tmp_path / "e")
    other = make_schedule(ChaosOptions(seconds=60, seed=12), ["iobox0/gpu0", "iobox1/nvme0"], ["up:node0"],
                          tmp_path / "e")
    assert one != other
    kinds = {a.kind for a in one}
    assert {"submit", "fail-device", "repair-device", "kill", "cancel"} <= kinds
    fails = [a for a in one if a.kind == "fail-device"]
    assert all(any(r.kind == "repair-device" and r.target == f.target and r.at > f.at for r in one) for f in fails)


def test_a_share_of_the_submissions_set_slos_drawn_apart_from_everything_else(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Tenants' SLOs: one second (no placement meets it: the job's image runs 200 s locally), the local
    time, half again; from a stream of their own, so a seed draws every other action as it did before."""
    from disagg.bench import chaos_plan

    opts = ChaosOptions(seconds=600, seed=11)
    args = (["iobox0/gpu0", "iobox1/nvme0"], ["up:node0"], tmp_path / "e")
    with_slo = make_schedule(opts, *args)
    slos = [a.body["slo_s"] for a in with_slo if a.body and "slo_s" in a.body]
    submissions = [a for a in with_slo if a.kind == "submit"]
    assert 0.15 * len(submissions) < len(slos) < 0.45 * len(submissions)
    assert set(slos) == {1.0, 200.0, 300.0}
    monkeypatch.setattr(chaos_plan, "SLO_SHARE", 0.0)
    without = make_schedule(opts, *args)
    strip = [replace(a, body={k: v for k, v in a.body.items() if k != "slo_s"}) if a.body else a for a in with_slo]
    assert strip == without


def test_fits_sees_free_reachable_devices_room_and_the_own_quota() -> None:
    job = {"tenant": "t", "tasks": {"count": 2, "cpus": 4.0, "memory_gb": 1.0, "gpu": 1}}
    free = Free({"gpu": 2}, {"n0": (4.0, 8.0), "n1": (4.0, 8.0)}, frozenset({"n0", "n1"}))
    assert fits(job, free)
    assert not fits(job, Free({"gpu": 1}, free.room, free.linked))  # one GPU short
    assert not fits(job, Free(free.devices, free.room, frozenset({"n0"})))  # n1's uplink is down
    assert fits(job, Free(free.devices, {"n0": (8.0, 8.0)}, free.linked))  # n0 has room for both tasks
    assert not fits(job, Free(free.devices, {"n0": (6.0, 8.0)}, free.linked))  # but not for both on 6 cpus
    assert fits({**job, "tasks": {**job["tasks"], "gpu": 0}}, Free({}, {"n0": (8.0, 8.0)}, frozenset()))
    assert not fits(job, Free(free.devices, free.room, free.linked, {"t": {"gpu": 2}}, {"t": {"gpu": 1}}))


def test_the_markers_tell_finished_work_run_again_from_a_run_cut_short() -> None:
    cut = "start j1 s1 0 10.0\nstart j1 s2 0 12.0\nend j1 s2 0 13.0\n"  # s1 killed by a fault, no end: fine
    assert rerun_violations(cut, {"j1": 1}, ["j1"]) == []
    again = "start j1 s1 0 10.0\nend j1 s1 0 11.0\nstart j1 s2 0 12.0\nend j1 s2 0 13.0\n"
    assert rerun_violations(again, {"j1": 1}) == ["job j1 finished in slice s1 and ran again in s2"]
    both = "start j1 s1 0 10.0\nstart j1 s2 0 10.5\nend j1 s1 0 11.0\n"
    assert rerun_violations(both, {"j1": 1}) == ["job j1 ran twice at the same time (slices s1 and s2)"]
    gang = "start j2 s1 0 10.0\nstart j2 s1 1 10.0\nend j2 s1 0 11.0\nstart j2 s2 0 12.0\n"  # task 1 never ended
    assert rerun_violations(gang, {"j2": 2}) == []
    assert rerun_violations("", {"j3": 1}, ["j3"]) == ["job j3 completed and never ran"]


def test_the_command_refuses_two_lengths() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "disagg.cli", "bench", "chaos", "--minutes", "1", "--seconds", "5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--minutes and --seconds" in out.stderr


def test_the_replay_names_every_knob_the_verdict_reads() -> None:
    """A soak that failed for want of drain time must replay with that drain time (seed 22 at 5 jobs/s
    on 12 tenants drains in ~250 s: it passes with `--drain-s 600`, and failed with the default 180)."""
    opts = ChaosOptions(seconds=180, seed=22, tenants=12, rate=5.0, latency_scale=0.05, drain_s=600.0)
    assert opts.replay() == ("disagg bench chaos --seconds 180 --seed 22 --tenants 12 --rate 5 "
                             "--latency-scale 0.05 --max-wait-rounds 10 --drain-s 600")


def test_jobs_ended_in_the_drains_last_seconds() -> None:
    history = [(0.0, 10), (20.0, 30), (40.0, 55), (60.0, 70)]
    assert ended_since(history, 60.0) == 70 - 55  # the window starts at 30 s: the sample at 40 s
    assert ended_since(history, 60.0, window=45.0) == 70 - 30
    assert ended_since(history, 60.0, window=100.0) == 70 - 10  # a drain shorter than the window: all of it
    assert ended_since([(0.0, 5), (59.0, 5), (60.0, 5)], 60.0) == 0  # nothing ended: stopped moving
    assert ended_since([], 60.0) == 0


def test_a_drain_out_of_time_calls_jobs_stuck_only_when_nothing_ended_lately() -> None:
    """Seed 22 at 5 jobs/s with the default drain: 53 jobs were called stuck ("the queue drained and it
    did not end") and three slices leaked, while the queue was still moving; given 600 s, every one ended."""
    assert unended_detail(DrainEnd(True, 40.0, 1, 0)) == "the queue drained and it did not end"
    moving = DrainEnd(False, 180.0, 53, 41)
    assert moving.moving and unended_detail(moving) is None
    stopped = DrainEnd(False, 180.0, 53, 0)
    assert not stopped.moving
    assert unended_detail(stopped) == f"the drain ran out after 180 s and no job ended in its last {MOVING_S:g} s"
    assert moving.as_dict() == {"settled": False, "seconds": 180.0, "live_at_end": 53,
                                f"ended_in_last_{MOVING_S:g}_s": 41}
