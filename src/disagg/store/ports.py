"""Narrow ports of the store: what each part of the controller may do with it (issue 24).

`Store` is one class of many mixins; each part of the controller sees only the operations it uses,
as a Protocol that `Store` satisfies (mypy checks it where a `Store` is handed to each part):

- `LoopPort` — the scheduling loop (`control/loop.py`): reads the queue and the cluster, commits a
  round's placements, moves jobs. Every write of it is the leader's and is fenced: it commits only while
  the store's lease still has the writer's epoch (`store.lease`, `FencedWrite`).
- `SlicePort` — the slice runner (`control/slice.py`): a slice's steps (begin, done, failed), its
  settling and teardown. Also the leader's, also fenced.
- `ApiPort` — the API (`api/`): views and pages for every replica, tokens, and compositions. Its
  writes (a token, a composition's rows, a deleted job) are not the leader's: any replica's API takes
  them, and the loop acts on them once it reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from disagg.model import Cluster, Job
from disagg.model.states import JobState, SliceOutcome, SliceState
from disagg.placement.decisions import Decisions
from disagg.store.compositions import Admit, Inventory, LiveSlice
from disagg.store.lease import LeaseView
from disagg.store.plans import CommitResult
from disagg.store.prefixes import SHOWN_MATCHES, IdKind
from disagg.store.slices import SliceRecord, StepEffect, StepRecord
from disagg.store.tokens import Principal, TokenInfo
from disagg.store.views import Key, Page


class LoopPort(Protocol):
    """The scheduling loop's store (each operation's meaning: its docstring in `Store`)."""

    def cluster(self) -> Cluster:
        ...

    def commit_placements(self, plan: Decisions, considered: Iterable[str], count_wait: bool = True) -> CommitResult:
        ...

    def fail_beyond_limit(self, why: dict[str, str]) -> list[str]:
        ...

    def finish_slice(self, slice_id: str, ended: JobState, exit_code: int | None) -> bool:
        ...

    def finish_slices(self, ended: list[tuple[str, JobState, int | None]]) -> list[bool]:
        ...

    def first_round(self, epoch: int) -> None:
        ...

    def note_jobs(self, notes: dict[str, str]) -> None:
        ...

    def queued_by_tenant(self, window: int) -> list[Job]:
        ...

    def queued_jobs(self, window: int) -> list[Job]:
        ...

    def queued_representatives(self, window: int, limit: int) -> list[Job]:
        ...

    def running_slices(self) -> list[tuple[str, str | None]]:
        ...

    def set_aside(self, job_ids: list[str], why: str) -> list[str]:
        ...

    def slices_to_work(self, per_tenant: int | None = None) -> list[tuple[str, SliceState, str]]:
        ...

    def write_first(self) -> None:
        ...


class SlicePort(Protocol):
    """The slice runner's store."""

    def abort_slice(self, slice_id: str, outcome: SliceOutcome, detail: str, failed_device: str | None = None) -> bool:
        ...

    def begin_step(self, slice_id: str, op: str, target: str, guard: SliceState | None) -> bool:
        ...

    def begun_steps(self, slice_id: str) -> set[tuple[str, str]]:
        ...

    def ended_before_teardown(self, slice_id: str, ended: JobState, exit_code: int | None) -> bool:
        ...

    def load_slice(self, slice_id: str) -> SliceRecord:
        ...

    def removals(self, slice_id: str) -> set[str]:
        ...

    def settle_slice(self, slice_id: str) -> None:
        ...

    def slice_composed(self, slice_id: str, detail: str | None = None) -> bool:
        ...

    def slice_steps(self, slice_id: str | None = None) -> list[StepRecord]:
        ...

    def step_done(self, slice_id: str, op: str, target: str, retries: int, effect: StepEffect | None = None) -> None:
        ...

    def step_failed(self, slice_id: str, op: str, target: str, error: str) -> None:
        ...


class ApiPort(Protocol):
    """The API's store."""

    def any_slice(self, slice_id: str) -> LiveSlice | None:
        ...

    def attention_devices(self, limit: int) -> list[dict[str, Any]]:
        ...

    def compose(self, tenant: str, name: str, host: str, devices: list[str], cpus: float | None = None,
                memory_gb: float | None = None, device_gbps: float = 0.0, admit: Admit | None = None,
                most: int | None = None) -> str:
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        ...

    def decompose(self, slice_id: str, why: str = "decomposed by its owner") -> bool:
        ...

    def device_counts(self, *by: str) -> dict[tuple[str, ...], int]:
        ...

    def devices_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        ...

    def devices_view(self) -> list[dict[str, Any]]:
        ...

    def history(self, start: float, end: float, step: float) -> list[dict[str, Any]]:
        ...

    def history_samples(self, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
        ...

    def history_span(self) -> tuple[float, float] | None:
        ...

    def ids_by_prefix(self, kind: IdKind, prefix: str, who: Principal, limit: int = SHOWN_MATCHES + 1) -> list[str]:
        ...

    def issue_token(self, tenant: str, admin: bool = False, expires_in_s: float | None = None
                    ) -> tuple[TokenInfo, str]:
        ...

    def job_events(self, job_id: str, after: int | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        ...

    def job_slices(self, job_id: str) -> list[dict[str, Any]]:
        ...

    def job_view(self, job_id: str, who: Principal) -> dict[str, Any] | None:
        ...

    def jobs_list(self, who: Principal, state: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        ...

    def jobs_page(self, who: Principal, state: str | None = None, limit: int = 100, after: Key | None = None
                  ) -> Page:
        ...

    def links_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        ...

    def links_view(self) -> list[dict[str, Any]]:
        ...

    def machines_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        ...

    def machines_view(self) -> list[dict[str, Any]]:
        ...

    def node_counts(self) -> dict[tuple[str, str], int]:
        ...

    def ping(self) -> None:
        ...

    def principal(self, token: str, now: float | None = None) -> Principal | None:
        ...

    def redfish_inventory(self) -> Inventory:
        ...

    def revoke_token(self, token_id: int) -> bool:
        ...

    def slice_view(self, slice_id: str, who: Principal) -> dict[str, Any] | None:
        ...

    def slices_page(self, who: Principal, state: str | None = None, steps: bool = False, limit: int = 100,
                    after: Key | None = None) -> Page:
        ...

    def tenant_names(self) -> set[str]:
        ...

    def tokens(self, after: int | None = None, limit: int = 500) -> list[TokenInfo]:
        ...

    def update_composition(self, slice_id: str, add: list[str], remove: list[str], device_gbps: float = 0.0,
                           admit: Admit | None = None) -> bool:
        ...

    def lease(self) -> LeaseView | None:
        ...

    def replicas(self) -> list[dict[str, Any]]:
        ...
