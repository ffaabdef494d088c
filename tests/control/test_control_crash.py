"""kill -9 of the controller at random moments while slices compose and tasks run (50 trials here;
`disagg bench crash --trials N` runs more). What is killed, when, and what is checked after each
kill: `disagg.bench.crash`."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

import pytest

from disagg.bench.crash import ServerExited, _Trials, event_violations, run_crash_trials
from disagg.cli.serve import serve_main
from disagg.store.pgtemp import TempPostgres

TRIALS = int(os.environ.get("DISAGG_CRASH_TRIALS", "50"))


@pytest.mark.slow
def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    result = run_crash_trials(tmp_path, serve_main, trials=TRIALS, seed=5, scale=0.01)
    assert result["violations"] == []
    assert result["kills"] == TRIALS and result["checks"] >= TRIALS // 2
    assert result["jobs"] >= TRIALS // 2 and result["slices"] >= result["jobs"]
    assert result["runs_per_job"]["min"] >= 1
    print(result)


@pytest.mark.usefixtures("run_by_hand")
def test_the_crash_bench_needs_no_allowance_from_the_suite(tmp_path: Path) -> None:
    """tests/conftest.py allows jobs on the store's disk for every controller; `disagg bench crash` run by
    hand has no such setting, and its checks (an `open_service` in this process) refused its store in /tmp."""
    result = run_crash_trials(tmp_path, serve_main, trials=2, seed=3, scale=0.01)
    assert result["violations"] == [] and result["kills"] == 2 and result["checks"] >= 2


def test_the_event_check_catches_a_job_that_ran_twice_at_once(tmp_path: Path) -> None:
    """The check above must be able to fail: overlapping runs of one job are reported."""
    events = tmp_path / "events"
    events.write_text("start j-1 s-a 0 10.0\nstart j-1 s-b 0 11.0\nend j-1 s-a 0 12.0\nend j-1 s-b 0 13.0\n"
                      "start j-2 s-c 0 10.0\nend j-2 s-c 0 11.0\nstart j-2 s-d 0 11.5\nend j-2 s-d 0 12.0\n")
    bad, runs = event_violations(events, {"j-1", "j-2", "j-3"})
    assert bad == ["job j-3 never ran", "job j-1 ran twice at the same time"]
    assert runs == {"j-1": 2, "j-2": 2}


@pytest.mark.slow
def test_kill_9_with_a_postgresql_store(tmp_path: Path, pg_server: TempPostgres) -> None:
    """The same trials with the store on a real PostgreSQL server (which survives the kills)."""
    trials = max(6, TRIALS // 5)
    result = run_crash_trials(tmp_path, serve_main, trials=trials, seed=7, scale=0.01,
                              db=pg_server.create_database("crash_" + uuid.uuid4().hex[:8]))
    assert result["store"] == "postgresql" and result["violations"] == []
    assert result["kills"] == trials and result["jobs"] >= trials // 2
    assert result["runs_per_job"]["min"] >= 1


class _FlakyServer:
    """A server whose first starts end on their own with `logs` (one per start), then answers."""

    def __init__(self, logs: list[str]) -> None:
        self.logs, self.starts = logs, 0

    def start(self) -> None:
        self.starts += 1

    def ready(self) -> None:
        if self.starts <= len(self.logs):
            raise ServerExited(self.logs[self.starts - 1])


def test_a_server_that_steps_down_before_it_answers_is_started_again_and_any_other_exit_is_an_error(
        tmp_path: Path) -> None:
    lapsed = "disagg: stepping down: the lease of epoch 12 lapsed before an action"
    server = _FlakyServer([lapsed])
    trials = _Trials(server, None, {}, tmp_path / "events", random.Random(1))  # type: ignore[arg-type]
    server.start()
    trials.ready()
    assert server.starts == 2 and trials.restarted == 1     # started again once, as a supervisor would
    broken = _FlakyServer(["error: the store at sqlite:///x cannot be opened"])
    broken.start()
    with pytest.raises(ServerExited, match="cannot be opened"):
        _Trials(broken, None, {}, tmp_path / "events", random.Random(1)).ready()  # type: ignore[arg-type]
    endless = _FlakyServer([lapsed] * 5)   # a server that never stays up is not restarted for ever
    endless.start()
    with pytest.raises(ServerExited, match="lapsed"):
        _Trials(endless, None, {}, tmp_path / "events", random.Random(1)).ready()  # type: ignore[arg-type]
    assert broken.starts == 1 and endless.starts == 3
