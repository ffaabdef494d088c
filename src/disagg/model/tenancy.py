"""What a round knows about tenants besides the spec: who runs what, and what they used before.

The shell (the simulator, the controller) builds a `Tenancy` each round and puts it in the snapshot
(`Cluster.tenancy`); the policies stay pure and read it as data. A snapshot without one (None) is a
round without tenants: no quotas, no fair share, no preemption — the plain policies.

- `holders`: every running job the round must attribute: its tenant, whether it may be preempted,
  when it started (the progress a preemption would lose), and, while it is being preempted, for
  whom (its resources are coming free for that job).
- `history`: each tenant's usage per resource, decayed with a half-life (Slurm's
  PriorityDecayHalfLife): an exponentially weighted average of what it held, round after round.
  Fair share is computed over it (`placement.usage.decay` updates it; the shell keeps it).
- `claims`: queued jobs whose victims have stopped: what those gave back is theirs, so the round
  places them before anyone else (else a borrower could take it back first, and be preempted again).

The fair-share terms that `placement.fairness.FairPolicy` computes from it are handed to the policy it wraps
as an argument (`placement.base.FairTerms`), not written back here: a tenancy is what the shell observed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from disagg.model.tenants import Tenants

#: The tenant of a job that names none (a trace without a tenant column, a plain jobs spec).
DEFAULT_TENANT = "default"
#: Seconds a preempted job gets between SIGTERM and the kill, unless the config says otherwise.
DEFAULT_GRACE_S = 30.0
#: The half-life of decayed usage, unless the config says otherwise (Slurm's default is 7 days; one
#: hour suits a cluster whose jobs run for minutes to hours).
DEFAULT_HALF_LIFE_S = 3600.0


@dataclass(frozen=True, slots=True)
class Holder:
    """A running job as fairness sees it."""

    tenant: str = DEFAULT_TENANT
    preemptible: bool = True
    start_s: float = 0.0
    #: The queued job this one is being preempted for (in its grace period), else None.
    preempted_for: str | None = None


@dataclass(frozen=True)
class Tenancy:
    """The tenants of a round: the spec, the running jobs' owners, decayed usage, the grace period."""

    tenants: Tenants
    holders: Mapping[str, Holder] = field(default_factory=dict)
    history: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    grace_s: float = DEFAULT_GRACE_S
    claims: frozenset[str] = frozenset()


__all__ = ["DEFAULT_GRACE_S", "DEFAULT_HALF_LIFE_S", "DEFAULT_TENANT", "Holder", "Tenancy"]
