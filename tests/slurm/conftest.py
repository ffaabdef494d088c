"""A real, throw-away Slurm for the Slurm engine tests: one per test session, stopped by pid at the end.

When `slurm-wlm`/`munge` are missing and we are root, they are installed with apt-get (as the
README's test command does on a fresh machine); the tests skip, with the reason, only when that is
impossible (not root, or apt failed).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests import attacks

from disagg.engines.slurm import SlurmEngine
from disagg.engines.slurm_cluster import (
    SlurmCluster,
    default_nodes,
    install_packages,
    missing_binaries,
    unavailable_reason,
)
from disagg.engines.slurm_site import SlurmError


def _ensure_slurm() -> str | None:
    """None when a throw-away Slurm can start, else why not (after trying to install it)."""
    if os.geteuid() == 0 and missing_binaries():
        try:
            install_packages()
        except (SlurmError, OSError) as exc:
            return f"could not install slurm-wlm munge: {exc}"
    return unavailable_reason()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged + slurmctld + 4 static nodes n0..n3 (machines m0..m3, 4 fake GPUs each) in a private netns."""
    reason = _ensure_slurm()
    if reason:
        pytest.skip(f"no real Slurm: {reason}")
    with SlurmCluster(nodes=default_nodes(count=4, gpus=4)) as cluster:
        yield cluster


@pytest.fixture
def engine(slurm_cluster: SlurmCluster) -> Iterator[SlurmEngine]:
    """A Slurm engine on the session's cluster; whatever a test leaves behind is cleaned afterwards."""
    eng = SlurmEngine(slurm_cluster.site)
    yield eng
    eng.clean_orphans(keep_slices=(), keep_machines=())
    for job in eng._squeue():
        if str(job.get("job_state")) in ("PENDING", "RUNNING"):
            slurm_cluster.site.run(["scancel", str(job["job_id"])], check=False)


@pytest.fixture
def drop_dir() -> Iterator[Path]:
    """Where the tests' jobs, run as their tenant's user, leave marks (`tests.attacks.drop_dir`)."""
    with attacks.drop_dir() as d:
        yield d
