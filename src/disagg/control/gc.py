"""Retention: what ended long ago goes — the jobs' rows, their slices' files and working directories.

The loop runs `collect` every `GC_EVERY_S`; `disagg gc` runs it at once. Jobs that ended more than
`retention_s` ago are taken in batches: the engine forgets each of their slices first (files, working
directory), then the store deletes their rows (`disagg.store.gc` says why in that order). Expired
tokens' rows go too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from disagg.engines.base import Engine
from disagg.model import SpecError
from disagg.store import Store

if TYPE_CHECKING:
    from disagg.control.config import Config

log = logging.getLogger(__name__)

#: How often the loop collects, seconds.
GC_EVERY_S = 300.0
#: Jobs per batch (one transaction each).
BATCH = 500


@dataclass
class Collected:
    """What one collection removed."""

    jobs: int = 0
    slices: int = 0
    tokens: int = 0

    def summary(self) -> str:
        return f"removed {self.jobs} ended jobs ({self.slices} slices' files) and {self.tokens} expired tokens"


def collect(store: Store, engine: Engine, retention_s: float, now: float | None = None,
            most: int = 100_000) -> Collected:
    """Remove the jobs that ended before `now - retention_s` (at most `most` of them), and expired tokens."""
    now = time.time() if now is None else now
    before = now - retention_s
    out = Collected()
    while out.jobs < most:
        batch = store.ended_before(before, min(BATCH, most - out.jobs))
        if not batch:
            break
        deleted, slices = remove(store, engine, batch)
        out.slices += slices
        out.jobs += deleted
        if deleted == 0:
            break
    out.tokens = store.purge_expired_tokens(before)
    return out


def remove(store: Store, engine: Engine, jobs: Mapping[str, list[tuple[str, str | None]]]) -> tuple[int, int]:
    """Remove ended jobs (job → its slices and their handles): the engine forgets each slice's files first,
    then the store deletes the rows of those whose slices are all done (`disagg.store.gc`); (jobs deleted,
    slices forgotten). Retention and a tenant's DELETE both come here."""
    for slices in jobs.values():
        for slice_id, handle in slices:
            try:
                engine.forget(handle or slice_id)
            except (OSError, ValueError) as exc:
                log.warning("gc: cannot remove the files of slice %s: %s", slice_id, exc)
    return store.delete_jobs(list(jobs)), sum(len(slices) for slices in jobs.values())


def collect_now(config: Config) -> Collected:
    """`disagg gc`: open the store and the engine the controller uses and collect once."""
    from disagg.engines.registry import EngineOptions, make_engine
    from disagg.fabric.emulated import OperationLatencies

    missing, state = config.missing_store(), config.resolved_state_dir()
    if missing is not None:
        raise SpecError("--db", [missing])
    if not state.is_dir():  # the controller's, made at its start: gc makes none (a typo would be made)
        raise SpecError("--state-dir", [f"{state} is not a directory a controller made"])
    store = Store(config.db)
    try:
        if not store.has_schema():
            raise SpecError("--db", [f"{config.db} is not a disagg store"])
        engine = make_engine(config.engine, EngineOptions(state, OperationLatencies().scaled(0.0), config.slurm_site,
                                                          config.isolation()))
        try:
            return collect(store, engine, config.retention_s)
        finally:
            engine.close()
    finally:
        store.close()


__all__ = ["GC_EVERY_S", "Collected", "collect", "collect_now", "remove"]
