"""The controller's tenants: the spec (config, then an admin's overrides), each round's tenancy, the views.

Fairness is on when there are tenants to be fair between: a `tenants:` section or file in the config,
or a tenant an admin set (`PUT /v1/tenants/{name}`). Then every round's snapshot carries a `Tenancy`
(who holds what, the decayed usage, the grace period), the round reads each tenant's oldest queued
jobs (not only the oldest of all), and its policy runs inside `placement.fairness.FairPolicy`. Without
tenants the loop is exactly the plain one.

`TenantDirectory` is what the loop and the API share: the effective spec, and the view of each tenant
(`GET /v1/tenants`): its quota and limits, what it holds and borrows, its shares, its queued and
running jobs. The loop keeps the decayed usage (`TenancyKeeper`) and writes it to the store, where
the API process reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from disagg.control.config import Config
from disagg.model import Cluster, Job, SpecError
from disagg.model.states import JobState
from disagg.model.tenancy import Tenancy
from disagg.model.tenants import Tenant, Tenants, merge_tenants, parse_tenants, tenant_entry
from disagg.placement.quota import beyond_limit
from disagg.placement.usage import by_tenant, decay, dominant_share, held_by_job
from disagg.store import Principal, Store

#: How often the loop writes the decayed usage to the store (for the API process and a restart).
SAVE_EVERY_S = 5.0


class TenantDirectory:
    """The effective tenants spec and the tenants' views."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.base = config.tenants_spec()

    def tenants(self) -> Tenants:
        """The config's tenants, with each one an admin set replaced by the admin's entry."""
        return merge_tenants(self.base, self.store.tenant_overrides())

    def set_tenant(self, name: str, entry: Mapping[str, Any]) -> Tenant:
        """Set one tenant's entry (an admin's `PUT`); SpecError, naming the field, when the whole spec
        would not hold with it (a borrow without a quota, a bad name)."""
        overrides = self.store.tenant_overrides()
        overrides[name] = {**dict(entry), "name": name}
        merged = merge_tenants(self.base, overrides, f"tenant {name}")
        self.store.put_tenant(name, {k: v for k, v in tenant_entry(merged.get(name)).items() if k != "name"})
        return merged.get(name)

    def enforce(self, name: str) -> list[str]:
        """Fail the queued jobs of `name` that its limits, as they are now, would never let run (an
        admin lowered them: `docs/fairness.md`, "A lowered limit"); returns them."""
        tenant = self.tenants().get(name)
        why = {j.name: w for j in self.store.queued_of(name) if (w := beyond_limit(tenant, j)) is not None}
        return self.store.fail_beyond_limit(why)

    def views(self, who: Principal) -> list[dict[str, Any]]:
        """Each tenant as `GET /v1/tenants` shows it; a tenant sees only itself, an admin everyone."""
        tenants = self.tenants()
        names = {who.tenant} if not who.admin else set(tenants.by_name) | self.store.tenant_names()
        holdings = self.store.tenant_holdings()
        history = self.store.load_usage()
        counts = self.store.tenant_counts()
        cap = self.store.capacity()
        # every tenant with jobs counts, whoever asks: a tenant sees the share an admin sees for it
        active = set(counts) | set(holdings)
        total_weight = sum(tenants.get(n).weight for n in active) or 1.0
        return [{**_view(tenants.get(n), holdings.get(n, {}), history.get(n, {}), counts.get(n, {}), cap,
                         tenants.get(n).weight / total_weight if n in active else 0.0),
                 "unix_user": self.unix_user(tenants.get(n))}
                for n in sorted(names)]

    def unix_user(self, tenant: Tenant) -> str:
        """The Unix user the tenant's jobs run as: its spec's, else `disagg-<tenant>` (as root), else, with
        `allow_same_user`, the controller's own user (`engines.accounts`)."""
        import os
        import pwd

        from disagg.engines.accounts import default_unix_user

        if os.geteuid() != 0 and self.config.allow_same_user:
            return pwd.getpwuid(os.geteuid()).pw_name
        return tenant.unix_user or default_unix_user(tenant.name, self.config.user_prefix())


def _view(t: Tenant, held: Mapping[str, float], decayed: Mapping[str, float], counts: Mapping[str, int],
          cap: Mapping[str, float], entitled: float) -> dict[str, Any]:
    return {
        "name": t.name, "weight": t.weight, "cohort": t.cohort, "unix_user": t.unix_user,
        "quota": dict(t.quota), "borrow": dict(t.borrow),
        "limit": {r: t.limit(r) for r in t.quota},
        "usage": {r: round(v, 6) for r, v in sorted(held.items()) if v},
        "borrowed": {r: round(held.get(r, 0.0) - q, 6) for r, q in t.quota.items() if held.get(r, 0.0) > q},
        "decayed_usage": {r: round(v, 6) for r, v in sorted(decayed.items())},
        "dominant_share": round(dominant_share(held, cap), 6),
        "fair_share": round(dominant_share(decayed, cap) / t.weight, 6),
        "entitled_share": round(entitled, 6),
        JobState.QUEUED: int(counts.get(JobState.QUEUED, 0)),
        JobState.RUNNING: int(sum(n for state, n in counts.items() if state != JobState.QUEUED)),
    }


class SubmitLimits:
    """The tenants' limits as the submit path checks them: the effective spec, re-read at most every
    REFRESH_S, so that a submission costs no query. A job that slips past a limit lowered within that
    second is failed by the loop's own check (`TenancyKeeper.beyond_limits`) before it is planned."""

    REFRESH_S = 1.0

    def __init__(self, directory: TenantDirectory) -> None:
        self.directory = directory
        self.tenants = Tenants()
        self.read_at = -1e9

    def stale(self) -> bool:
        return time.monotonic() - self.read_at > self.REFRESH_S

    def refresh(self) -> None:
        try:
            self.tenants = self.directory.tenants()
        except SpecError:
            self.tenants = self.directory.base
        self.read_at = time.monotonic()

    def problem(self, tenant: str, job: Job) -> str | None:
        """Why `job` could never run for `tenant` (`placement.quota.beyond_limit`), or None."""
        t = self.tenants.by_name.get(tenant)
        return None if t is None else beyond_limit(t, job)
def known_tenants(store: Store, config: Config) -> set[str]:
    """Every tenant name the controller knows of: the spec's (config and overrides) and the store's (jobs,
    tokens): what a new tenant name may not be confused with (`tenant_name_clash`)."""
    names = store.tenant_names()
    try:
        names |= set(TenantDirectory(store, config).tenants().by_name)
    except SpecError:
        names |= set(config.tenants_spec().by_name)
    return names


class TenancyKeeper:
    """The loop's side: each round's `Tenancy` (None without tenants), and the decayed usage."""

    def __init__(self, store: Store, directory: TenantDirectory, config: Config) -> None:
        self.store = store
        self.directory = directory
        self.config = config
        self.history = store.load_usage()
        self._last: float | None = None
        self._saved = 0.0
        #: Whether there are tenants (fairness on); follows an admin's changes round by round.
        self.on = bool(len(self._tenants()))

    def _tenants(self) -> Tenants:
        try:
            return self.directory.tenants()
        except SpecError:
            return self.directory.base  # an override that no longer fits the config's spec: the config's

    def beyond_limits(self, queue: list[Job]) -> dict[str, str]:
        """The jobs of `queue` their tenant's limits would never let run, with why (a limit lowered since
        they were submitted, or within the second the submit path's copy of the spec was stale)."""
        tenants = self._tenants()
        out = {}
        for job in queue:
            t = tenants.by_name.get(job.tenant)
            why = beyond_limit(t, job) if t is not None else None
            if why is not None:
                out[job.name] = why
        return out

    def round(self, snapshot: Cluster, claims: frozenset[str] = frozenset()) -> Tenancy | None:
        """The tenancy of a round on `snapshot`; decays the usage up to now and saves it now and then.
        `claims`: queued jobs whose victims have stopped (`Tenancy.claims`)."""
        tenants = self._tenants()
        self.on = bool(len(tenants))
        if not self.on:
            return None
        holders = self.store.holders()
        current = by_tenant(held_by_job(snapshot, holders), holders)
        now = time.time()
        self.history = decay(self.history, current, 0.0 if self._last is None else now - self._last,
                             self.config.usage_half_life_s)
        self._last = now
        if now - self._saved >= SAVE_EVERY_S:
            self.store.save_usage(self.history)
            self._saved = now
        return Tenancy(tenants, holders, self.history, self.config.preempt_grace_s, claims=claims)


class TenantCollector(Collector):
    """Prometheus gauges per tenant, read from the store at scrape time."""

    def __init__(self, directory: TenantDirectory) -> None:
        self.directory = directory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        views = self.directory.views(Principal("admin", True))
        usage = GaugeMetricFamily("disagg_tenant_usage", "What a tenant's live slices hold, per resource.",
                                  labels=["tenant", "resource"])
        quota = GaugeMetricFamily("disagg_tenant_quota", "A tenant's nominal quota, per resource.",
                                  labels=["tenant", "resource"])
        limit = GaugeMetricFamily("disagg_tenant_limit", "A tenant's quota + borrow, per resource.",
                                  labels=["tenant", "resource"])
        borrowed = GaugeMetricFamily("disagg_tenant_borrowed", "What a tenant holds above its quota.",
                                     labels=["tenant", "resource"])
        share = GaugeMetricFamily("disagg_tenant_fair_share", "Dominant share of decayed usage over weight.",
                                  labels=["tenant"])
        dominant = GaugeMetricFamily("disagg_tenant_dominant_share", "Largest share of any resource held now.",
                                     labels=["tenant"])
        jobs = GaugeMetricFamily("disagg_tenant_jobs", "A tenant's queued and running jobs.",
                                 labels=["tenant", "state"])
        for v in views:
            name = v["name"]
            for family, key in ((usage, "usage"), (quota, "quota"), (limit, "limit"), (borrowed, "borrowed")):
                for resource, amount in v[key].items():
                    family.add_metric([name, resource], amount)
            share.add_metric([name], v["fair_share"])
            dominant.add_metric([name], v["dominant_share"])
            jobs.add_metric([name, JobState.QUEUED], v[JobState.QUEUED])
            jobs.add_metric([name, JobState.RUNNING], v[JobState.RUNNING])
        yield from (usage, quota, limit, borrowed, share, dominant, jobs)


def check_entry(name: str, entry: Mapping[str, Any]) -> None:
    """SpecError when `entry` is not a valid tenants-spec entry for `name` on its own."""
    parse_tenants([{**dict(entry), "name": name}], f"tenant {name}")


__all__ = ["SubmitLimits", "TenancyKeeper", "TenantCollector", "TenantDirectory", "check_entry", "known_tenants"]
