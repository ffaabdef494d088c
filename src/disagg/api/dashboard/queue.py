"""The queue page: every waiting job with its tenant, ask, wait time and the policy's reason (sortable),
the jobs composing and running, and the recent ones that ended; filters by state and tenant.

A tenant sees its own jobs; an admin sees every tenant's, or one tenant's with `tenant=`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from disagg.api.dashboard.auth import Viewer
from disagg.api.dashboard.render import page
from disagg.api.deps import Jobs, StoreDep
from disagg.control.tenants import TenantDirectory
from disagg.model import DEVICE_KINDS
from disagg.model.allocation import capacity
from disagg.model.states import JOB_FINAL, JobState
from disagg.store import Principal
from disagg.store.ports import ApiPort

router = APIRouter(include_in_schema=False)

#: At most this many rows per section (the counts above say how many there are in all).
MAX_ROWS = 500
RECENT = 30
SORT_KEYS = ("waited", "id", "tenant", "name", "ask", "rounds", "reason", "state")

Sort = Annotated[Literal["waited", "id", "tenant", "name", "ask", "rounds", "reason", "state"], Query()]
Direction = Annotated[Literal["asc", "desc"], Query(alias="dir")]
Partial = Annotated[bool, Query()]


def ask(tasks: dict[str, Any]) -> str:
    """What a job asks for, per task and in all: `2 × (4 cpu, 16 GB, 1 gpu P100)`."""
    parts = [f"{tasks['cpus']:g} cpu", f"{tasks['memory_gb']:g} GB"]
    for kind in DEVICE_KINDS:
        n = int(tasks.get(kind) or 0)
        if n:
            model = tasks.get(f"{kind}_model")
            parts.append(f"{n} {kind}" + (f" {model}" if model else ""))
    return f"{tasks['count']} × ({', '.join(parts)})"


def _row(job: dict[str, Any], now: float) -> dict[str, Any]:
    waited = job.get("waited_s")
    if waited is None:
        waited = (now if job["state"] == JobState.QUEUED else job["updated_at"]) - job["submitted_at"]
    return {**job, "ask": ask(job["tasks"]), "waited": waited, "rounds": job["wait_rounds"]}


def sort_rows(rows: list[dict[str, Any]], key: str, direction: str) -> list[dict[str, Any]]:
    """Rows sorted by one column (None and text sort as text; numbers as numbers)."""
    def value(row: dict[str, Any]) -> tuple[int, Any]:
        v = row.get(key)
        return (0, v) if isinstance(v, int | float) else (1, str(v or ""))
    return sorted(rows, key=value, reverse=direction == "desc")


def _scope(who: Principal, tenant: str | None) -> Principal:
    """An admin looking at one tenant reads as that tenant; anyone else reads as themselves."""
    return Principal(tenant, admin=False) if who.admin and tenant else who


def queue_sections(store: ApiPort, who: Principal, state: JobState | None, now: float) -> dict[str, Any]:
    """The page's three sections (waiting, live, recent) and the counts, as `who` may see them."""
    def rows(st: JobState, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
        return [_row(j, now) for j in store.jobs_list(who, st, limit)] if state in (None, st) else []
    waiting = rows(JobState.QUEUED) + rows(JobState.HELD)
    live = rows(JobState.COMPOSING) + rows(JobState.RUNNING)
    recent = [r for st in JobState if st in JOB_FINAL for r in rows(st, RECENT)]
    recent = sorted(recent, key=lambda r: r["updated_at"], reverse=True)[: RECENT if state is None else MAX_ROWS]
    return {"waiting": waiting, "live": live, "recent": recent}


@router.get("/ui/queue", response_class=HTMLResponse)
def queue_page(request: Request, who: Viewer, store: StoreDep, jobs: Jobs,
               state: Annotated[JobState | None, Query()] = None,
               tenant: Annotated[str | None, Query(max_length=128)] = None,
               sort: Sort = "waited", direction: Direction = "desc", partial: Partial = False) -> HTMLResponse:
    """The queue, the live jobs and the recent ones."""
    now = time.time()
    scope = _scope(who, tenant or None)
    sections = queue_sections(store, scope, state, now)
    sections["waiting"] = sort_rows(sections["waiting"], sort, direction)
    counts = store.counts()["jobs"] if who.admin and not tenant else None
    tenants = sorted(store.tenant_names()) if who.admin else [who.tenant]
    return page(request, "queue.html", who, partial, **sections, state=state, tenant=tenant or "",
                capacity=cluster_capacity(store),
                sort=sort, direction=direction, counts=counts, tenants=tenants, states=list(JobState),
                max_rows=MAX_ROWS, title="Queue", shares=tenant_rows(TenantDirectory(jobs.store, jobs.config), scope))


#: Past this many machines and pools the queue page shows no capacity header (the machines view reads all).
CAPACITY_NODES = 2_000


def cluster_capacity(store: ApiPort) -> dict[str, Any] | None:
    """The cluster's cpus, memory and devices by kind and model, used / total (None for a large one)."""
    if sum(store.node_counts().values()) > CAPACITY_NODES:
        return None
    return capacity(m["allocation"] for m in store.machines_view())


def tenant_rows(directory: TenantDirectory, who: Principal) -> list[dict[str, Any]]:
    """Each tenant `who` may see, with its usage against quota (`gpu 12 / 8 + 8`) and its shares; none
    when no tenant has a quota or a weight of its own (fairness is off: nothing to show)."""
    if not len(directory.tenants()):
        return []
    rows = []
    for v in directory.views(who):
        held = v["usage"]
        limits = [f"{r} {held.get(r, 0):g} / {q:g}" + (f" + {v['borrow'][r]:g}" if v["borrow"].get(r) else "")
                  for r, q in sorted(v["quota"].items())]
        rows.append({**v, "limits": ", ".join(limits) or "unlimited",
                     "borrowing": ", ".join(f"{r} {n:g}" for r, n in sorted(v["borrowed"].items()))})
    return rows


__all__ = ["ask", "queue_page", "queue_sections", "router", "sort_rows"]
