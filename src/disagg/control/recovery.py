"""Losing state is loud: at start, the state directory is checked against the store.

The store is the record of what was confirmed (every 201, every placement); the state directory holds
what the fabric and the engine did (attachments, job directories) and the store's mark: its id and how
far it had got (`disagg.store.marks`), which the loop writes there as it runs. A start on a store that
knows less than the state directory — its WAL deleted after a crash, an old backup restored, a fresh
file where the old one was — would forget confirmed jobs and, reconciling, kill running jobs it cannot
account for. So before reconciling, `state_loss` names every disagreement:
  - the store is another one than the state directory's (its id differs);
  - the store has gone back (it holds fewer changes than the state directory saw it hold);
  - the engine has jobs of slices the store does not know at all;
  - the fabric has attachments that no live slice of the store holds;
  - the state directory is new (no mark) while the store has live slices: another state directory ran
    them (`_run_elsewhere`);
  - another engine ran the store's live slices (`_other_engine`): this one cannot see their jobs.
The controller then refuses to start (`StateLossError`) unless the operator accepts the loss
(`--accept-state-loss`): then reconciling goes on as after any crash, and the mark starts anew.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from disagg.engines.base import Engine
from disagg.fabric.base import FabricDriver
from disagg.model import SpecError
from disagg.store import Store

#: The store's mark in the state directory.
MARK_FILE = "store-mark.json"
#: Held (shared) by every leading controller of the state directory for its life: one of another store
#: that finds it held knows a controller runs on it now.
IN_USE_FILE = "controller.lock"
#: How often the loop writes the mark at most, seconds.
MARK_EVERY_S = 1.0
#: How many examples a problem names.
_SHOWN = 5


class StateDirInUse(SpecError):
    """Another store's controller runs with this state directory now: no loss to accept, a mistake to stop.
    (Its message had been the state loss's, which ends in "start with --accept-state-loss": followed, that
    start stopped the running controller's jobs, which it re-ran, and overwrote its admin token.)"""


def hold(state_dir: Path) -> int:
    """Hold the state directory's in-use lock (shared: the replicas of one store share the directory) for
    this process's life; its descriptor."""
    fd = os.open(state_dir / IN_USE_FILE, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def in_use(state_dir: Path) -> bool:
    """Whether a controller holds the state directory now (`hold`)."""
    try:
        fd = os.open(state_dir / IN_USE_FILE, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return False


class StateLossError(SpecError):
    """The store knows less than the state directory; names what disagrees (exit 2 at `disagg serve`)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("state directory", [*problems, "if the loss is known and accepted, start with "
                                             "--accept-state-loss (DISAGG_ACCEPT_STATE_LOSS=true): jobs the "
                                             "store does not know are then stopped, and jobs it has as queued "
                                             "or running run again, even those that had run (or ended) since"])


def _some(items: list[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(sorted(items)[:_SHOWN]) + more


def read_mark(state_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state_dir / MARK_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def state_loss(store: Store, fabric: FabricDriver, engine: Engine, state_dir: Path) -> list[str]:
    """Where the state directory and the store disagree (empty: they agree)."""
    problems: list[str] = []
    sid, events = store.progress()
    mark = read_mark(state_dir)
    if mark is not None:
        seen_id, seen = str(mark.get("store_id", "")), int(str(mark.get("events", 0)))
        if seen_id and seen_id != sid:
            if in_use(state_dir):
                raise StateDirInUse("state directory", [
                    f"a controller of another store (id {seen_id}) runs with the state directory {state_dir} "
                    "now: give this one a state directory of its own (--state-dir). Its jobs, its fabric's "
                    "attachments and its admin token are there: this start would stop or overwrite them"])
            problems.append(f"the state directory {state_dir} belongs to another store (id {seen_id}, which had "
                            f"{seen} changes); this store is {sid or 'new'}")
        elif seen > events:
            problems.append(f"the store has gone back: it holds {events} changes, the state directory saw {seen} "
                            "(a lost or truncated WAL, or an old backup)")
    elif events > 0 and engine.records_in_state_dir:
        problems += _run_elsewhere(store, engine, state_dir)
    if mark is not None:
        problems += _other_engine(store, engine, str(mark.get("engine", "")))
    unknown = unknown_handles(store, engine)
    if unknown:
        problems.append(f"the engine has jobs of {len(unknown)} slices the store does not know: {_some(unknown)}")
    held = {(d.id, t.machine) for r in store.live_slices() for t, d in r.placement.devices()}
    stray = [f"{a.device}@{a.machine}" for a in fabric.attachments() if (a.device, a.machine) not in held]
    if stray:
        problems.append(f"the fabric has {len(stray)} attachments no live slice holds: {_some(stray)}")
    return problems


def _run_elsewhere(store: Store, engine: Engine, state_dir: Path) -> list[str]:
    """A state directory with no mark under a store that has run: the store's live slices were composed and
    run by the controller of another state directory (`--state-dir` changed, or a restore on another
    host), whose tasks may still run. Started anyway, this one finds no such job on its engine, re-queues
    them, and runs them a second time beside the first (seen: a `--state-dir` change on one host)."""
    recorded = set(engine.recorded_handles())
    elsewhere = [r.id for r in store.live_slices() if (r.handle or r.id) not in recorded]
    if not elsewhere:
        return []
    return [f"the store has {len(elsewhere)} live slices that the state directory {state_dir} knows nothing of "
            f"({_some(elsewhere)}): the state directory that composed and ran them is another (the old "
            "--state-dir, or another host), and their tasks may still run there. Start with that state "
            "directory; if it and its tasks are gone (a restore on a new host), the loss is accepted with "
            "--accept-state-loss and the jobs run again"]


def _other_engine(store: Store, engine: Engine, ran: str) -> list[str]:
    """The store's live slices were run by another engine (`--engine` changed between two starts, local
    and Slurm): this one finds none of their jobs, so reconciling would re-queue them and run each again
    beside its first run, which goes on under the engine that started it. `ran` is the engine the mark
    names (empty in a mark older than the field: nothing is known then)."""
    if not ran or ran == engine.name:
        return []
    live = [r.id for r in store.live_slices()]
    if not live:
        return []
    return [f"the store's {len(live)} live slices ({_some(live)}) run on engine {ran!r}, and this start uses "
            f"engine {engine.name!r}, which cannot see or stop their jobs: start with engine {ran!r} until they "
            f"have ended (or cancel them there), then switch; if they are gone, the loss is accepted with "
            "--accept-state-loss and the jobs run again"]


def unknown_handles(store: Store, engine: Engine) -> list[str]:
    """The jobs the engine records in the state directory whose slices the store does not know at all."""
    handles = engine.recorded_handles()
    return sorted(set(handles) - store.slice_ids(handles))


class StoreMark:
    """The loop's end: write the store's mark into the state directory when it changed, at most every
    MARK_EVERY_S (one cheap query)."""

    def __init__(self, store: Store, state_dir: Path, engine: str) -> None:
        """`engine`: the name of the engine that runs the store's slices from this start on."""
        self.store = store
        self.engine = engine
        self.path = state_dir / MARK_FILE
        self._last = 0.0
        self._written: tuple[str, int] | None = None

    def __call__(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < MARK_EVERY_S:
            return
        self._last = now
        progress = self.store.progress()
        if progress == self._written:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"store_id": progress[0], "events": progress[1], "engine": self.engine, "at": time.time()}, f)
        os.replace(tmp, self.path)
        self._written = progress


__all__ = ["IN_USE_FILE", "MARK_FILE", "StateDirInUse", "StateLossError", "StoreMark", "hold", "in_use", "read_mark",
           "state_loss", "unknown_handles"]
