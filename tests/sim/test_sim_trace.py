"""Trace files: our CSV, Alibaba PAI 2020 and Microsoft Philly excerpts; bad rows name line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.profiles import RODINIA
from disagg.sim.trace import DEFAULT_SLO_FACTOR, TraceError, detect_format, read_trace

HEADER = "job_id,submit_s,image,tasks,cpus,memory_gb,gpu,nvme,duration_s,slo_s,importance\n"


def test_csv_trace_reads_values_and_defaults(data: Path) -> None:
    subs = {s.job.name: s for s in read_trace(data / "jobs.csv")}
    assert list(subs) == ["a1", "a2", "a3", "cpu1", "a4"]
    a1 = subs["a1"]
    assert a1.base_s == RODINIA["nw"].base_s  # empty duration: the profile's base time
    assert a1.job.slo_s == pytest.approx(RODINIA["nw"].base_s * DEFAULT_SLO_FACTOR)
    a2 = subs["a2"].job
    assert (a2.slo_s, a2.importance, subs["a2"].base_s) == (150.0, 2.0, 120.0)
    a3 = subs["a3"].job
    assert (a3.tasks.count, a3.tasks.cpus, a3.tasks.wants("gpu")) == (2, 2.0, 1)
    cpu1 = subs["cpu1"]
    assert cpu1.job.tasks.kinds == () and cpu1.base_s == 300.0
    a4 = subs["a4"].job
    assert (a4.tasks.count, a4.tasks.cpus, a4.tasks.memory_gb, a4.importance) == (1, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("row", "column", "value"),
    [
        ("b1,1.0,rodinia/nw,1,two,8,1,0,,,", "cpus", "two"),
        ("b1,-3,rodinia/nw,1,2,8,1,0,,,", "submit_s", "-3"),
        ("b1,,rodinia/nw,1,2,8,1,0,,,", "submit_s", ""),
        ("b1,1,rodinia/nw,1.5,2,8,1,0,,,", "tasks", "1.5"),
        ("b1,1,rodinia/nw,1,2,8,-1,0,,,", "gpu", "-1"),
        ("b1,1,mystery/app,1,2,8,1,0,,,", "duration_s", ""),
        ("b1,1,rodinia/nw,1,2,8,1,0,100,0,", "slo_s", "0"),
        ("b1,1,rodinia/nw,1,2,8,1,0,,,11", "importance", "11"),
        ("b 1,1,rodinia/nw,1,2,8,1,0,,,", "job_id", "b 1"),
        ("b1,1,rodinia/nw,1,2,nan,1,0,,,", "memory_gb", "nan"),
    ],
    ids=["word", "negative", "missing", "fraction", "negative-gpu", "no-profile", "zero-slo", "importance",
         "bad-name", "nan"],
)
def test_a_bad_csv_cell_names_file_line_column_and_value(tmp_path: Path, row: str, column: str,
                                                           value: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "ok,0,rodinia/nw,1,2,8,1,0,,,\n" + row + "\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message
    assert f"line 3, column {column!r}: value {value!r}" in message


def test_csv_problems_are_all_reported_and_duplicates_caught(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "x,0,rodinia/nw,1,2,8,1,0,,,\nx,1,rodinia/nw,1,2,8,1,0,,,\ny,zz,rodinia/nw,1,q,8,1,0,,,\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    problems = info.value.problems
    assert any("line 3, column 'job_id'" in p and "duplicate" in p for p in problems)
    assert any("line 4, column 'submit_s'" in p for p in problems)
    assert any("line 4, column 'cpus'" in p for p in problems)


def test_csv_header_must_have_the_documented_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,colour\nx,0,red\n")
    with pytest.raises(TraceError, match=r"column 'colour'.*unknown column; allowed: job_id, submit_s"):
        read_trace(path)


def test_pai_task_table_excerpt(data: Path) -> None:
    path = data / "pai_task_table.csv"
    assert detect_format(path) == "pai"
    subs = read_trace(path)
    names = [s.job.name for s in subs]
    assert len(subs) == 4  # the Waiting row never ran
    first = subs[0]
    assert first.job.submit_s == 0.0 and first.base_s == 556.0
    assert first.job.tasks.cpus == 6.0 and first.job.tasks.wants("gpu") == 1  # 50% of a GPU → one device
    worker = next(s for s in subs if s.job.name.endswith(".worker"))
    assert worker.job.tasks.count == 4 and worker.job.tasks.wants("gpu") == 1
    assert worker.job.submit_s == pytest.approx(46.0)
    ps = next(s for s in subs if s.job.name.endswith(".ps"))
    assert ps.job.tasks.kinds == ()
    assert any(n.endswith(".PyTorchWorker") for n in names)


def test_pai_bad_number_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pai.csv"
    path.write_text("j1,worker,1.0,Terminated,100.0,200.0,lots,29.3,100.0,V100\n")
    with pytest.raises(TraceError, match=r"line 1, column 'plan_cpu': value 'lots'"):
        read_trace(path, "pai")


def test_philly_excerpt(data: Path) -> None:
    path = data / "philly_cluster_job_log.json"
    assert detect_format(path) == "philly"
    subs = read_trace(path)
    assert len(subs) == 2  # the job with no attempts never ran
    one, two = subs
    assert one.job.submit_s == 0.0 and one.base_s == pytest.approx(33 * 60 + 42)
    assert (one.job.tasks.count, one.job.tasks.wants("gpu")) == (1, 2)
    assert two.job.submit_s == pytest.approx(5 * 60 + 56)
    assert (two.job.tasks.count, two.job.tasks.wants("gpu")) == (2, 2)  # last attempt: 2 machines × 2 GPUs
    assert two.base_s == pytest.approx(30 * 60)


def test_philly_bad_time_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('[\n {"jobid": "a", "submitted_time": "2017-10-07 17:29:04", "attempts": []},\n'
                    ' {"jobid": "b", "submitted_time": "yesterday", "attempts": []}\n]\n')
    with pytest.raises(TraceError, match=r"line 3, column 'submitted_time': value 'yesterday'"):
        read_trace(path)


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na"])
def test_a_trace_of_short_runs_of_a_profiled_image_does_not_wait_for_its_profile(tmp_path: Path, policy: str) -> None:
    """Runs of `rodinia/nw` that take 10 s in the trace (SLO 12 s, 1.2x) while its profile says 200 s: the
    policies read the SLO as the profile's local time (`cost.goal_s`). Read as given, no placement met it,
    so each job waited until W outgrew a miss of 16x its goal: 620 s on average for 300 such jobs on
    paper-16m (at ad257fc), against 2.3 s now."""
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, simulate
    from disagg.sim.metrics import summarize
    from disagg.sim.scenarios import get_scenario

    rows = [f"t{i},{2.0 * i},rodinia/nw,1,4,16,1,0,10,,1" for i in range(40)]
    path = tmp_path / "short.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    subs = read_trace(path)
    assert all(s.job.slo_s == pytest.approx(10 * DEFAULT_SLO_FACTOR) for s in subs)
    result = simulate(get_scenario("paper-16m-512j").cluster(), subs, get_policy(policy), 1, SimConfig(interval_s=5.0))
    summary = summarize(result, 1)
    assert summary["completed"] == 40
    assert summary["mean_wait_s"] < 10.0, summary["mean_wait_s"]  # two rounds of 5 s at most, on average


def test_a_csv_saved_by_a_spreadsheet_reads_as_csv(tmp_path: Path) -> None:
    """A byte-order mark first and CRLF line ends (Excel's "CSV UTF-8"): read as our CSV, not taken for a
    PAI table because the first column's name began with the mark."""
    path = tmp_path / "t.csv"
    path.write_bytes(("\ufeff" + HEADER + "a1,0,rodinia/nw,1,2,8,1,0,,,\n").replace("\n", "\r\n").encode())
    [sub] = read_trace(path)
    assert sub.job.name == "a1" and sub.job.tasks.devices == {"gpu": 1}


@pytest.mark.parametrize("data", [bytes(range(200, 256)) * 4, "job_id,submit_s\n".encode("utf-16")],
                         ids=["binary", "utf-16"])
@pytest.mark.parametrize("name", ["t.csv", "t.json"])
def test_a_file_that_is_not_utf8_text_is_named_not_a_traceback(tmp_path: Path, data: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TraceError, match=r"not UTF-8 text: byte 0x[0-9a-f]{2} at offset \d+.*save the trace as UTF-8"):
        read_trace(path)


def test_a_column_named_twice_is_refused(tmp_path: Path) -> None:
    """Which of the two cells a row's value came from would be the reader's guess."""
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,duration_s,submit_s\nx,0,10,5\n")
    with pytest.raises(TraceError, match=r"column 'submit_s'.*may appear once; it is columns 2, 4"):
        read_trace(path)


@pytest.mark.parametrize(("name", "text", "why"), [
    ("t.csv", "", "the file is empty"),
    ("t.csv", "job_id,submit_s,duration_s\n", "read as csv: a header and no rows"),
    ("t.csv", "j1,t1,1,Waiting,,,100,8,100,V100\n", "read as pai: no row with both a start_time and an end_time"),
    ("t.json", "[]", "read as philly: no job with an attempt that started and ended"),
], ids=["empty", "header-only", "pai-never-ran", "philly-empty-list"])
def test_a_trace_without_a_job_is_an_error_not_an_empty_run(tmp_path: Path, name: str, text: str, why: str) -> None:
    """A run of nothing printed a table of zeros and exited 0: most likely the wrong file."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert info.value.problems == [f"no job to simulate ({why})"]


@pytest.mark.parametrize("column", ["submit_s", "duration_s", "slo_s"])
def test_a_time_past_ten_billion_seconds_is_refused_naming_the_bound(tmp_path: Path, column: str) -> None:
    """At 10¹⁸ s a job's 10 s of run time vanished in rounding: it "finished" as it arrived, and the results
    were nonsense that looked like numbers. 10¹⁰ s (317 years) is still read."""
    row = {"job_id": "x", "submit_s": "0", "duration_s": "10", "slo_s": "20"}
    path = tmp_path / "t.csv"
    path.write_text(",".join(row) + "\n" + ",".join({**row, column: "1e18"}.values()) + "\n")
    with pytest.raises(TraceError, match=rf"line 2, column '{column}': value '1e18' is not allowed: must be a "
                                         r"number [>=]+ 0 and <= 1e\+10"):
        read_trace(path)
    path.write_text(",".join(row) + "\n" + ",".join({**row, column: "1e10"}.values()) + "\n")
    assert len(read_trace(path)) == 1
