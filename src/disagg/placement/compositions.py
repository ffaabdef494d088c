"""Whether a tenant may compose (Redfish `POST Systems`, or add a block): a composition is held by its tenant
as a job is, so the quota and borrowing rules of `placement.quota` apply to it when it is made.

A composition is admitted when, for every resource its tenant's quota names, what the tenant holds (its
jobs' and its compositions' live slices) plus what the composition takes stays within quota + borrow, and
what goes beyond the quota is lent by its cohort: the cohort's members hold, with it, no more than their
quotas summed (`quota.py`'s rule without the lenders' queued work, which a composition, made at once
rather than in a round, cannot wait for). A composition beyond its tenant's quota is borrowing: the round
may preempt it for a lender's job, as it would a borrowing job (`docs/redfish.md`). Pure: the holdings
come in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping

from disagg.model.tenants import Tenants
from disagg.placement.commit import EPS
from disagg.placement.quota import holds, what


def composition_problem(tenants: Tenants, tenant: str, held: Mapping[str, Mapping[str, float]],
                        want: Mapping[str, float]) -> str | None:
    """Why `tenant` may not take `want` more (the limit it passes, and what it holds), or None."""
    t = tenants.get(tenant)
    mine = held.get(tenant, {})
    for r, quota in sorted(t.quota.items()):
        need = want.get(r, 0.0)
        if need <= EPS:
            continue
        after = mine.get(r, 0.0) + need
        if after > t.limit(r) + EPS:
            return (f"{holds(t, r, mine.get(r, 0.0))}; the composition takes {what(r, need)} more, past its quota "
                    f"{quota:g} + borrow {t.borrow.get(r, 0.0):g}")
        if after <= quota + EPS:
            continue
        if t.cohort is None:
            return (f"{holds(t, r, mine.get(r, 0.0))}; the composition takes {what(r, need)} more, past its quota "
                    f"{quota:g}, and it has no cohort to borrow from")
        members = [m for m in tenants.by_name.values() if m.cohort == t.cohort and r in m.quota]
        lendable = sum(m.quota[r] for m in members) - sum(held.get(m.name, {}).get(r, 0.0) for m in members)
        if need > lendable + EPS:
            return (f"{holds(t, r, mine.get(r, 0.0))}; the composition takes {what(r, need)} more, and cohort "
                    f"{t.cohort} has {max(lendable, 0.0):g} left")
    return None


__all__ = ["composition_problem"]
