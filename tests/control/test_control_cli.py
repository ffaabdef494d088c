"""The controller's CLI: `disagg serve` (first start prints the admin token once; config file and
DISAGG_* variables), `disagg token create`, and the clients submit / jobs / logs / slices / machines /
devices against a real server, as tables and as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from control_helpers import Server, admin_token, wait_for
from typer.testing import CliRunner

from disagg.cli import app
from disagg.control.config import load_config
from disagg.control.split import group_gone
from disagg.model import SpecError
from disagg.store import Store

runner = CliRunner()


def test_token_create_prints_the_token_alone(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    refused = runner.invoke(app, ["token", "create", "--db", db, "--tenant", "alice"])
    assert refused.exit_code == 2 and "no store at" in refused.output and not (tmp_path / "d.db").exists()
    Store(db).migrate()  # what `disagg serve` does on its first start
    r = runner.invoke(app, ["token", "create", "--db", db, "--tenant", "alice"])
    assert r.exit_code == 0, r.output
    token = r.stdout.strip()
    assert r.stdout == token + "\n" and token.startswith("dg_")
    who = Store(db).principal(token)
    assert who is not None and who.tenant == "alice" and not who.admin
    r = runner.invoke(app, ["token", "create", "--db", db, "--tenant", "ops", "--admin"])
    admin = Store(db).principal(r.stdout.strip())
    assert admin is not None and admin.admin
    bad = runner.invoke(app, ["token", "create", "--db", db, "--tenant", "no spaces"])
    assert bad.exit_code == 2 and "--tenant" in bad.output


def test_settings_come_from_file_then_options(tmp_path: Path) -> None:
    cfg = tmp_path / "disagg.yaml"
    cfg.write_text("port: 9000\npolicy: fifo\nlatency_scale: 0.5\n")
    s = load_config(str(cfg), port=9100)
    assert (s.port, s.policy, s.latency_scale, s.host) == (9100, "fifo", 0.5, "127.0.0.1")
    cfg.write_text("colour: red\n")
    with pytest.raises(SpecError, match="colour: unknown setting"):
        load_config(str(cfg))
    assert load_config(None, db="sqlite:///x.db").resolved_state_dir() == Path("x.db.d")


def test_serve_rejects_a_bad_policy_with_exit_2(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--policy", "nope"])
    assert r.exit_code == 2 and "unknown policy 'nope'" in r.output


def fast_server(tmp_path: Path) -> Server:
    """A `disagg serve` on SQLite in `tmp_path` with the emulated testbed 500x faster."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    return Server(tmp_path, db, ["--latency-scale", "0.002", "--tick-s", "0.02", "--round-gap-s", "0.02"])


def test_the_clients_against_a_running_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = fast_server(tmp_path)
    server.start()
    try:
        server.ready()
        log = (tmp_path / "server.log").read_text()
        assert log.count("admin token written to ") == 1
        token = admin_token(tmp_path)
        monkeypatch.setenv("DISAGG_URL", server.url)
        monkeypatch.setenv("DISAGG_TOKEN", token)
        submit = ["submit", "hello", "--gpus", "1", "--json", "--", "sh", "-c", "echo hi $DISAGG_DEVICES"]
        r = runner.invoke(app, submit)
        assert r.exit_code == 0, r.output
        job_id = json.loads(r.stdout)["id"]

        def completed() -> bool:
            out = runner.invoke(app, ["jobs", job_id, "--json"])
            return bool(json.loads(out.stdout)["state"] == "completed")

        wait_for(completed, what="the job to complete")
        logs = runner.invoke(app, ["logs", job_id])
        assert logs.stdout.startswith("hi iobox0/gpu")
        table = runner.invoke(app, ["jobs"], env={"COLUMNS": "200"})
        assert "hello" in table.stdout and "completed" in table.stdout
        for cmd, key in (("slices", "slices"), ("machines", "machines"), ("devices", "devices"), ("links", "links")):
            out = runner.invoke(app, [cmd, "--json"])
            assert out.exit_code == 0 and json.loads(out.stdout)[key]
            shown = runner.invoke(app, [cmd], env={"COLUMNS": "250"})
            assert shown.exit_code == 0 and json.loads(out.stdout)[key][0]["id"] in shown.stdout
        bad = runner.invoke(app, ["submit", "big", "--gpus", "9", "--", "true"])
        assert bad.exit_code == 2 and "never fit" in bad.output
        many = runner.invoke(app, ["submit", "sweep", "--count", "3", "--json", "--", "true"])
        assert many.exit_code == 0, many.output
        ids = [j["id"] for j in json.loads(many.stdout)["jobs"]]
        assert len(set(ids)) == 3
        wait_for(lambda: all(json.loads(runner.invoke(app, ["jobs", i, "--json"]).stdout)["state"] == "completed"
                             for i in ids), what="the batch to complete")
        for count, why in (("101", "less than or equal to 100"), ("0", "greater than or equal to 1")):
            refused = runner.invoke(app, ["submit", "sweep", "--count", count, "--", "true"])
            assert refused.exit_code == 2 and "--count" in refused.output and why in refused.output
        shown = runner.invoke(app, ["submit", "sweep", "--count", "2", "--gpus", "9", "--", "true"])
        assert shown.exit_code == 2 and "jobs[0]: " in shown.output and "never fit" in shown.output
        nobody = runner.invoke(app, ["jobs"], env={"DISAGG_TOKEN": "dg_wrong"})
        assert nobody.exit_code == 2 and "401" in nobody.output
    finally:
        server.kill()
    server.start()  # a second start: the store has an admin, no new token is printed
    try:
        server.ready()
        time.sleep(0.1)
        assert (tmp_path / "server.log").read_text().count("admin token") == 1
    finally:
        server.kill()


def test_a_client_without_a_server_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    r = runner.invoke(app, ["jobs", "--url", "http://127.0.0.1:9", "--token", "dg_x"])
    assert r.exit_code == 1 and "cannot reach the controller" in r.output


def test_serve_runs_the_loop_in_a_process_of_its_own_that_dies_with_the_api(tmp_path: Path) -> None:
    import httpx

    server = fast_server(tmp_path)
    server.start()
    try:
        server.ready()
        log = (tmp_path / "server.log").read_text()
        assert ", loop in process " in log
        loop_pid = int(log.split(", loop in process ")[1].split(")")[0])
        assert loop_pid != server.pid and os.getpgid(loop_pid) == server.pid
        # the loop process yields the cores to the API first (loop_nice, default 5)
        assert os.getpriority(os.PRIO_PROCESS, loop_pid) == os.getpriority(os.PRIO_PROCESS, server.pid) + 5
        token = admin_token(tmp_path)
        auth = {"Authorization": f"Bearer {token}"}
        job = httpx.post(server.url + "/v1/jobs", headers=auth, json={"name": "x", "command": ["true"]}).json()

        def placed_and_published() -> bool:  # the loop process publishes its numbers every 0.5 s
            health = httpx.get(server.url + "/healthz").json()
            state = httpx.get(server.url + f"/v1/jobs/{job['id']}", headers=auth).json()["state"]
            metrics = httpx.get(server.url + "/metrics", headers=auth).text
            return (state == "completed" and health["last_round"].get("placed", 0) >= 1
                    and 'disagg_slice_step_seconds_count{op="launch-task"} 1.0' in metrics)

        wait_for(placed_and_published, what="the loop process to place the job and publish its numbers")
        metrics = httpx.get(server.url + "/metrics", headers=auth).text
        # the loop's histograms (from the loop process) and the API's, each family once
        assert "disagg_submit_seconds_count 1.0" in metrics
        assert metrics.count("# TYPE disagg_placement_round_seconds histogram") == 1
        os.kill(server.pid, signal.SIGKILL)  # only the API process: the loop process must follow it
        os.waitpid(server.pid, 0)
        assert group_gone(server.pid, timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)


def test_the_api_process_keeps_what_it_opened_out_of_the_collectors_reach() -> None:
    """`keep_startup_heap` (the split API process, once its service is open): what exists then is frozen,
    what comes after is collected as usual. In a process of its own: freezing is for a process's life."""
    import subprocess
    import sys

    code = ("import gc\n"
            "from tests.frozen import is_frozen\n"
            "from disagg.control.split import keep_startup_heap\n"
            "opened = [[] for _ in range(1000)]\n"
            "assert gc.get_freeze_count() == 0\n"
            "keep_startup_heap()\n"
            "later = [[]]\n"
            "assert is_frozen(opened[0]) and is_frozen(opened[-1]) and not is_frozen(later)\n"
            "assert gc.get_freeze_count() >= 1000 and gc.isenabled()\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_serve_refuses_a_bad_loop_nice_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("loop_nice: fast\n")
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--config", str(cfg)])
    assert r.exit_code == 2 and "loop_nice: 'fast' is not allowed" in r.output


@pytest.mark.parametrize(("text", "pattern"), [
    (b"loop_nice: 5\nloop_nice: 19\n", "found key 'loop_nice' twice"),
    (b"\xff\xfe\x00l", "not UTF-8 text: byte 0xff at offset 0"),
], ids=["key-twice", "not-utf8"])
def test_a_config_file_with_a_key_twice_or_not_text_is_refused(tmp_path: Path, text: bytes, pattern: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text)
    with pytest.raises(SpecError, match=pattern):
        load_config(cfg, {})
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--config", str(cfg)])
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_settings_refuse_numbers_that_are_not_finite(value: str) -> None:
    """`serve --tick-s inf` passed the settings (`gt=0`) and came up with a loop that never ticks."""
    with pytest.raises(SpecError, match=r"tick_s: .* is not allowed \(Input should be (a finite number|greater)"):
        load_config(None, {"DISAGG_TICK_S": value})
    with pytest.raises(SpecError, match="round_gap_s"):
        load_config(None, {}, round_gap_s=float(value))


def test_serve_answers_a_cluster_spec_the_loop_process_refuses_with_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text("machines: [{name: m0, rack: r0, cpus: -1, memory_gb: 1, uplink_gbps: 10}]\n")
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--cluster", str(spec)])
    assert r.exit_code == 2 and "cpus" in r.output


@pytest.mark.parametrize("one_process", [False, True])
def test_serve_on_a_store_it_cannot_use_says_why_and_exits_1(tmp_path: Path, one_process: bool) -> None:
    """A store a newer disagg migrated (the package rolled back), or one that cannot be reached: the
    store's own words, exit 1, no traceback (it was Alembic's "Can't locate revision" in a traceback, and
    "the loop process exited while starting (its error is in the log)")."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    store = Store(db)
    store.migrate()
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'i99_from_the_future'")
    store.close()
    extra = ["--one-process"] if one_process else []
    r = runner.invoke(app, ["serve", "--port", "0", "--db", db, "--state-dir", str(tmp_path / "state"), *extra])
    assert r.exit_code == 1, r.output
    assert "schema revision 'i99_from_the_future', which disagg" in r.output
    assert "a newer disagg has upgraded it" in r.output and "Traceback" not in r.output
    gone = runner.invoke(app, ["serve", "--port", "0", "--db", "postgresql://nobody@127.0.0.1:1/none",
                               "--state-dir", str(tmp_path / "state2"), *extra])
    assert gone.exit_code == 1 and "cannot use the store at" in gone.output and "Traceback" not in gone.output


def test_serve_refuses_a_cluster_spec_that_takes_a_device_a_job_holds_with_exit_2(tmp_path: Path) -> None:
    """The operator takes two GPUs out of the spec while a job holds one of them: the start is refused,
    naming the device and the job, and the store keeps them (docs/controller.md, "Changing the cluster")."""
    from disagg.control.service import DEFAULT_CLUSTER
    from disagg.model import load_cluster
    from disagg.store.models import JobRow, SliceRow

    db = f"sqlite:///{tmp_path / 'd.db'}"
    store = Store(db)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    task = {"task": "j-1/0", "machine": "node0", "cpus": 1, "memory_gb": 1,
            "devices": [{"id": "iobox0/gpu3", "network_gbps": 1.0}]}
    with store.write() as s:
        s.add(JobRow(id="j-1", seq=1, tenant="a", name="n", image="i", command=["true"], tasks={"count": 1},
                     slo_s=None, importance=1.0, max_retries=2, state="running", reason=None, reason_code=None,
                     wait_rounds=0, attempts=1, exit_code=None, slice_id="s-1", submitted_at=0.0,
                     updated_at=0.0, idempotency_key=None, request_hash=None))
        s.flush()
        s.add(SliceRow(id="s-1", job_id="j-1", attempt=1, state="running", outcome=None, detail=None,
                       placement={"machines": [], "tasks": [task]}, handle=None, created_at=0.0, updated_at=0.0))
    store.close()
    spec = tmp_path / "fewer-gpus.yaml"
    spec.write_text(DEFAULT_CLUSTER.read_text().replace("{model: P100, count: 4}", "{model: P100, count: 2}"))
    r = runner.invoke(app, ["serve", "--port", "0", "--db", db, "--cluster", str(spec),
                            "--state-dir", str(tmp_path / "st")])
    assert r.exit_code == 2, r.output
    assert "device iobox0/gpu3 is removed, but j-1 holds it" in r.output
    assert "iobox0/gpu3" in {d.id for d in Store(db).cluster().devices}


def test_the_configuration_table_lists_every_setting_with_its_variable() -> None:
    """docs/configuration.md is the one table of settings: a row per Config field, with its variable."""
    from disagg.control.config import Config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in doc.splitlines()
            if line.startswith("| `")}
    assert set(rows) == set(Config.model_fields)
    for name, row in rows.items():
        assert f"`DISAGG_{name.upper()}`" in row


def test_settings_come_from_defaults_then_file_then_environment_then_options(tmp_path: Path) -> None:
    cfg = tmp_path / "disagg.yaml"
    cfg.write_text("workers: 4\nport: 9001\nwindow: 7\nfabric: {driver: emulated}\n")
    env = {"DISAGG_PORT": "9002", "DISAGG_WINDOW": "8", "DISAGG_PARALLEL_STEPS": "false"}
    c = load_config(str(cfg), env, window=9)
    assert (c.workers, c.port, c.window, c.parallel_steps, c.seed) == (4, 9002, 9, False, 0)
    assert c.fabric_driver == "emulated" and c.fabric_options == {}
    with pytest.raises(SpecError, match=r"DISAGG_WORKERS|workers: 'many' is not allowed"):
        load_config(None, {"DISAGG_WORKERS": "many"})
    with pytest.raises(SpecError, match="loop_nice: 40 is not allowed"):
        load_config(None, {}, loop_nice=40)


@pytest.mark.parametrize(("option", "value", "words"), [
    ("--db", "mysql://x/y", "db: 'mysql://x/y' is not allowed (must be sqlite:///path/to/file.db or postgresql://"),
    ("--db", "sqlite:////nonexistent/dir/x.db", "the directory '/nonexistent/dir' does not exist: make it first"),
    ("--state-dir", "/proc/no-such-dir", "state_dir: cannot make '/proc/no-such-dir' the state directory"),
], ids=["mysql", "sqlite-no-directory", "state-dir-unmakeable"])
def test_serve_names_a_store_or_state_directory_it_cannot_use_with_exit_2(tmp_path: Path, option: str, value: str,
                                                                         words: str) -> None:
    """Each was a traceback: `No module named 'MySQLdb'`, a FileNotFoundError for the lock file, one for
    the state directory's mkdir (the last in the loop process, "its error is in the log")."""
    base = ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--state-dir", str(tmp_path / "st")]
    r = runner.invoke(app, [*base, option, value])
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output


def test_serve_names_a_slurm_site_that_cannot_serve_with_exit_2(tmp_path: Path) -> None:
    """A site.json without the network namespace and bridge that slice nodes join was a traceback in the loop
    process ("the loop process exited while starting (its error is in the log)")."""
    from disagg.engines.slurm_site import SlurmSite

    (tmp_path / "slurm").mkdir()
    site = SlurmSite(root=tmp_path / "slurm", conf=tmp_path / "slurm" / "slurm.conf").save()
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}",
                            "--state-dir", str(tmp_path / "st")],
                      env={"DISAGG_ENGINE": "slurm", "DISAGG_SLURM_SITE": str(site)})
    assert r.exit_code == 2, r.output
    assert f"slurm_site: '{site}': slurm site has no network namespace and bridge for dynamic nodes (fields " \
           "netns, bridge)" in r.output and "Traceback" not in r.output and "in the log" not in r.output


def test_a_config_files_relative_paths_are_relative_to_the_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A service starts in `/`: `cluster: cluster.yaml` beside /etc/disagg/disagg.yaml was looked for as
    /cluster.yaml ("cannot read file"), after `db: sqlite:///disagg.db` had made /disagg.db.lock. Options and
    variables stay relative to the working directory, as a shell's are."""
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "disagg.yaml"
    cfg.write_text("cluster: cluster.yaml\ndb: sqlite:///disagg.db\nstate_dir: state\ntenants: tenants.yaml\n"
                   "job_shared_dirs: [shared, /abs/shared]\nprofiles: /abs/profiles.yaml\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    c = load_config(str(cfg))
    assert (c.cluster, c.state_dir, c.tenants) == (str(etc / "cluster.yaml"), str(etc / "state"),
                                                   str(etc / "tenants.yaml"))
    assert c.db == f"sqlite:///{etc / 'disagg.db'}" and c.sqlite_path() == etc / "disagg.db"
    assert c.job_shared_dirs == [str(etc / "shared"), "/abs/shared"] and c.profiles == "/abs/profiles.yaml"
    flagged = load_config(str(cfg), {"DISAGG_STATE_DIR": "mine"}, cluster="here.yaml")
    assert (flagged.cluster, flagged.state_dir) == ("here.yaml", "mine")  # the working directory's


def _a_store(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    Store(db).migrate()
    return db


@pytest.mark.parametrize(("target", "words"), [
    ("/proc/x", "TARGET: cannot make /proc/x: No such file or directory"),
    ("{tmp}/d.db/x", "Not a directory"),
    ("{tmp}/nodir/x.db", "cannot make {tmp}/nodir/x.db: No such file or directory"),
    ("{tmp}", "{tmp} exists (a directory)"),
    ("/dev/null", "/dev/null exists (a device or other special file)"),
], ids=["proc", "under-a-file", "no-directory", "a-directory", "dev-null"])
def test_a_backup_to_a_path_it_cannot_make_is_refused_with_exit_2(tmp_path: Path, target: str, words: str) -> None:
    """Each was a traceback (FileNotFoundError, FileExistsError), or a directory made silently for a typo."""
    db = _a_store(tmp_path)
    r = runner.invoke(app, ["backup", target.format(tmp=tmp_path), "--db", db])
    assert r.exit_code == 2 and words.format(tmp=tmp_path) in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "nodir").exists()


def test_a_backup_or_gc_of_a_store_that_is_not_there_makes_none(tmp_path: Path) -> None:
    """A refused `backup --db sqlite:///missing.db` left an empty database file there; `gc --state-dir` made
    the directory it was given (a typo'd one), or was a traceback for a file."""
    missing = tmp_path / "missing.db"
    r = runner.invoke(app, ["backup", str(tmp_path / "b.db"), "--db", f"sqlite:///{missing}"])
    assert r.exit_code == 2 and f"there is no file {missing}" in r.output and not missing.exists(), r.output
    db = _a_store(tmp_path)
    for state, words in ((tmp_path / "typo", "is not a directory a controller made"),
                         (tmp_path / "d.db", "is not a directory a controller made")):
        r = runner.invoke(app, ["gc", "--db", db, "--state-dir", str(state)])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "typo").exists()


def test_outputs_are_checked_before_the_work_and_a_seed_is_a_valid_one(tmp_path: Path) -> None:
    """`simulate --json /proc/x/y.json` and `--plots <a file>` were tracebacks after the whole run;
    `place --dump-graphs /proc/x` one after the round; `place --seed -1` numpy's ValueError."""
    examples = Path(__file__).parents[2] / "examples"
    spec = ["--cluster", str(examples / "flowos-testbed.yaml"), "--jobs", str(examples / "flowos-jobs.yaml")]
    (tmp_path / "afile").write_text("")
    cases = [
        (["simulate", "--scenario", "paper-4m-128j", "--policies", "fifo", "--json", "/proc/x/y.json"],
         "--json: the directory /proc/x does not exist"),
        (["simulate", "--scenario", "paper-4m-128j", "--policies", "fifo", "--json", str(tmp_path)],
         f"--json: {tmp_path} is a directory"),
        (["simulate", "--scenario", "paper-4m-128j", "--policies", "fifo", "--plots", str(tmp_path / "afile")],
         f"--plots: cannot make the directory {tmp_path / 'afile'}"),
        (["place", *spec, "--dump-graphs", "/proc/x"], "--dump-graphs: cannot make the directory /proc/x"),
        (["place", *spec, "--seed", "-1"], "--seed"),
    ]
    for args, words in cases:
        started = time.monotonic()
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, (args, r.output)
        assert "results written" not in r.output and time.monotonic() - started < 20


def test_an_error_shows_brackets_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    """Rich took `[a-z_]` in an API's message for markup and printed `pattern '^{0,31}$'`."""
    import typer

    from disagg.cli.common import fail

    assert isinstance(fail("unix_user: must match pattern '^[a-z_][a-z0-9_-]{0,31}$'"), typer.Exit)
    assert "pattern '^[a-z_][a-z0-9_-]{0,31}$'" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "value"), [("window", 2**63), ("backfill", 2**63), ("tick_s", 100000.0),
                                             ("round_gap_s", 3600.0), ("seed", -1)])
def test_a_setting_that_would_stop_scheduling_is_refused(name: str, value: float) -> None:
    """A window of 2**63 started, then failed every round (OverflowError in the store's LIMIT); tick_s 100000
    kept a submitted job waiting for a round a day away; seed -1 was numpy's traceback in the loop process."""
    with pytest.raises(SpecError, match=rf"{name}: '{value}' is not allowed \(.*\) \(set by DISAGG_{name.upper()}\)"):
        load_config(None, {f"DISAGG_{name.upper()}": str(value)})


def test_a_jobs_dir_that_is_a_file_is_named_with_exit_2(tmp_path: Path) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile(dir="/var/tmp", prefix="disagg-not-a-dir-") as afile:
        r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}", "--state-dir",
                                str(tmp_path / "st")], env={"DISAGG_JOBS_DIR": afile.name})
    assert r.exit_code == 2 and f"jobs_dir: cannot make {afile.name} the jobs' directory" in r.output, r.output
    assert "Traceback" not in r.output and "in the log" not in r.output


def test_a_start_refused_for_its_port_or_a_settings_file_touches_no_store(tmp_path: Path) -> None:
    """A port in use, or a bad tenants file, stopped the start only after it had migrated the store, synced
    the inventory to the cluster spec, taken the lease and reconciled: the next start found them changed."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    db, state = tmp_path / "d.db", tmp_path / "st"
    try:
        r = runner.invoke(app, ["serve", "--port", port, "--db", f"sqlite:///{db}", "--state-dir", str(state)])
    finally:
        taken.close()
    assert r.exit_code == 1 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.output, r.output
    assert not db.exists() and not state.exists()
    (tmp_path / "t.yaml").write_text("tenants:\n  - name: a\n  - name: a\n")
    db = tmp_path / "e.db"  # (this process still holds the other's lock: serve holds it for its life)
    r = runner.invoke(app, ["serve", "--port", "0", "--db", f"sqlite:///{db}", "--state-dir", str(state)],
                      env={"DISAGG_TENANTS": str(tmp_path / "t.yaml")})
    assert r.exit_code == 2 and "the name 'a' is used more than once" in r.output, r.output
    assert not db.exists() and not state.exists()


def test_a_file_that_is_no_database_is_named_not_a_traceback(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n")
    db = f"sqlite:///{junk}"
    (tmp_path / "st").mkdir()
    for args in (["token", "create", "--tenant", "x", "--db", db], ["backup", str(tmp_path / "b.db"), "--db", db],
                 ["gc", "--db", db, "--state-dir", str(tmp_path / "st")]):
        r = runner.invoke(app, args)
        assert r.exit_code == 1 and f"cannot use the store at '{db}': file is not a database" in r.output, (args, r)
        assert r.exception is None or isinstance(r.exception, SystemExit)
