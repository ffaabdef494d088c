"""`disagg gc | backup | restore`: an operator's housekeeping, on the controller's host.

Each reads the same settings as `disagg serve` (`--config`/DISAGG_CONFIG, DISAGG_* variables, then
`--db` and `--state-dir`), so it acts on the store and state directory the controller uses.
  - `gc` removes what ended more than `retention_s` ago (or `--older-than-s`): the jobs' rows, their
    slices' files and working directories, expired tokens. The loop does the same every 5 minutes.
  - `backup PATH` copies the store consistently while the controller runs (SQLite's online backup
    API; `pg_dump` for PostgreSQL).
  - `restore PATH` puts a backup back, for a stopped controller. Its next start compares the store
    with the state directory: if the state directory knows more (jobs that ran after the backup), it
    refuses to start and says what disagrees, until `--accept-state-loss`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from disagg.cli.common import EXIT_FAILED, fail
from disagg.model import SpecError  # (light: the package loads its spec readers on first use)

if TYPE_CHECKING:
    from disagg.control.config import Config

Db = Annotated[str | None, typer.Option(help="Store URL (default: as `disagg serve` would use).")]
StateDir = Annotated[str | None, typer.Option(help="State directory (default: as `disagg serve` would use).")]
ConfigFile = Annotated[str | None, typer.Option(envvar="DISAGG_CONFIG", help="YAML file of settings.")]


def _settings(config: str | None, **options: Any) -> Config:
    import os

    from disagg.control.config import load_config

    try:
        return load_config(config, os.environ, **options)
    except SpecError as exc:
        raise fail(str(exc)) from None


def gc(
    older_than_s: Annotated[float | None, typer.Option(min=0, help="Instead of retention_s.")] = None,
    db: Db = None,
    state_dir: StateDir = None,
    config: ConfigFile = None,
) -> None:
    """Remove now what ended more than retention_s ago: jobs' rows, their files, expired tokens (JSON out)."""
    import os

    from disagg.control.gc import collect_now
    from disagg.store import StoreError

    os.umask(0o077)
    settings = _settings(config, db=db, state_dir=state_dir, retention_s=older_than_s)
    try:
        done = collect_now(settings)
    except SpecError as exc:
        raise fail(str(exc)) from None
    except StoreError as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    sys.stdout.write(json.dumps({"jobs": done.jobs, "slices": done.slices, "tokens": done.tokens,
                                 "retention_s": settings.retention_s}) + "\n")


def backup(
    target: Annotated[Path, typer.Argument(help="A new path to write the backup to (made 0600; an existing "
                                                "file or link there is refused).")],
    db: Db = None,
    config: ConfigFile = None,
) -> None:
    """Copy the store to TARGET, consistently, while the controller runs."""
    from disagg.store import Store, StoreError
    from disagg.store.backup import BackupExists

    settings = _settings(config, db=db)
    if not str(target).strip() or target == Path("."):
        raise fail("TARGET: a path to a new file is required")
    missing = settings.missing_store()
    if missing is not None:
        raise fail(f"--db: {missing}")
    try:
        store = Store(settings.db)
        try:
            if not store.has_schema():
                raise fail(f"--db: {settings.db} is not a disagg store")
            store.backup_to(target)
        finally:
            store.close()
    except BackupExists as exc:
        raise fail(f"TARGET: {exc}") from None
    except StoreError as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    sys.stdout.write(f"backed up {settings.db} to {target}\n")


def restore(
    source: Annotated[Path, typer.Argument(help="A backup made by `disagg backup`.")],
    db: Db = None,
    config: ConfigFile = None,
) -> None:
    """Replace the store by the backup SOURCE. Stop the controller first; its next start checks the
    restored store against the state directory (and refuses if jobs ran after the backup)."""
    from disagg.store import StoreError
    from disagg.store.backup import restore_store

    settings = _settings(config, db=db)
    if not source.is_file():
        raise fail(f"SOURCE: no backup at {source}: give the file `disagg backup` wrote")
    lock = _stopped(settings.db)
    try:
        restore_store(settings.db, source)
    except StoreError as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    finally:
        if lock is not None:
            os.close(lock)
    sys.stdout.write(f"restored {settings.db} from {source}\n")


def _stopped(url: str) -> int | None:
    """Refuse (exit 1) while a controller runs on the store: a restore under it replaced the store that a
    running `disagg serve` went on writing, and its running jobs vanished from every listing while their
    processes ran on. SQLite: the lock file `serve` holds is taken for the restore's length (its fd, to
    close); PostgreSQL: no replica may have been seen lately (a clean stop says so at once)."""
    from disagg.control.leadership import SingleControllerError, lock_sqlite
    from disagg.store import Store

    try:
        lock = lock_sqlite(url, wait_s=0.0)
    except SingleControllerError:
        raise fail(f"a disagg serve runs on the store {url}: stop it first (a restore replaces the store under "
                   "it)", EXIT_FAILED) from None
    if lock is not None:
        return lock
    store = Store(url)
    try:
        running = store.live_replicas()
    finally:
        store.close()
    if running:
        raise fail(f"replicas run on the store {url}: {', '.join(running)}; stop every one first (a restore "
                   "replaces the store under them)", EXIT_FAILED)
    return None


def register(app: typer.Typer) -> None:
    """Add gc, backup and restore to the `disagg` app."""
    for fn in (gc, backup, restore):
        app.command()(fn)
