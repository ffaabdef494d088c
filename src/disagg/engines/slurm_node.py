"""A slice machine joins and leaves Slurm as a dynamic node with exactly its composed GPUs.

Why dynamic nodes (see docs/design-decisions.md, "Slurm: a slice machine is a dynamic node"):
Slurm 22.05 cannot change the GPU count of a node whose GPUs are backed by device files at
runtime, and a static node needs a slurm.conf rewrite plus a slurmctld restart (1–4 s, for every
slice, serialised). A dynamic node (`slurmd -Z`) registers itself with its own gres.conf in
≈ 0.1–0.4 s and is deleted with `scontrol delete`. Slurm allows one dynamic node per IP address
(`--conf` takes no `Port=`), so each slice machine gets its own network namespace with a veth
into the site's bridge: the namespace is the emulated machine that boots and joins.

Everything a node is lives in `<site.root>/nodes/<name>/`: `slurm.conf` (a copy, so gres.conf
next to it is this node's), `gres.conf`, `dev/gpu<i>` (character devices standing for the slice's
devices, GRES index i = `devices[i]`), `node.json` (devices, address, namespace). Join and leave
are idempotent and survive a restart of the process that called them (slurmd is its own session).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from disagg.engines.local_runner import write_atomic
from disagg.engines.slurm_site import SlurmError, SlurmSite


@dataclass(frozen=True)
class NodeSpec:
    """What a slice machine brings to Slurm."""

    name: str
    cpus: int
    memory_mb: int
    devices: tuple[str, ...] = ()   # disagg device ids, GRES index i is devices[i]


@dataclass(frozen=True)
class JoinedNode:
    """A slice machine's record on disk."""

    name: str
    devices: tuple[str, ...]
    index: int          # host part of its address; also names its namespace and veth
    netns: str          # the namespace that stands for the machine
    cpus: int = 1
    memory_mb: int = 1

    @property
    def spec(self) -> NodeSpec:
        return NodeSpec(self.name, self.cpus, self.memory_mb, self.devices)


def valid_node_name(name: str) -> bool:
    """Slurm node names that hostlist expressions and our paths handle: letters, digits, `-`, `_`."""
    return (bool(name) and len(name) <= 60 and name[0].isalpha()
            and all(c.isalnum() or c in "-_" for c in name))


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SlurmError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _make_device_file(path: Path) -> None:
    """A character device (like /dev/null) that Slurm can hand out as one GPU."""
    if not path.exists():
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        path.chmod(0o666)  # whatever the umask, as /dev/nvidia* are


class DynamicNodes:
    """Joins slice machines to a site's Slurm as dynamic nodes in their own network namespaces."""

    def __init__(self, site: SlurmSite, join_timeout_s: float = 15.0) -> None:
        if not site.netns or not site.bridge:
            raise SlurmError("slurm site has no network namespace and bridge for dynamic nodes "
                             "(fields netns, bridge)")
        self.site = site
        self.join_timeout_s = join_timeout_s
        site.nodes_dir.mkdir(parents=True, exist_ok=True)

    # -- records -----------------------------------------------------------------------------
    def node_dir(self, name: str) -> Path:
        return self.site.nodes_dir / name

    def record(self, name: str) -> JoinedNode | None:
        """The on-disk record of a joined (or half-joined) node, or None."""
        path = self.node_dir(name) / "node.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:  # never joined, or left (its directory removed) since it was listed
            return None
        return JoinedNode(name, tuple(data["devices"]), int(data["index"]), str(data["netns"]),
                          int(data.get("cpus", 1)), int(data.get("memory_mb", 1)))

    def joined(self) -> list[JoinedNode]:
        """Every node this site's disagg has records for (joined or half-joined)."""
        out = []
        for path in sorted(self.site.nodes_dir.glob("*/node.json")):
            rec = self.record(path.parent.name)
            if rec is not None:
                out.append(rec)
        return out

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Address allocation and namespace set-up are serialised across processes."""
        with open(self.site.nodes_dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _allocate(self, spec: NodeSpec) -> JoinedNode:
        used = {n.index for n in self.joined()}
        free = [i for i in range(2, 255) if i not in used]
        if not free:
            raise SlurmError(f"no free address in {self.site.subnet}.0/24 for node {spec.name}")
        rec = JoinedNode(spec.name, spec.devices, free[0], f"{self.site.netns}-n{free[0]}", spec.cpus,
                         spec.memory_mb)
        d = self.node_dir(spec.name)
        (d / "dev").mkdir(parents=True, exist_ok=True)
        # Whole or not at all: joined() reads records without the lock, so never a half-written one.
        write_atomic(d / "node.json", json.dumps({"devices": list(spec.devices), "index": rec.index,
                                                  "netns": rec.netns, "cpus": spec.cpus,
                                                  "memory_mb": spec.memory_mb}), mode=0o644)
        return rec

    # -- join --------------------------------------------------------------------------------
    def slurmd_pid(self, name: str) -> int | None:
        """The pid of the node's slurmd if it runs."""
        pidfile = self.node_dir(name) / "slurmd.pid"
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            return None
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)   # reap it if it is our child and died (a zombie looks alive)
        try:
            proc = psutil.Process(pid)
            # right after start it may still be `nsenter`, about to exec slurmd
            alive = proc.status() != psutil.STATUS_ZOMBIE and proc.name() in ("slurmd", "nsenter")
        except psutil.Error:
            return None
        return pid if alive else None

    def join(self, spec: NodeSpec) -> JoinedNode:
        """Boot the slice machine (namespace + slurmd) and wait until Slurm shows it idle. Idempotent."""
        if not valid_node_name(spec.name):
            raise SlurmError(f"slice machine name {spec.name!r} is not a valid Slurm node name "
                             "(a letter, then letters, digits, '-' or '_', at most 60)")
        with self._locked():
            rec = self.record(spec.name)
            if rec is not None and rec.devices != spec.devices:
                raise SlurmError(f"node {spec.name} already joined with devices {list(rec.devices)}, "
                                 f"not {list(spec.devices)}")
            if rec is None:
                rec = self._allocate(spec)
            if self.slurmd_pid(spec.name) is None:
                self._write_config(spec)
                self._make_netns(rec)
                self._start_slurmd(spec, rec)
        for attempt in range(3):
            try:
                self._wait_joined(spec.name)
                return rec
            except SlurmError:
                # slurmd gives up ("Unable to contact slurm controller") when its first connection fails;
                # start it again unless it is still running (then it is genuinely slow)
                if attempt == 2 or self.slurmd_pid(spec.name) is not None:
                    raise
                with self._locked():
                    self._start_slurmd(spec, rec)
        return rec

    def _write_config(self, spec: NodeSpec) -> None:
        d = self.node_dir(spec.name)
        text = self.site.conf.read_text()
        (d / "slurm.conf").write_text(text)
        # slurmd hands this copy to the node's jobs (SLURM_CONF): their `srun`, as the tenant's user, reads it
        d.chmod(0o711)
        (d / "slurm.conf").chmod(0o644)
        for line in text.splitlines():   # slurmd does not create its spool directory itself
            if line.strip().lower().startswith("slurmdspooldir="):
                spool = Path(line.split("=", 1)[1].strip().replace("%n", spec.name))
                spool.mkdir(parents=True, exist_ok=True)
                spool.chmod(0o755)   # jobs run their batch script from here, as their tenant's user
        lines = []
        for i in range(len(spec.devices)):
            _make_device_file(d / "dev" / f"gpu{i}")
            lines.append(f"Name=gpu File={d / 'dev' / f'gpu{i}'}")
        (d / "gres.conf").write_text("AutoDetect=off\n" + "\n".join(lines) + "\n")
        (d / "gres.conf").chmod(0o644)

    def _make_netns(self, rec: JoinedNode) -> None:
        """A fresh namespace for the machine (called only while its slurmd is not running).

        One left by an earlier, interrupted join (the caller was killed half-way) may lack its veth or
        address, so it is never reused: whatever is there goes, and the namespace is built again.
        """
        if Path(f"/run/netns/{rec.netns}").exists():
            self._kill_namespace(rec)
            self._drop_veth(rec)
            _ip("netns", "del", rec.netns)
        host_if, node_if = f"dvh{rec.index}", f"dvn{rec.index}"
        self._drop_veth(rec)   # a previous holder of this index may still be in the kernel's cleanup
        _ip("netns", "add", rec.netns)
        _ip("-n", str(self.site.netns), "link", "add", host_if, "type", "veth", "peer", "name", node_if,
            "netns", rec.netns)
        _ip("-n", str(self.site.netns), "link", "set", host_if, "master", self.site.bridge, "up")
        _ip("-n", rec.netns, "addr", "add", f"{self.site.subnet}.{rec.index}/24", "dev", node_if)
        _ip("-n", rec.netns, "link", "set", node_if, "up")
        _ip("-n", rec.netns, "link", "set", "lo", "up")
        self._forget_address(rec)
        self._wait_reachable(rec)

    def _drop_veth(self, rec: JoinedNode) -> None:
        """Delete the node's veth pair now: `ip netns del` leaves it to the kernel's asynchronous
        namespace cleanup, and a new node on the same index would find the name taken."""
        subprocess.run(["ip", "-n", str(self.site.netns), "link", "del", f"dvh{rec.index}"],
                       capture_output=True, check=False)

    def _forget_address(self, rec: JoinedNode) -> None:
        """Drop slurmctld's ARP entry for the address: a node that had it before left a stale MAC that
        would swallow slurmctld's replies to the new node for up to a minute (seen as 'Unable to
        register: connect failure')."""
        subprocess.run(["ip", "-n", str(self.site.netns), "neigh", "flush", "to",
                        f"{self.site.subnet}.{rec.index}"], capture_output=True, check=False)

    def _wait_reachable(self, rec: JoinedNode, timeout_s: float = 5.0) -> None:
        """Until a TCP connection from the node's namespace to slurmctld succeeds (the veth is up)."""
        probe = f"exec 3<>/dev/tcp/{self.site.controller_addr}/{self.site.controller_port}"
        deadline = time.monotonic() + timeout_s
        while True:
            proc = subprocess.run(["nsenter", f"--net=/run/netns/{rec.netns}", "bash", "-c", probe],
                                  capture_output=True, check=False, timeout=timeout_s)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"slurmctld at {self.site.controller_addr} is not reachable from {rec.netns}")
            time.sleep(0.02)

    def _start_slurmd(self, spec: NodeSpec, rec: JoinedNode) -> None:
        d = self.node_dir(spec.name)
        conf = f"CPUs={spec.cpus} RealMemory={spec.memory_mb} Feature={self.site.feature}"
        if spec.devices:
            conf += f" Gres=gpu:{len(spec.devices)}"
        with open(d / "slurmd.out", "ab") as out:
            # `nsenter --net`, not `ip netns exec`: the latter remounts /sys and slurmd loses its cgroup view.
            proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{rec.netns}", "slurmd", "-D", "-Z", "-N", spec.name,
                 "-f", str(d / "slurm.conf"), "--conf", conf],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "SLURM_CONF": str(d / "slurm.conf")}, cwd=d,
            )
        (d / "slurmd.pid").write_text(str(proc.pid))

    def down(self, name: str, ask_slurm: bool = True) -> str | None:
        """Why a joined slice machine is down (its slurmd is gone, or Slurm says so), None if it is up
        or was never joined / already left (then it is not a failure)."""
        if self.record(name) is None:
            return None
        if self.slurmd_pid(name) is None:
            return "its slurmd is gone"
        if ask_slurm:
            state = self.node_state(name) or []
            bad = [s for s in state if s in ("DOWN", "NOT_RESPONDING", "FAIL", "FAILING")]
            if bad:
                return f"Slurm shows it {'+'.join(bad)}"
        return None

    def node_state(self, name: str) -> list[str] | None:
        """Slurm's state of a node as words (['IDLE', 'DYNAMIC_NORM']), or None if Slurm does not know it."""
        proc = self.site.run(["scontrol", "-o", "show", "node", name], check=False)
        if proc.returncode != 0 or "State=" not in proc.stdout:
            return None
        state = proc.stdout.split("State=", 1)[1].split()[0]
        return state.upper().split("+")

    def _wait_joined(self, name: str) -> None:
        deadline = time.monotonic() + self.join_timeout_s
        delay = 0.02
        while time.monotonic() < deadline:
            state = self.node_state(name)
            if state and state[0] in ("IDLE", "MIXED", "ALLOCATED") and "NOT_RESPONDING" not in state:
                return
            if self.slurmd_pid(name) is None:
                break
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        log = self.node_dir(name) / "slurmd.out"
        tail = log.read_text()[-800:] if log.exists() else ""
        raise SlurmError(f"node {name} did not join Slurm (state {self.node_state(name)}): {tail}")

    # -- leave -------------------------------------------------------------------------------
    def leave(self, name: str) -> None:
        """Stop what the slice machine runs, delete the node from Slurm, free its namespace. Idempotent."""
        rec = self.record(name)
        self._drain_jobs(name)
        if rec is not None:
            self._kill_namespace(rec)
        self._delete_from_slurm(name)
        with self._locked():
            if rec is not None:
                self._drop_veth(rec)
                if Path(f"/run/netns/{rec.netns}").exists():
                    _ip("netns", "del", rec.netns)
                self._forget_address(rec)
            shutil.rmtree(self.node_dir(name), ignore_errors=True)

    def _kill_namespace(self, rec: JoinedNode) -> None:
        """SIGKILL slurmd and every job step process in the node's namespace (the machine powers off)."""
        for _ in range(20):
            pids = _netns_pids(rec)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def kill_user_processes(self, name: str, uid: int | None = None) -> int:
        """SIGKILL every process of user `uid` (None: of every user but root) on the slice machine (its
        namespace): a job's tasks and its batch script, at once — Slurm's own kill waits for `KillWait`
        after its SIGTERM. slurmd and slurmstepd (root's) stay, and see the job end. Returns how many
        were signalled. uid 0 refused."""
        rec = self.record(name)
        if uid == 0:
            raise ValueError("kill_user_processes: uid 0 would kill the node's own daemons")
        if rec is None:
            return 0
        killed = 0
        for pid in _netns_pids(rec):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                real = psutil.Process(pid).uids().real
                if real == uid or (uid is None and real != 0):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed

    def _busy(self, name: str) -> bool:
        state = self.node_state(name) or []
        return any(s in ("ALLOCATED", "MIXED", "COMPLETING") for s in state)

    def _drain_jobs(self, name: str, timeout_s: float = 10.0) -> None:
        """Cancel whatever still runs on the node and, while its slurmd lives, let the jobs end cleanly.

        A job that ends while slurmd is up leaves the node IDLE at once; killing slurmd first leaves the
        job COMPLETING until slurmctld gives up on the node (SlurmdTimeout). The machine is going away, so
        its jobs' own processes (every one not root's: the tasks and the batch script) are killed at once
        (`kill_user_processes`), as the local engine's cancel kills its tasks: a task that caught scancel's
        SIGTERM and carried on would otherwise hold the node for Slurm's `KillWait` (30 s) and this wait
        would run out, leaving the job COMPLETING and the node's deletion waiting some 25 s more (a
        teardown of 36 s, measured). Any grace the job has is given before (`terminate`, a preemption's).
        """
        if not self._busy(name):
            return
        self.site.run(["scancel", f"--nodelist={name}"], check=False)
        rec = self.record(name)
        if rec is not None and self.slurmd_pid(name) is None and Path(f"/run/netns/{rec.netns}").exists():
            # its slurmd died mid-job: boot it again so the job is cleared now (it re-registers without
            # the job), not after slurmctld gives up on the node (≈ 25 s with SlurmdTimeout=5)
            with self._locked():
                self._start_slurmd(rec.spec, rec)
        self.kill_user_processes(name)
        deadline = time.monotonic() + timeout_s
        while self._busy(name) and self.slurmd_pid(name) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def _delete_from_slurm(self, name: str, timeout_s: float = 60.0) -> None:
        """`scontrol delete`, retried while Slurm still counts a job on the node.

        Never `scontrol update state=down` to hurry it: on 22.05 that, on dynamic nodes whose jobs are
        completing, crashed slurmctld (measured, docs/slurm.md). A node whose slurmd died mid-job is
        freed by slurmctld itself after SlurmdTimeout.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if self.node_state(name) is None:
                return
            proc = self.site.run(["scontrol", "delete", f"nodename={name}"], check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"scontrol delete nodename={name}: {proc.stderr.strip()}")
            time.sleep(0.1)


def _netns_pids(rec: JoinedNode) -> list[int]:
    """The processes in the node's network namespace (none once the namespace is gone)."""
    if not Path(f"/run/netns/{rec.netns}").exists():
        return []
    out = subprocess.run(["ip", "netns", "pids", rec.netns], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]
