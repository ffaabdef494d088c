"""`disagg bench controller` runs end to end on a tiny cluster (its speeds are printed, never asserted),
summarizes what it measured consistently, and refuses bad options naming them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from disagg.bench.controller import ControllerOptions, cluster_spec, run_controller_bench, summarize
from disagg.model.spec import parse_cluster


def test_the_synthetic_cluster_is_a_valid_spec() -> None:
    cluster = parse_cluster(cluster_spec(81, 2))
    assert len(cluster.machines) == 81 and len(cluster.pools) == 3  # racks of 40: 40 + 40 + 1
    assert sum(1 for d in cluster.devices if d.kind == "gpu") == 81 * 2 + 3 * 8


def test_summarize_counts_what_was_placed_during_and_after_the_submissions() -> None:
    sent = {"a": 100.0, "b": 100.5, "c": 101.0, "d": 101.5}
    placed = {"a": 100.2, "b": 101.5, "c": 103.0, "other": 100.1}  # d never placed; "other" is not ours
    r = summarize(sent, placed, wall0=100.0, wall1=102.0)
    assert r["placed"] == 3 and r["placed_during_submissions"] == 2 and r["unplaced_by_end"] == 1
    assert r["placed_per_s"] == 1.0 and r["placed_per_s_with_drain"] == 1.0
    assert r["submit_to_placed_s"] == {"p50": 1.0, "p90": 2.0, "p99": 2.0, "max": 2.0}


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 5])
def test_a_tiny_run_places_what_it_accepted(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from disagg.bench import controller

    collecting: list[bool] = []  # whether the benchmark's own collector was on as each request went
    post = controller._post
    monkeypatch.setattr(controller, "_post", lambda *a: (collecting.append(gc.isenabled()), post(*a))[1])
    opts = ControllerOptions(machines=200, rate=40, clients=2, seconds=5, window=200, backfill=0, round_gap_s=0.1,
                             tick_s=0.05, drain_s=60, batch=batch)
    r = run_controller_bench(opts)
    assert collecting and not any(collecting) and gc.isenabled()  # off while the clients stamp and post; on after
    assert r["accepted"] % batch == 0 and r["options"]["batch"] == batch
    assert r["store"] == "sqlite" and r["errors"] == {}
    assert 0 < r["accepted"] == r["submitted"]
    assert sum(r["jobs_by_state"].values()) == r["accepted"]  # every 201 is a stored job
    # jobs run to an end while the clients submitted (`true` ends at once): no more than were placed, nor
    # than had ended by the run's end; the rate is that count over the submissions' seconds
    ended_by_end = sum(n for s, n in r["jobs_by_state"].items() if s in ("completed", "failed", "cancelled"))
    assert 0 < r["ended_during_submissions"] <= min(r["placed"], ended_by_end)
    assert abs(r["ended_per_s"] * r["submit_seconds"] - r["ended_during_submissions"]) <= 1
    assert r["placed_during_submissions"] <= r["placed"] <= r["accepted"]
    assert r["placed"] == r["accepted"] and r["unplaced_by_end"] == 0  # 200 machines hold 200 tiny jobs at once
    lat = r["submit_to_placed_s"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert r["rounds"]["with_drain"] >= r["rounds"]["during_submissions"] > 0 and r["rounds"]["mean_round_s"] > 0
    assert isinstance(r["target_met"], bool) and r["target_met"] is False  # 40 jobs/s is not 1,000
    # both processes of the server, each read at start-up, after the submissions and after the drain
    mem = r["memory_mb"]
    assert set(mem) == {"api", "loop"}
    for row in mem.values():
        assert min(row["after_startup"], row["after_submissions"], row["after_drain"]) > 0
        assert row["peak"] >= max(row["after_startup"], row["after_submissions"], row["after_drain"])


@pytest.mark.parametrize(("args", "named"), [
    (["--db", "mysql"], "--db"),
    (["--machines", "0"], "--machines"),
    (["--rate", "-5"], "--rate"),
    (["--policy", "nope"], "--policy"),
    (["--batch", "0"], "--batch"),
    (["--batch", "101"], "--batch"),
])
def test_bad_options_exit_2_naming_the_option(args: list[str], named: str) -> None:
    out = subprocess.run([sys.executable, "-m", "disagg.cli", "bench", "controller", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and named in out.stderr


def test_a_benchmarks_directory_is_removed_once_the_runners_stop_writing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's runner that outlives the killed controller writes its exit record while the directory is
    being removed: the removal fails with "Directory not empty" (seen in the suite) and is tried again."""
    import errno
    import shutil

    from disagg.bench.crash import remove_when_quiet

    root = tmp_path / "bench"
    (root / "state" / "s-1").mkdir(parents=True)
    (root / "state" / "s-1" / "exit").write_text("0\n")
    real, calls = shutil.rmtree, list[Path]()

    def racing(path: Path, *args: Any, **kwargs: Any) -> None:  # the first two tries lose the race with a runner
        calls.append(path)
        if len(calls) <= 2 and not kwargs.get("ignore_errors"):
            raise OSError(errno.ENOTEMPTY, "Directory not empty", "s-1")
        real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", racing)
    remove_when_quiet(root, timeout_s=5.0)
    assert not root.exists() and len(calls) == 3
    remove_when_quiet(root)  # (gone already: nothing to do, no error)


def test_a_metrics_page_that_is_not_200_is_reported_with_the_servers_log(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded PostgreSQL run once got "Internal Server Error" from GET /metrics, and the benchmark died
    parsing it as Prometheus text ("could not convert string to float: 'Server'"), the log gone with its
    directory. The answer's status and the log's end are what it says now."""
    import httpx

    from disagg.bench import controller

    (tmp_path / "server.log").write_text("... the cause, as the server logged it\n")
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(500, text="Internal Server Error"))
    with pytest.raises(RuntimeError, match=r"answered 500 \('Internal Server Error'\).*the cause, as the server"):
        controller._round_metrics("http://127.0.0.1:1", tmp_path)
    text = "# TYPE disagg_placement_round_seconds histogram\ndisagg_placement_round_seconds_count 3.0\n" \
           "disagg_placement_round_seconds_sum 1.5\n"
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, text=text))
    assert controller._round_metrics("http://127.0.0.1:1", tmp_path) == {"count": 3.0, "sum": 1.5}


def test_memory_is_read_per_process_and_its_peak_kept() -> None:
    import os

    from disagg.bench.controller import memory_over, process_memory

    mine = process_memory(os.getpid())
    assert mine is not None and 0 < mine["rss"] <= mine["peak"]
    assert process_memory(2**22 + 7) is None  # no such process
    out = memory_over({"after_startup": {"api": {"rss": 100.0, "peak": 120.0}, "loop": {"rss": 90.0, "peak": 95.0}},
                       "after_drain": {"api": {"rss": 110.0, "peak": 125.0}, "loop": None}})
    assert out == {"api": {"after_startup": 100.0, "after_drain": 110.0, "peak": 125.0},
                   "loop": {"after_startup": 90.0, "after_drain": None, "peak": 95.0}}
