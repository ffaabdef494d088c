"""A throw-away Slurm on this host: munged, slurmctld and one slurmd per emulated node, with fake GPUs.

Used by the pytest fixture (tests/slurm) and by `disagg bench slices --engine slurm`. Needs root
and Debian's `slurm-wlm` and `munge` (Slurm 22.05). Everything lives in a temporary directory and
in a private network namespace created here (so its ports are free by construction and nothing
listens on the host's own network): slurmctld and the static nodes' slurmd run inside it on a
bridge, and slice machines joined later by the engine plug their own namespaces into that bridge.
Daemons are started in the foreground as children of this process and stopped by pid.

Static nodes stand for the physical machines that users also submit to directly (`sbatch`
outside disagg); their GPUs are character devices named `gpu<i>`, GRES index i being the i-th
device id of the node.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from disagg.engines.slurm_node import _ip, _make_device_file
from disagg.engines.slurm_site import SlurmError, SlurmSite, StaticNode
from disagg.model import Cluster

#: Debian package names that provide what `SlurmCluster` starts.
APT_PACKAGES = ("slurm-wlm", "munge")
_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "srun", "ip", "nsenter")

CTL_PORT = 6817      # inside the private namespace, so always free
SLURMD_PORT = 6818   # the port every dynamic node listens on (one per namespace)
STATIC_PORT0 = 7001  # static node i listens on STATIC_PORT0 + i
#: The cluster's directories and their modes (`SlurmCluster._write_files` says why).
_MODES = {"etc": 0o755, "munge": 0o711, "spool": 0o711, "nodes": 0o711, "dev": 0o711, "run": 0o700,
          "state": 0o700, "log": 0o700, "jobs": 0o700}


def missing_binaries() -> list[str]:
    """The programs a throw-away Slurm needs that are not on PATH."""
    return [b for b in _BINARIES if shutil.which(b) is None]


def unavailable_reason() -> str | None:
    """Why a throw-away Slurm cannot start here, or None when it can."""
    if os.geteuid() != 0:
        return "a throw-away Slurm needs root (SlurmUser=root, network namespaces, mknod)"
    missing = missing_binaries()
    if missing:
        return f"missing programs {missing}; install the Debian packages {' '.join(APT_PACKAGES)}"
    return None


def install_packages(timeout_s: float = 300.0) -> None:
    """apt-get install slurm-wlm munge (root only). Raises SlurmError with apt's message on failure."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *APT_PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise SlurmError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")


def default_nodes(
    count: int = 4, gpus: int = 4, cpus: int = 16, memory_mb: int = 64000
) -> tuple[StaticNode, ...]:
    """`count` static nodes `n0…` standing for machines `m0…` with `gpus` GPUs each (`m<i>/gpu<j>`)."""
    return tuple(
        StaticNode(f"n{i}", f"m{i}", cpus, memory_mb, tuple(f"m{i}/gpu{j}" for j in range(gpus)))
        for i in range(count)
    )


class SlurmCluster:
    """Start with `start()` (or as a context manager), stop with `stop()`; `site` is what engines need."""

    def __init__(self, nodes: Sequence[StaticNode] | None = None, root: Path | None = None,
                 max_dynamic_nodes: int = 64, slurmd_timeout_s: int = 5) -> None:
        self.nodes = tuple(nodes) if nodes is not None else default_nodes()
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="disagg-slurm-"))
        tag = secrets.token_hex(3)
        self.site = SlurmSite(
            root=self.root, conf=self.root / "etc" / "slurm.conf", netns=f"disagg-s{tag}",
            bridge="dbr0", subnet="10.77.0", static_nodes=self.nodes, workdirs=self.root / "work",
        )
        self.max_dynamic_nodes = max_dynamic_nodes
        self.slurmd_timeout_s = slurmd_timeout_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- files -------------------------------------------------------------------------------
    def _munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def slurm_conf(self) -> str:
        """The slurm.conf of this throw-away cluster (the facts behind each line: docs/slurm.md)."""
        r, site = self.root, self.site
        lines = [
            "ClusterName=disagg",
            f"SlurmctldHost={socket.gethostname()}({site.controller_addr})",
            f"SlurmctldPort={CTL_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._munge_socket()}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",   # created per node before its slurmd starts
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd.%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd.%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "SchedulerParameters=batch_sched_delay=0",
            "GresTypes=gpu",
            "MpiDefault=none",
            "JobRequeue=0",                       # disagg's controller decides what is re-queued
            "ReturnToService=2",
            f"SlurmdTimeout={self.slurmd_timeout_s}",   # a killed slurmd is noticed in seconds
            "MinJobAge=600",
            f"MaxNodeCount={len(self.nodes) + self.max_dynamic_nodes}",
            f"Nodeset=dynset Feature={site.feature}",
        ]
        host = socket.gethostname()
        for i, n in enumerate(self.nodes):
            gres = f" Gres=gpu:{len(n.gpus)}" if n.gpus else ""
            lines.append(f"NodeName={n.name} NodeHostname={host} NodeAddr={site.controller_addr} "
                         f"Port={STATIC_PORT0 + i} CPUs={n.cpus} RealMemory={n.memory_mb}{gres} "
                         "State=UNKNOWN")
        names = ",".join(n.name for n in self.nodes)
        lines.append(f"PartitionName=static Nodes={names} Default=YES MaxTime=INFINITE State=UP")
        lines.append(f"PartitionName={site.partition} Nodes=dynset MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def gres_conf(self) -> str:
        out = ["AutoDetect=off"]
        for n in self.nodes:
            for i in range(len(n.gpus)):
                out.append(f"NodeName={n.name} Name=gpu File={self.root / 'dev' / n.name / f'gpu{i}'}")
        return "\n".join(out) + "\n"

    def _write_files(self) -> None:
        """The cluster's directory, each part as open as tenants' jobs need it and no more (as on a real
        site): jobs (as their tenant's user) pass through the root, read slurm.conf, reach munged's socket
        (`srun` inside a job authenticates through it) and the node spool holding their batch script;
        slurmctld's state (every job's script and environment), the logs and disagg's records are root's."""
        for sub, mode in _MODES.items():
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(self.root / sub, mode)
        os.chmod(self.root, 0o711)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            os.chmod(key, 0o400)
        for n in self.nodes:
            (self.root / "spool" / n.name).mkdir(exist_ok=True)
            os.chmod(self.root / "spool" / n.name, 0o755)
            (self.root / "dev" / n.name).mkdir(exist_ok=True)
            for i in range(len(n.gpus)):
                _make_device_file(self.root / "dev" / n.name / f"gpu{i}")
        self.site.conf.write_text(self.slurm_conf())
        (self.root / "etc" / "gres.conf").write_text(self.gres_conf())
        for conf in (self.site.conf, self.root / "etc" / "gres.conf"):
            os.chmod(conf, 0o644)
        self.site.save()

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, key: str, args: list[str], in_netns: bool = True) -> None:
        log = open(self.root / "log" / f"{key}.out", "ab")  # noqa: SIM115 - lives as long as the daemon
        cmd = [*self.site.prefix(), *args] if in_netns else args
        self.procs[key] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, env=self.site.env(),
                                           start_new_session=True, cwd=self.root)   # cores land here
        log.close()

    def _make_netns(self) -> None:
        ns = str(self.site.netns)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # a fixed MAC: by default a bridge takes the lowest MAC of its ports, so it would change as slice
        # machines come and go, and nodes' ARP entries for slurmctld would point nowhere
        _ip("-n", ns, "link", "add", self.site.bridge, "address", "02:00:0a:4d:00:01", "type", "bridge")
        _ip("-n", ns, "addr", "add", f"{self.site.controller_addr}/24", "dev", self.site.bridge)
        _ip("-n", ns, "link", "set", self.site.bridge, "up")

    def start(self, timeout_s: float = 30.0) -> SlurmSite:
        """Write the config, start munged, slurmctld and the static slurmd; wait until every node is idle."""
        reason = unavailable_reason()
        if reason:
            raise SlurmError(reason)
        self._write_files()
        try:
            self._make_netns()
            m = self.root / "munge"
            self._spawn("munged", ["munged", "-F", "--force", "-S", str(self._munge_socket()),
                                   f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                                   f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munge.seed'}"],
                        in_netns=False)
            self._wait(lambda: self._munge_socket().exists(), timeout_s, "munged did not create its socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.site.conf)])
            for n in self.nodes:
                self._spawn(f"slurmd.{n.name}", ["slurmd", "-D", "-N", n.name, "-f", str(self.site.conf)])
            self._wait(self._all_idle, timeout_s, "static nodes did not become idle")
        except BaseException:
            self.stop()
            raise
        return self.site

    def _all_idle(self) -> bool:
        for key, daemon in self.procs.items():
            if daemon.poll() is not None:
                log = (self.root / "log" / f"{key}.out").read_text()[-600:]
                raise SlurmError(f"{key} exited {daemon.returncode}: {log}")
        proc = self.site.run(["sinfo", "-h", "-p", "static", "-t", "idle", "-o", "%D"], check=False)
        return proc.returncode == 0 and proc.stdout.strip() == str(len(self.nodes))

    @staticmethod
    def _wait(cond: object, timeout_s: float, what: str) -> None:
        assert callable(cond)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.05)
        raise SlurmError(f"{what} within {timeout_s:.0f} s")

    def stop(self) -> None:
        """Stop slice machines' namespaces, the slurmd, slurmctld and munged by pid; remove the namespaces.

        The temporary directory is removed when this object created it.
        """
        ns = str(self.site.netns)
        for path in sorted(Path("/run/netns").glob(f"{ns}-n*")):
            _kill_netns(path.name)
            subprocess.run(["ip", "netns", "del", path.name], capture_output=True, check=False)
        for key in reversed(list(self.procs)):
            proc = self.procs[key]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if Path(f"/run/netns/{ns}").exists():
            _kill_netns(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _kill_netns(name: str) -> None:
    """SIGKILL every process left in a namespace (job steps of a node whose slurmd is gone)."""
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                          check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def nodes_for(cluster: Cluster) -> tuple[StaticNode, ...]:
    """One static node per machine of a disagg cluster, named after it, with its local GPUs in index order."""
    nodes = []
    for m in cluster.machines:
        gpus = sorted((d for d in cluster.devices if d.location == m.name and d.kind == "gpu"), key=lambda d: d.index)
        nodes.append(StaticNode(m.name, m.name, max(1, int(m.cpus)), max(1, int(m.memory_gb * 1024)),
                                tuple(d.id for d in gpus)))
    return tuple(nodes)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m disagg.engines.slurm_cluster [--cluster SPEC] [--root DIR]`: a throw-away Slurm until Ctrl-C.

    Prints the site file to give `disagg serve` (`engine: slurm`, `slurm_site: <it>`).
    """
    import argparse
    import sys
    import threading

    from disagg.model import SpecError, load_cluster

    parser = argparse.ArgumentParser(prog="python -m disagg.engines.slurm_cluster",
                                     description="Run a throw-away Slurm (root) until interrupted.")
    parser.add_argument("--cluster", help="a disagg cluster spec: one static node per machine, with its GPUs")
    parser.add_argument("--root", help="directory for its files (default: a new temporary one, removed at exit)")
    args = parser.parse_args(argv)
    try:
        nodes = nodes_for(load_cluster(args.cluster)) if args.cluster else None
    except (SpecError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    cluster = SlurmCluster(nodes=nodes, root=Path(args.root) if args.root else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        site = cluster.start()
        sys.stdout.write(f"{site.root / 'site.json'}\n")
        sys.stdout.flush()
        stop.wait()
    except KeyboardInterrupt:
        pass
    except SlurmError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
