"""Where a Slurm lives and how to talk to it: the site description shared by the engine and the test cluster.

A site is a `slurm.conf` plus what disagg needs to know beyond it: the network namespace its
daemons run in (so every client command is run inside it), the bridge that dynamic nodes plug
into, the directory where disagg keeps device files, job scripts and outputs, and which cluster
machine and device ids stand behind each static Slurm node (so GPUs held by jobs submitted
outside disagg can be named in disagg's vocabulary). It is stored as `site.json` next to the
state it describes, so a restarted engine finds everything again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries the command and what it printed."""


@dataclass(frozen=True)
class StaticNode:
    """A node configured in slurm.conf: the physical machine it stands for, its GPUs in GRES order."""

    name: str
    machine: str
    cpus: int
    memory_mb: int
    gpus: tuple[str, ...] = ()   # disagg device ids; GRES index i is gpus[i]


@dataclass(frozen=True)
class SlurmSite:
    """How to reach one Slurm and where disagg keeps its files for it."""

    root: Path                      # disagg's directory for this site (devices, nodes, jobs)
    conf: Path                      # slurm.conf used by clients and by the slurmd of slice machines
    netns: str | None = None        # network namespace of slurmctld; None: the host's own
    bridge: str = ""                # bridge inside `netns` that dynamic nodes' veths join
    subnet: str = "10.77.0"         # /24 on the bridge; .1 is slurmctld, .2–.254 dynamic nodes
    partition: str = "disagg"       # partition made of the dynamic node set
    feature: str = "dyn"            # feature that puts a registering dynamic node into `partition`
    static_nodes: tuple[StaticNode, ...] = field(default_factory=tuple)
    #: where the jobs' working directories go, on a filesystem every node sees (None: the engine's
    #: default, `/var/lib/disagg/jobs/<hash of root>` as root); the controller's `jobs_dir` wins
    workdirs: Path | None = None

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: Path | None = None) -> Path:
        """Write the site as JSON (default `<root>/site.json`) and return the path."""
        target = path or self.root / "site.json"
        data = asdict(self)
        data["root"], data["conf"] = str(self.root), str(self.conf)
        data["workdirs"] = str(self.workdirs) if self.workdirs is not None else None
        target.write_text(json.dumps(data, indent=2))
        return target

    @classmethod
    def load(cls, path: Path) -> SlurmSite:
        """Read a site written by `save`. A missing field is an error naming it."""
        data = json.loads(Path(path).read_text())
        for key in ("root", "conf"):
            if key not in data:
                raise ValueError(f"slurm site {path}: field {key!r} is missing")
        nodes = tuple(
            StaticNode(n["name"], n["machine"], int(n["cpus"]), int(n["memory_mb"]), tuple(n.get("gpus", ())))
            for n in data.get("static_nodes", ())
        )
        return cls(
            root=Path(data["root"]),
            conf=Path(data["conf"]),
            netns=data.get("netns"),
            bridge=data.get("bridge", ""),
            subnet=data.get("subnet", "10.77.0"),
            partition=data.get("partition", "disagg"),
            feature=data.get("feature", "dyn"),
            static_nodes=nodes,
            workdirs=Path(data["workdirs"]) if data.get("workdirs") else None,
        )

    # -- paths -------------------------------------------------------------------------------
    @property
    def nodes_dir(self) -> Path:
        """One directory per slice machine: its slurm.conf copy, gres.conf, device files, address."""
        return self.root / "nodes"

    @property
    def jobs_dir(self) -> Path:
        """Job scripts, outputs and exit-code files (Slurm forgets finished jobs; these do not)."""
        return self.root / "jobs"

    @property
    def controller_addr(self) -> str:
        return f"{self.subnet}.1"

    @property
    def controller_port(self) -> int:
        """`SlurmctldPort` of the site's slurm.conf (6817 when it does not say)."""
        for line in self.conf.read_text().splitlines():
            key, _, value = line.strip().partition("=")
            if key.lower() == "slurmctldport" and value.strip().isdigit():
                return int(value)
        return 6817

    # -- commands ----------------------------------------------------------------------------
    def prefix(self) -> list[str]:
        """What to put in front of a command so it runs in the site's network namespace."""
        return ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(
        self, args: Sequence[str], check: bool = True, timeout: float = 30.0,
        env: Mapping[str, str] | None = None, cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (`scontrol`, `sbatch`, …) against this site: with the controller's
        environment, or with only `env` and `SLURM_CONF` (what a tenant's `sbatch` gets), in `cwd`."""
        cmd = [*self.prefix(), *args]
        environ = self.env() if env is None else {**env, "SLURM_CONF": str(self.conf)}
        proc = subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=timeout,
                              check=False, cwd=cwd)
        if check and proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip()
            raise SlurmError(f"{' '.join(args)} exited {proc.returncode}: {said}")
        return proc

    def json(self, args: Sequence[str]) -> dict[str, object]:
        """Run a client command with `--json` and parse what it prints.

        Output that is not JSON (seen once under load in the test suite, cause unknown) is tried
        again, three times in all, then reported with what the command printed.
        """
        for attempt in range(3):
            proc = self.run([*args, "--json"])
            try:
                parsed = json.loads(proc.stdout)
                break
            except json.JSONDecodeError:
                if attempt == 2:
                    raise SlurmError(f"{' '.join(args)} --json printed no JSON: {proc.stdout[:200]!r} "
                                     f"{proc.stderr.strip()[:300]!r}") from None
                time.sleep(0.1)
        if not isinstance(parsed, dict):
            raise SlurmError(f"{' '.join(args)} --json printed {type(parsed).__name__}, not an object")
        return parsed
