"""An operator's first day (issue 25), against a real controller: one request model for the API and the
spec file, errors that list what is allowed, a clear 400 for a body that is not JSON, graceful cancel,
hold and release, allocation per machine and pool, true job times, and the server's log lines."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from control_helpers import Server, admin_token, body, wait_for
from fastapi.testclient import TestClient

from disagg.api import schemas as S
from disagg.model import SpecError
from disagg.model.spec import TasksSpec, parse_jobs
from disagg.model.states import JOB_TRANSITIONS, JobState

Client = tuple[TestClient, dict[str, str]]


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_and_the_spec_file_share_one_tasks_model_and_its_words(api: Client) -> None:
    client, tok = api
    assert issubclass(S.TasksIn, TasksSpec) and S.TasksIn.model_fields.keys() == TasksSpec.model_fields.keys()
    allowed = ", ".join(TasksSpec.model_fields)
    bad = body("typo")
    bad["tasks"]["gpus"] = 1
    r = client.post("/v1/jobs", headers=h(tok["alice"]), json=bad)
    assert r.status_code == 422
    assert r.json()["problems"] == [{"field": "tasks.gpus", "message": f"unknown field 'gpus' (allowed: {allowed})"}]
    with pytest.raises(SpecError, match=rf"tasks.gpus: unknown field 'gpus' \(allowed: {allowed}\)"):
        parse_jobs({"jobs": [{"name": "typo", "tasks": {"gpus": 1}}]})
    # the same bounds: what one refuses, the other does
    for tasks in ({"count": 10_001}, {"gpu": 4097}, {"cpus": 0}, {"gpu_model": "no spaces"}):
        r = client.post("/v1/jobs", headers=h(tok["alice"]), json={**body("b"), "tasks": tasks})
        assert r.status_code == 422, tasks
        with pytest.raises(SpecError):
            parse_jobs({"jobs": [{"name": "b", "tasks": tasks}]})


def test_a_body_that_is_not_json_is_a_400_that_says_so(api: Client) -> None:
    client, tok = api
    r = client.post("/v1/jobs", headers={**h(tok["alice"]), "content-type": "application/json"}, content=b"{nope")
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the body is not valid JSON: ") and r.json()["problems"][0]["field"] == "body"
    # not UTF-8, or nested past what the reader follows: FastAPI's "There was an error parsing the body", and
    # no problem named
    for raw in (b'{"name": "\xff\xfe"}', b"[" * 5000 + b"]" * 5000):
        r = client.post("/v1/jobs", headers={**h(tok["alice"]), "content-type": "application/json"}, content=raw)
        assert r.status_code in (400, 422), r.text
        assert r.json()["problems"] and r.json()["problems"][0]["field"] == "body", r.text


# --- against a real `disagg serve` ------------------------------------------------------------------
def started(root: Path, *options: str) -> Server:
    """A `disagg serve` with its jobs' directories in a folder of its own (not under /var/lib/disagg/jobs,
    where a concurrent test session's clean-up removes the directories that appeared while it ran)."""
    jobs = Path(tempfile.mkdtemp(prefix="disagg-i25-jobs-", dir="/var/tmp"))
    jobs.chmod(0o755)
    srv = Server(root, f"sqlite:///{root / 'd.db'}", ["--latency-scale", "0.002", "--tick-s", "0.02", *options])
    os.environ["DISAGG_JOBS_DIR"] = str(jobs)
    try:
        srv.start()
    finally:
        os.environ.pop("DISAGG_JOBS_DIR", None)
    srv.jobs_dir = jobs  # type: ignore[attr-defined]
    return srv


def stopped(srv: Server) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError, RuntimeError):
        srv.kill()
    shutil.rmtree(srv.jobs_dir, ignore_errors=True)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    root = tmp_path_factory.mktemp("day")
    srv = started(root, "--round-gap-s", "0.02")
    try:
        srv.ready()
        yield srv, admin_token(root)
    finally:
        stopped(srv)


def cli(served: tuple[Server, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`disagg ARGS` in its own process, its stdout a pipe."""
    srv, token = served
    env = {"DISAGG_URL": srv.url, "DISAGG_TOKEN": token, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "disagg.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def submitted(served: tuple[Server, str], name: str, script: str, *options: str) -> str:
    out = cli(served, "submit", name, "--json", *options, "--", "sh", "-c", script)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["id"])


def api_job(served: tuple[Server, str], job_id: str) -> dict[str, Any]:
    srv, token = served
    return dict(httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=h(token), timeout=10).json())


def server_log(served: tuple[Server, str]) -> str:
    return (served[0].root / "server.log").read_text()


def test_the_banner_gives_the_clients_line_with_the_real_url(served: tuple[Server, str]) -> None:
    srv, _ = served
    assert f"clients: export DISAGG_URL={srv.url} DISAGG_TOKEN=$(cat " in server_log(served)


def test_logs_follow_waits_for_the_start_and_exits_with_the_jobs_code(served: tuple[Server, str]) -> None:
    jid = submitted(served, "three", "sleep 0.5; echo before-exit; exit 3")
    out = cli(served, "logs", jid, "--follow")  # at once: the job is queued or composing
    assert (out.returncode, out.stdout) == (3, "before-exit\n"), out.stderr
    ok = submitted(served, "zero", "echo fine")
    out = cli(served, "logs", ok, "-f")
    assert (out.returncode, out.stdout) == (0, "fine\n"), out.stderr


def test_cancel_with_grace_sends_sigterm_and_waits_like_a_preemption(served: tuple[Server, str]) -> None:
    script = "trap 'echo got-term; exit 7' TERM; echo ready; while true; do sleep 0.1; done"
    jid = submitted(served, "trapper", script)
    wait_for(lambda: api_job(served, jid)["state"] == "running", timeout=60,
             what=f"running: {cli(served, 'slices', '-o', 'wide').stdout}")
    wait_for(lambda: "ready" in cli(served, "logs", jid).stdout, what="the trap set")
    out = cli(served, "cancel", jid, "--grace", "60", "--signal", "TERM")
    assert out.returncode == 0 and "SIGTERM sent" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: api_job(served, jid)["state"] == "cancelled", timeout=40, what="cancelled on its trap")
    assert "got-term" in cli(served, "logs", jid).stdout  # its trap ran: it was not killed at once
    why = [e["why"] for e in httpx.get(f"{served[0].url}/v1/jobs/{jid}/events", headers=h(served[1]),
                                       timeout=10).json()["events"]]
    assert "cancel requested: SIGTERM, grace 60 s" in why
    log = server_log(served)
    assert f"job {jid}: cancel requested: SIGTERM, grace 60 s" in log
    assert f"job {jid}: cancelled by user; it stopped on the signal" in log
    bad = cli(served, "cancel", jid, "--grace", "1", "--signal", "STOP")
    assert bad.returncode == 2 and "--signal: 'STOP' is not allowed" in bad.stderr


def test_an_id_is_one_part_of_the_path_and_an_empty_one_is_refused(served: tuple[Server, str]) -> None:
    """The CLI put ids into its URLs as they were typed: `cancel '../devices/iobox0/gpu3/drain#'` drained a
    device (exit 0, "job iobox0/gpu3 is drained"), `profiles _ unpin 'x/../../tokens/2#'` revoked a token,
    and `jobs ''` was a traceback."""
    out = cli(served, "cancel", "../devices/iobox0/gpu3/drain#")
    assert out.returncode == 2 and "job: '../devices/iobox0/gpu3/drain#' is not allowed: a job id has no '/'" \
        in out.stderr, out.stderr
    srv, token = served
    devices = httpx.get(f"{srv.url}/v1/devices", headers=h(token), params={"limit": 500}, timeout=10).json()
    assert not next(d for d in devices["devices"] if d["id"] == "iobox0/gpu3")["drained"]
    for args in (("jobs", ""), ("slices", ""), ("tenants", "show", ""), ("logs", ".."), ("hold", ".")):
        out = cli(served, *args)
        assert out.returncode == 2 and "is not allowed: give one" in out.stderr and "Traceback" not in out.stderr, \
            (args, out.stderr)
    out = cli(served, "devices", "drain", "iobox0/gpu3")  # a device id has its '/': it still reaches it
    assert out.returncode == 0 and "device iobox0/gpu3 is drained" in out.stdout, out.stderr
    assert cli(served, "devices", "repair", "iobox0/gpu3").returncode == 0


def test_the_profiles_subcommands_are_reachable(served: tuple[Server, str]) -> None:
    """`disagg profiles [IMAGE]` took `export`, `pin` and `unpin` for images: none of them could be run."""
    out = cli(served, "profiles", "pin", "acme/probe:1", "--base-s", "10", "--transfer-share", "0.3",
              "--remote-factor", "2", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["used"] == "pinned", out.stderr
    out = cli(served, "profiles", "show", "acme/probe:1", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["image"] == "probe", out.stderr
    out = cli(served, "profiles", "export")
    assert out.returncode == 0 and "- image: probe\n  base_s: 10.0" in out.stdout, out.stderr
    out = cli(served, "profiles", "unpin", "acme/probe:1")
    assert out.returncode == 0 and "unpinned acme/probe:1" in out.stdout, out.stderr
    out = cli(served, "profiles", "show", "acme/probe:1")
    assert out.returncode == 2 and "no profile for image" in out.stderr


def test_faults_and_shutdown_leave_lines_in_the_servers_log(tmp_path: Path) -> None:
    srv = started(tmp_path)
    try:
        srv.ready()
        one = (srv, admin_token(tmp_path))
        jid = submitted(one, "long", "sleep 60")
        wait_for(lambda: api_job(one, jid)["state"] == "running", what="running")
        assert cli(one, "devices", "fail", "iobox0/gpu0").returncode == 0
        assert cli(one, "links", "fail", "up:iobox1").returncode == 0
        os.kill(srv.pid, signal.SIGINT)  # Ctrl-C
        os.waitpid(srv.pid, 0)
    finally:
        stopped(srv)
    log = (tmp_path / "server.log").read_text()
    assert "device iobox0/gpu0: marked failed (an admin's action)" in log
    assert "link up:iobox1: marked failed (an admin's action)" in log
    assert "stopping: 1 job composing or running left running, by design" in log


def test_tenants_entitled_share_is_the_same_for_the_tenant_and_the_admin(api: Client) -> None:
    client, tok = api
    for who in ("alice", "bob"):
        assert client.post("/v1/jobs", headers=h(tok[who]), json=body(f"{who}-job", ["sleep", "30"], gpu=0)
                           ).status_code == 201
    mine = client.get("/v1/tenants", headers=h(tok["alice"])).json()["tenants"]
    every = {t["name"]: t for t in client.get("/v1/tenants", headers=h(tok["admin"])).json()["tenants"]}
    assert [t["name"] for t in mine] == ["alice"]
    assert mine[0]["entitled_share"] == every["alice"]["entitled_share"] < 1.0
    assert all(t["unix_user"] for t in every.values())  # who the jobs run as, never blank


def test_who_a_tenants_jobs_run_as_is_the_config_s_and_the_api_says_it_as_the_engine_does(tmp_path: Path) -> None:
    """PUT /v1/tenants took `unix_user` (`root` too), stored it and showed it, while the engines resolved users
    from the config's spec alone: jobs ran as someone else than the API said. And the API named the default
    user without the controller's prefix (`disagg-t3` for jobs that ran as `disagg-0325-t3`)."""
    from control_helpers import make_service

    from disagg.api import create_app

    svc = make_service(tmp_path, unix_user_prefix="dq-")
    try:
        admin = h(svc.store.create_token("admin", admin=True))
        with TestClient(create_app(svc.jobs)) as client:
            for user in ("root", "nobody"):
                r = client.put("/v1/tenants/t3", headers=admin, json={"unix_user": user})
                assert r.status_code == 422 and r.json()["problems"][0]["field"] == "unix_user", r.text
                assert "unknown field 'unix_user'" in r.json()["detail"]
            assert client.put("/v1/tenants/t3", headers=admin, json={"weight": 2}).status_code == 200
            every = {t["name"]: t for t in client.get("/v1/tenants", headers=admin).json()["tenants"]}
        if os.geteuid() == 0:  # as root each tenant has a user of its own: the one the engine resolves
            assert every["t3"]["unix_user"] == svc.engine.accounts.user_of("t3") == "dq-t3"  # type: ignore[attr-defined]
    finally:
        svc.close()


def test_the_tenants_table_says_what_its_columns_mean_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    from disagg.cli.tables import console as table_console
    from disagg.cli.tenants import LEGEND, _table

    # A wide terminal, whatever runs the test: under COLUMNS=80 (a narrow terminal, some CI runners) the
    # cells fold and the phrases below are split across lines.
    monkeypatch.setenv("COLUMNS", "400")

    row = {"name": "alice", "weight": 1.0, "cohort": None, "unix_user": "disagg-alice", "quota": {"gpu": 2.0},
           "borrow": {}, "limit": {"gpu": 2.0}, "usage": {"memory_gb": 3.0, "network_gbps": 1.8, "cpus": 2.0},
           "borrowed": {}, "decayed_usage": {}, "dominant_share": 0.25, "fair_share": 0.1, "entitled_share": 0.5,
           "queued": 0, "running": 1}
    out = table_console()
    with out.capture() as cap:
        out.print(_table([row], wide=True))
    text = cap.get()
    assert "3 GB memory, 1.8 Gbit/s network, 2 cpus" in text and "memory_gb" not in text
    assert "entitled share" in text and "50.0%" in text and "disagg-alice" in text
    assert " ".join(LEGEND.split()) in " ".join(text.split())


def _expected_allocation(jobs: list[dict[str, Any]]) -> tuple[dict[str, list[float]], Counter[str]]:
    """A hand count from the placements: cpus and memory per machine, devices used per location."""
    held: dict[str, list[float]] = {}
    used: Counter[str] = Counter()
    for j in jobs:
        for t in j["placement"] or []:
            mine = held.setdefault(t["machine"], [0.0, 0.0])
            mine[0] += t["cpus"]
            mine[1] += t["memory_gb"]
            for d in t["devices"]:
                used[d["location"]] += 1
    return held, used


def test_machines_json_and_the_dashboard_agree_with_a_hand_count(served: tuple[Server, str]) -> None:
    srv, token = served
    ids = [submitted(served, "alloc-a", "sleep 60", "--cpus", "3", "--memory-gb", "5", "--gpus", "2"),
           submitted(served, "alloc-b", "sleep 60", "--tasks", "2", "--cpus", "1.5", "--memory-gb", "2", "--gpus", "1"),
           submitted(served, "alloc-c", "sleep 60", "--cpus", "2", "--memory-gb", "7", "--nvme", "1")]
    try:
        wait_for(lambda: all(api_job(served, j)["state"] == "running" for j in ids), timeout=60, what="running")
        running = [api_job(served, j) for j in ids]
        held, used = _expected_allocation(running)
        out = cli(served, "machines", "-o", "json")
        assert out.returncode == 0, out.stderr
        machines = {m["id"]: m for m in json.loads(out.stdout)["machines"]}
        for name, m in machines.items():
            a = m["allocation"]
            assert [a["cpus"]["allocated"], a["memory_gb"]["allocated"]] == pytest.approx(held.get(name, [0, 0])), name
            assert (a["cpus"]["total"], a["memory_gb"]["total"]) == (m["cpus"], m["memory_gb"])
            assert sum(g["used"] for g in a["devices"]) == used[name], name
            assert sum(g["total"] for g in a["devices"]) == len(m["devices"]), name
        assert sum(used.values()) == 2 + 2 + 1
        table = cli(served, "machines").stdout
        busy = next(n for n in held if n in machines)
        cpus = machines[busy]["allocation"]["cpus"]
        assert f"{cpus['allocated']:g}/{cpus['total']:g}" in table
        login = httpx.post(f"{srv.url}/login", data={"token": token}, follow_redirects=False, timeout=10)
        signed = {"disagg_session": login.cookies["disagg_session"]}  # a server-side session's key (issue 22)
        page = httpx.get(f"{srv.url}/ui/fabric", cookies=signed, timeout=10).text
        for name, m in machines.items():
            if m["kind"] == "machine":
                a = m["allocation"]
                assert (f'data-node="{name}"' in page and
                        f'data-node-cpus="{a["cpus"]["allocated"]:g}/{a["cpus"]["total"]:g}"' in page), name
        queue = httpx.get(f"{srv.url}/ui/queue", cookies=signed, timeout=10).text
        total_gpu_used = sum(g["used"] for m in machines.values() for g in m["allocation"]["devices"]
                             if g["kind"] == "gpu")
        shown = sum(int(x) for x in re.findall(r'data-resource="gpu [^"]+" data-used="(\d+)"', queue))
        assert shown == total_gpu_used == 4
    finally:
        for j in ids:
            cli(served, "cancel", j)


def test_hold_release_and_requeue_with_true_times_and_no_stale_placement(api: Client, service: Any) -> None:
    client, tok = api
    admin, alice = h(tok["admin"]), h(tok["alice"])
    assert "held" in {str(s) for s in JOB_TRANSITIONS[JobState.QUEUED]}
    # hold a job before any round places it: a gang larger than the free GPUs would do, but a fresh queue is
    # placed within a tick, so hold the job that cannot be placed yet: ask for every GPU twice
    blocker = client.post("/v1/jobs", headers=alice, json=body("blocker", ["sleep", "30"], gpu=5)).json()["id"]
    wait_for(lambda: client.get(f"/v1/jobs/{blocker}", headers=alice).json()["state"] == "running", what="running")
    waiting = client.post("/v1/jobs", headers=alice, json=body("waiter", ["sleep", "30"], gpu=5)).json()["id"]
    assert client.post(f"/v1/jobs/{waiting}/hold", headers=alice).status_code == 403
    r = client.post(f"/v1/jobs/{waiting}/hold", headers=admin)
    assert r.status_code == 200 and r.json()["state"] == "held"
    r = client.post(f"/v1/jobs/{waiting}/hold", headers=admin)  # again: harmless
    assert r.status_code == 200 and r.json()["state"] == "held"
    r = client.post(f"/v1/jobs/{blocker}/release", headers=admin)
    assert r.status_code == 409 and "running" in r.json()["detail"]
    # requeue the running one: it shows no placement until placed again, its earlier attempt in its history
    running = client.get(f"/v1/jobs/{blocker}", headers=alice).json()
    assert running["started_at"] and running["ran_s"] is not None and running["waited_s"] >= 0
    first_slice = running["slice"]
    r = client.post(f"/v1/jobs/{blocker}/requeue", headers=admin)
    assert r.status_code == 202

    def requeued_or_again() -> bool:
        j = client.get(f"/v1/jobs/{blocker}", headers=alice).json()
        return j["attempts"] >= 2 or (j["state"] == "queued")
    wait_for(requeued_or_again, what="re-queued")
    j = client.get(f"/v1/jobs/{blocker}", headers=alice).json()
    if j["state"] == "queued":
        assert j["slice"] is None and j["placement"] is None and j["started_at"] is None
    else:
        assert j["slice"] != first_slice
    events = client.get(f"/v1/jobs/{blocker}/events", headers=alice).json()["events"]
    assert any(e["slice"] == first_slice for e in events) and any("re-queued by admin" in (e["why"] or "")
                                                                  for e in events)
    # the held job stays out of placement while the GPUs are free; released, it runs
    assert client.get(f"/v1/jobs/{waiting}", headers=alice).json()["state"] == "held"
    client.post(f"/v1/jobs/{blocker}/cancel", headers=alice)
    r = client.post(f"/v1/jobs/{waiting}/release", headers=admin)
    assert r.status_code == 200 and r.json()["state"] in ("queued", "composing", "running")
    wait_for(lambda: client.get(f"/v1/jobs/{waiting}", headers=alice).json()["state"] == "running",
             what="the released job running")
    client.post(f"/v1/jobs/{waiting}/cancel", headers=alice)
    wait_for(lambda: client.get(f"/v1/jobs/{waiting}", headers=alice).json()["ended_at"] is not None, what="ended")
    done = client.get(f"/v1/jobs/{waiting}", headers=alice).json()
    assert done["ended_at"] >= done["started_at"] >= done["submitted_at"]
    assert done["waited_s"] == pytest.approx(done["started_at"] - done["submitted_at"], abs=1e-6)
    assert done["ran_s"] == pytest.approx(done["ended_at"] - done["started_at"], abs=1e-6)


def test_the_dashboards_actions_ask_first_and_refuse_a_cross_site_post(api: Client) -> None:
    client, tok = api
    client.post("/login", data={"token": tok["alice"]})
    assert client.get("/ui/confirm/device/drain/iobox0/gpu0").status_code == 403
    client.post("/logout")
    client.post("/login", data={"token": tok["admin"]})
    page = client.get("/ui/fabric").text
    assert 'href="/ui/confirm/device/drain/iobox0/gpu0"' in page and 'href="/ui/confirm/link/fail/up:iobox0"' in page
    ask = client.get("/ui/confirm/device/drain/iobox0/gpu0")
    assert ask.status_code == 200 and 'action="/ui/act/device/drain/iobox0/gpu0"' in ask.text
    evil = client.post("/ui/act/device/drain/iobox0/gpu0", headers={"Origin": "https://evil.example"},
                       follow_redirects=False)
    assert evil.status_code == 403
    devices = {d["id"]: d for d in client.get("/v1/devices", headers=h(tok["admin"])).json()["devices"]}
    assert not devices["iobox0/gpu0"]["drained"]
    done = client.post("/ui/act/device/drain/iobox0/gpu0", follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/fabric"
    devices = {d["id"]: d for d in client.get("/v1/devices", headers=h(tok["admin"])).json()["devices"]}
    assert devices["iobox0/gpu0"]["drained"]
    assert client.post("/ui/act/link/fail/up:iobox1", follow_redirects=False).status_code == 303
    links = {lk["id"]: lk for lk in client.get("/v1/links", headers=h(tok["admin"])).json()["links"]}
    assert links["up:iobox1"]["state"] == "down"
    assert client.get("/ui/confirm/link/drain/up:iobox1").status_code == 404  # a link has no drain


def test_the_charts_have_capacity_lines_and_mark_a_fault_and_its_repair(api: Client, service: Any) -> None:
    client, tok = api
    service.controller.history.every_s = 0.05
    admin = h(tok["admin"])

    def samples() -> int:
        return len(service.store.history_samples(0.0, 1e12))
    wait_for(lambda: samples() >= 2, what="samples")
    assert client.post("/v1/devices/iobox1/nvme0/fail", headers=admin).status_code == 200
    seen = samples()
    wait_for(lambda: samples() >= seen + 2, what="samples after the fault")
    assert client.post("/v1/devices/iobox1/nvme0/repair", headers=admin).status_code == 200
    seen = samples()
    wait_for(lambda: samples() >= seen + 2, what="samples after the repair")
    client.post("/login", data={"token": tok["admin"]})
    page = client.get("/ui/history").text  # no window: the one that fits the samples (15 minutes)
    assert 'href="?window=15m" class="here"' in page
    assert 'id="chart-devices-gpu-in-all"' in page and 'id="chart-devices-gpu"' in page
    assert re.search(r'id="chart-devices-mark-fault-\d+"', page) and re.search(r'id="chart-devices-mark-repair-\d+"',
                                                                               page)


def test_an_empty_gpu_model_is_refused_not_dropped(served: tuple[Server, str]) -> None:
    """`submit --gpu-model ""` was dropped without a word (the job took any model); the API refuses it."""
    out = cli(served, "submit", "pinned", "--gpus", "1", "--gpu-model", "", "--", "true")
    assert out.returncode == 2 and "gpu_model" in out.stderr, out.stderr
