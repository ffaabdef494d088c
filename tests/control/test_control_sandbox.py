"""Issue 22's attacks on the local engine's sandbox, tried against a real `disagg serve` as root with
three tenants: alice and bob (each job in namespaces of its own, loopback only) and carol (the host's
network, `tenants.carol.network: host`). Each attack succeeded before jobs ran under bubblewrap: a job
saw every process's command line, reached another job's server on 127.0.0.1, shared /tmp, /dev/shm and
IPC (and left files there), filled the disk, got a 100 GiB memory limit on a 24 GB host; the
controller was an OOM victim like any job.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from control_helpers import TEST_CGROUP, Server, Tenants, admin_token, wait_for
from fastapi.testclient import TestClient

from disagg.api.app import create_app
from disagg.engines.base import SliceMachine, SliceSpec
from disagg.engines.cgroups import detect
from disagg.engines.local import Isolation, LocalEngine

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other Unix users needs root (CI is root)")

FAST = ["--latency-scale", "0.002", "--tick-s", "0.02", "--round-gap-s", "0.02"]
SECRET = "--api-key=bob-secret-93e1"
DISK_MB = 20


@dataclass
class Tenants3(Tenants):
    TASK: ClassVar[dict[str, Any]] = {"count": 1, "cpus": 0.2, "memory_gb": 0.5}
    TIMEOUT_S: ClassVar[float] = 30.0
    WAIT_S: ClassVar[float] = 60.0

    def said(self, who: str, job_id: str, word: str, timeout: float = 60.0) -> str:
        """Wait until the job's log has a line starting with `word`; what follows it."""
        self.until(who, job_id, lambda: f"{word} " in self.logs(who, job_id), timeout, f"saying {word}")
        return self.logs(who, job_id).split(f"{word} ", 1)[1].split("\n", 1)[0]

    def run(self, who: str, script: str, **tasks: Any) -> str:
        """Run a python3 script as `who`'s job to its end; its log."""
        job_id = self.submit(who, ["python3", "-c", script], tasks)
        self.wait(who, job_id, "completed", "failed")
        return self.logs(who, job_id)

    def cancel(self, who: str, job_id: str) -> None:
        r = httpx.post(f"{self.server.url}/v1/jobs/{job_id}/cancel", headers=self.h(who), timeout=30)
        assert r.status_code == 202, r.text


@pytest.fixture(scope="module")
def three() -> Iterator[Tenants3]:
    root = Path(tempfile.mkdtemp(prefix="disagg-sandbox-"))
    root.chmod(0o755)
    config = root / "disagg.yaml"
    config.write_text("tenants: [{name: alice}, {name: bob}, {name: carol, network: host}]\n"
                      f"job_disk_mb: {DISK_MB}\njob_tmp_mb: 16\nhttp_header_timeout_s: 2\n")
    server = Server(root, f"sqlite:///{root / 'd.db'}", [*FAST, "--config", str(config)])
    server.start()
    try:
        server.ready()
        admin = {"Authorization": f"Bearer {admin_token(root)}"}
        tokens = {"admin": admin_token(root)}
        for tenant in ("alice", "bob", "carol"):
            r = httpx.post(server.url + "/v1/tokens", headers=admin, json={"tenant": tenant}, timeout=10)
            assert r.status_code == 201, r.text
            tokens[tenant] = r.json()["token"]
        yield Tenants3(server, root, tokens)
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)


LIST_PROCESSES = """
import os
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            print('PROC', open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
        except OSError:
            pass
"""


def test_a_job_sees_no_other_jobs_processes_nor_the_controllers(three: Tenants3) -> None:
    bob = three.submit("bob", ["python3", "-c", "import time; print('UP', 1, flush=True); time.sleep(300)", SECRET])
    three.said("bob", bob, "UP")
    seen = three.run("alice", LIST_PROCESSES)
    three.cancel("bob", bob)
    procs = [line for line in seen.splitlines() if line.startswith("PROC ")]
    assert procs and SECRET not in seen and "serve" not in seen, procs
    assert len(procs) <= 4, procs  # bwrap's first process, the job's python (and nothing of the host's)


SERVE = """
import http.server, socket, sys
srv = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)
print('PORT', srv.server_address[1], flush=True)
srv.timeout = 120
srv.handle_request()
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3).close()
    print('REACHED')
except OSError as exc:
    print('REFUSED', type(exc).__name__)
"""


def test_another_jobs_loopback_server_is_unreachable(three: Tenants3) -> None:
    bob = three.submit("bob", ["python3", "-c", SERVE])
    port = three.said("bob", bob, "PORT")
    job = three.submit("alice", ["python3", "-c", CONNECT, port])
    three.wait("alice", job, "completed")
    assert "REFUSED" in three.logs("alice", job), three.logs("alice", job)
    three.cancel("bob", bob)


def test_a_jobs_tasks_share_their_loopback(three: Tenants3) -> None:
    both = ("import os, subprocess, sys, time\n"
            "if os.environ['DISAGG_TASK_INDEX'] == '0':\n"
            "    import http.server\n"
            "    srv = http.server.HTTPServer(('127.0.0.1', 18321), http.server.SimpleHTTPRequestHandler)\n"
            "    srv.timeout = 30\n"
            "    srv.handle_request()\n"
            "else:\n"
            "    import socket\n"
            "    for _ in range(100):\n"
            "        try:\n"
            "            s = socket.create_connection(('127.0.0.1', 18321), timeout=3)\n"
            "            s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
            "            print('REACHED'); break\n"
            "        except OSError:\n"
            "            time.sleep(0.1)\n")
    log = three.run("alice", both, count=2)
    assert "[task 1] REACHED" in log, log


SHARE = """
import os, sys, time
mark = sys.argv[1]
open(f'/tmp/{mark}', 'w').write('x')
open(f'/dev/shm/{mark}', 'w').write('y' * 1000)
print('WROTE', 1, flush=True)
time.sleep(float(sys.argv[2]))
"""
LOOK = """
import os, sys
print('SEEN', sorted(set(os.listdir('/tmp')) | set(os.listdir('/dev/shm'))))
"""


def test_tmp_and_shm_are_private_and_go_with_the_job(three: Tenants3) -> None:
    mark = f"bob-mark-{time.time_ns()}"
    bob = three.submit("bob", ["python3", "-c", SHARE, mark, "300"])
    three.said("bob", bob, "WROTE")
    seen = three.run("alice", LOOK)
    assert mark not in seen and "SEEN" in seen, seen
    assert not Path(f"/tmp/{mark}").exists() and not Path(f"/dev/shm/{mark}").exists()  # not on the host either
    three.cancel("bob", bob)
    three.wait("bob", bob, "cancelled")
    assert not Path(f"/tmp/{mark}").exists() and not Path(f"/dev/shm/{mark}").exists()


def _ipc_of(user: str) -> list[str]:
    """The host's SysV IPC objects (shared memory, queues, semaphores) owned by `user` (`ipcs` cuts names)."""
    uid = str(pwd.getpwnam(user).pw_uid)
    found = []
    for kind in ("shm", "msg", "sem"):
        header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        at = header.split().index("uid")
        found += [f"{kind} {row}" for row in rows if row.split()[at] == uid]
    return found


def test_ipc_objects_are_the_jobs_own_and_go_with_it(three: Tenants3) -> None:
    before = set(_ipc_of("disagg-alice"))
    made = three.run("alice", "import subprocess\nfor kind in ('-M', '-Q', '-S'):\n"
                              "    print('MADE', subprocess.run(['ipcmk', kind, '4096' if kind == '-M' else '1'],"
                              " capture_output=True, text=True).stdout.strip())")
    assert made.count("MADE ") == 3 and made.count("id: ") == 3, made
    assert set(_ipc_of("disagg-alice")) - before == set()  # not on the host, nor left after the job


def test_a_job_filling_its_disk_is_killed_while_the_api_answers_and_a_cancel_succeeds(three: Tenants3) -> None:
    hog = three.submit("alice", ["sh", "-c", f"echo WORK $DISAGG_WORKDIR; fallocate -l {DISK_MB * 10}M big && "
                                             "echo FILLED 1; sleep 300"])
    work = Path(three.said("alice", hog, "WORK"))
    three.said("alice", hog, "FILLED")
    other = three.submit("bob", ["sleep", "300"])  # another tenant submits, and cancels, meanwhile
    three.wait("bob", other, "running")
    three.cancel("bob", other)
    assert three.wait("bob", other, "cancelled")["state"] == "cancelled"
    ended = three.wait("alice", hog, "failed", timeout=30)
    assert ended["exit_code"] == 137 and "past its disk limit" in three.logs("alice", hog)
    assert not (work / "big").exists(), "the file outlived the kill"
    assert httpx.get(three.server.url + "/healthz", timeout=10).json()["status"] in ("ok", "degraded")


def test_the_controller_is_the_oom_killers_last_choice_and_a_task_its_first(three: Tenants3) -> None:
    log = three.run("alice", "print('ADJ', open('/proc/self/oom_score_adj').read().strip())")
    task = int(log.split("ADJ ")[1].split()[0])
    controller = int(Path(f"/proc/{three.server.pid}/oom_score_adj").read_text())
    assert task > 0 and controller <= 0 and task > controller, (task, controller)  # -900 where root may lower it


def test_a_host_network_job_reaches_the_api_a_loopback_one_does_not(three: Tenants3) -> None:
    port = str(three.server.port)
    assert "REFUSED" in three.run("alice", CONNECT.replace("sys.argv[1]", port))
    assert "REACHED" in three.run("carol", CONNECT.replace("sys.argv[1]", port))


HOLD = """
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    try:
        s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
        s.sendall(b'GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n')  # and never the end of the headers
        held.append(s)
    except OSError:
        pass
print('HOLDING', len(held), flush=True)
end = time.time() + float(sys.argv[3])
while time.time() < end:  # open again what the server cut (its header timeout)
    for i, s in enumerate(held):
        try:
            s.send(b'X')
        except OSError:
            try:
                held[i] = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
                held[i].sendall(b'GET /healthz HTTP/1.1\\r\\n')
            except OSError:
                pass
    time.sleep(0.2)
"""


def test_the_api_answers_others_while_a_loopback_job_holds_300_slow_connections(three: Tenants3) -> None:
    """A loopback-only job cannot reach the API at all; its 300 connections hold nothing."""
    hog = three.submit("alice", ["python3", "-c", HOLD, str(three.server.port), "300", "60"])
    three.said("alice", hog, "HOLDING")
    codes = [httpx.get(three.server.url + "/v1/jobs", headers=three.h("bob"), timeout=10).status_code
             for _ in range(20)]
    three.cancel("alice", hog)
    assert codes == [200] * 20, codes


def test_the_api_answers_others_while_a_host_network_job_holds_300_slow_connections(three: Tenants3) -> None:
    """The job reaches the API; it holds at most `http_max_connections_per_peer` (its tenant's Unix user):
    before, its 300 took all 256 and every other client got 503."""
    hog = three.submit("carol", ["python3", "-c", HOLD, str(three.server.port), "300", "60"])
    three.wait("carol", hog, "running")
    time.sleep(3)  # its connections open (its log cannot be polled through an API it may hold)
    codes = [httpx.get(three.server.url + "/v1/jobs", headers=three.h("bob"), timeout=10).status_code
             for _ in range(20)]
    three.cancel("carol", hog)
    assert codes == [200] * 20, codes
    assert "HOLDING 300" in three.logs("carol", hog)  # it did open them all (most were refused at once)


def _engine(tmp_path: Path) -> LocalEngine:
    return LocalEngine(tmp_path / "state" / "tasks", isolation=Isolation(cgroup_parent=TEST_CGROUP))


def _group_file(slice_id: str, name: str) -> Path:
    c = detect(TEST_CGROUP)
    group = c.group(f"{slice_id}.0")
    where = group.paths["memory"] if name.startswith("memory") and "memory" in group.paths else group.paths.get("v2")
    if name.startswith("pids") and "pids" in group.paths:
        where = group.paths["pids"]
    assert where is not None
    return Path(where) / name


def test_a_100_gb_task_on_a_smaller_host_gets_at_most_the_hosts_memory(tmp_path: Path) -> None:
    c = detect(TEST_CGROUP)
    if "memory" not in c.limits():
        pytest.skip("no memory controller here")
    engine = _engine(tmp_path)
    meminfo = Path("/proc/meminfo").read_text()
    total = next(int(x.split()[1]) * 1024 for x in meminfo.splitlines() if x.startswith("MemTotal:"))
    spec = SliceSpec(slice_id=f"s-mem-{os.getpid()}", job_id="j", command=("sleep", "30"),
                     machines=(SliceMachine("m0", "node0", 1, 100.0, ()),), tasks=1, tenant="t")
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    try:
        limit = "memory.limit_in_bytes" if "memory" in c.v1 else "memory.max"
        wait_for(lambda: _group_file(handle, limit).exists(), what="the task's group")
        wait_for(lambda: engine.status(handle).state == "running", what="the task to run")
        # the group's directory exists (its limit file reading "max") a moment before the limit is written;
        # a task joins its group only after: once one is in it, the limit is the one the task runs under
        procs = _group_file(handle, limit).parent / "cgroup.procs"
        wait_for(lambda: bool(procs.read_text().split()), what="the task in its group")
        got = int(_group_file(handle, limit).read_text())
        assert got < total < 100 * 2**30, (got, total)  # at most the jobs' share of the host
    finally:
        engine.cancel(handle)


def test_all_jobs_together_are_bounded_by_the_host_less_a_reserve(tmp_path: Path) -> None:
    _engine(tmp_path)
    c = detect(TEST_CGROUP)
    meminfo = Path("/proc/meminfo").read_text()
    total = next(int(x.split()[1]) * 1024 for x in meminfo.splitlines() if x.startswith("MemTotal:"))
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if "pids" in c.v1:
        assert int(Path(c.v1["pids"], "pids.max").read_text()) == pid_max - Isolation().reserve_pids
    elif "pids" in c.v2_controllers:
        assert int(Path(str(c.v2), "pids.max").read_text()) == pid_max - Isolation().reserve_pids
    if "memory" in c.v1:
        assert int(Path(c.v1["memory"], "memory.limit_in_bytes").read_text()) <= total - Isolation().reserve_memory
    elif "memory" in c.v2_controllers:
        assert int(Path(str(c.v2), "memory.max").read_text()) <= total - Isolation().reserve_memory


def test_low_disk_degrades_health_and_refuses_submissions_but_not_cancels(tmp_path: Path) -> None:
    from control_helpers import make_service, submit

    svc = make_service(tmp_path, min_free_disk_mb=1e9)  # more than any disk here has free
    try:
        queued = submit(svc, "alice")
        token = svc.store.create_token("alice")
        with TestClient(create_app(svc.jobs)) as client:
            auth = {"Authorization": f"Bearer {token}"}
            health = client.get("/healthz").json()
            assert health["status"] == "degraded" and "low disk" in health["cause"]
            r = client.post("/v1/jobs", headers=auth, json={"name": "q", "command": ["true"]})
            assert r.status_code == 503 and "min_free_disk_mb" in r.json()["detail"]
            assert client.post(f"/v1/jobs/{queued}/cancel", headers=auth).status_code == 202
    finally:
        svc.close()


def test_without_bwrap_a_root_controller_refuses_to_start_unless_allowed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None)
    with pytest.raises(ValueError, match="allow_no_sandbox"):
        LocalEngine(tmp_path / "a", isolation=Isolation(cgroup_parent=TEST_CGROUP))
    engine = LocalEngine(tmp_path / "b", isolation=Isolation(cgroup_parent=TEST_CGROUP, allow_no_sandbox=True))
    assert any("NO NAMESPACES" in n for n in engine.notes())


def test_jobs_on_the_stores_filesystem_are_refused_unless_accepted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allow_jobs_on_store_disk"):
        LocalEngine(tmp_path / "a", isolation=Isolation(cgroup_parent=TEST_CGROUP, store_dir=tmp_path))
    LocalEngine(tmp_path / "b", isolation=Isolation(cgroup_parent=TEST_CGROUP, store_dir=tmp_path,
                                                    allow_jobs_on_store_disk=True))



def test_a_shared_directory_beside_the_hidden_state_directory_is_reachable() -> None:
    """The state directory, the jobs' root and a shared directory all under one directory of /tmp (a
    chaos soak with --keep-dir): bwrap made that directory, in the sandbox's own /tmp, with the hidden
    state mount's 0700, and every job failed writing its marker (exit 2). The state stays hidden."""
    from disagg.engines.sandbox import task_argv

    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None or setpriv is None:
        pytest.skip("bubblewrap is not installed (scripts/test.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="disagg-keep-"))
    try:
        root.chmod(0o711)
        (root / "state").mkdir(mode=0o700)
        (root / "state" / "secret").write_text("controller only")
        work = root / "jobs" / "w"
        work.mkdir(parents=True)
        shared = root / "events.d"
        shared.mkdir()
        shared.chmod(0o755)  # explicitly: the suite runs under a umask that would leave it 0700
        marks = shared / "events"
        marks.touch(mode=0o666)
        marks.chmod(0o666)
        nobody = pwd.getpwnam("nobody")
        sandbox = {"bwrap": bwrap, "setpriv": setpriv, "nsenter": shutil.which("nsenter"), "network": "loopback",
                   "hide": [str(root / "state")], "hide_files": [], "jobs_dir": str(root / "jobs"),
                   "shared": [str(shared)], "tmp_bytes": 2**20}
        account = {"drop": True, "uid": nobody.pw_uid, "gid": nobody.pw_gid}
        script = f"echo ran >> {marks}; cat {root / 'state' / 'secret'} || echo hidden >> {marks}"
        import subprocess

        done = subprocess.run(task_argv(sandbox, account, str(work), ["sh", "-c", script]), capture_output=True,
                              text=True, timeout=60)
        assert marks.read_text().split() == ["ran", "hidden"], (done.returncode, done.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
