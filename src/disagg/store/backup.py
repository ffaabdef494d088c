"""The store's files: their permissions, a consistent backup of a live store, and a restore.

SQLite: the database file and its WAL are the controller's alone (0600); a backup is made with
SQLite's online backup API (consistent while the controller writes), and a restore copies a backup
back the same way. PostgreSQL: `pg_dump` (custom format) and `pg_restore --clean`, from Debian's
postgresql-client. A restore is for a stopped controller; the next start checks the restored store
against its state directory (`disagg.control.recovery`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from disagg.store.base import StoreBase, StoreError, normalize_url


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL (None for PostgreSQL or an in-memory store)."""
    url = normalize_url(url)
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    return Path(url[len("sqlite:///"):])


def _pg_url(url: str) -> str:
    """A URL libpq's tools take (no SQLAlchemy driver suffix)."""
    url = normalize_url(url)
    return "postgresql://" + url.split("://", 1)[1] if url.startswith("postgresql") else url


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StoreError(f"{name} is not installed (apt-get install postgresql-client)")
    return found


class BackupOps(StoreBase):
    """Permissions, backup."""

    def restrict_files(self) -> list[Path]:
        """Make the SQLite file and its WAL/shared-memory files 0600; the files it changed."""
        db = sqlite_file(self.url)
        changed: list[Path] = []
        if db is None:
            return changed
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            try:
                if path.stat().st_mode & 0o077:
                    path.chmod(0o600)
                    changed.append(path)
            except FileNotFoundError:
                continue
        return changed

    def backup_to(self, target: Path) -> None:
        """A consistent copy of the store in `target` (0600), taken while it is in use."""
        db = sqlite_file(self.url)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        os.close(fd)
        if db is None:
            _run([_tool("pg_dump"), "--format=custom", "--no-owner", "--file", str(target), _pg_url(self.url)])
            return
        _sqlite_copy(db, target)


def restore_store(url: str, source: Path) -> None:
    """Replace the store at `url` by the backup `source` (the controller must be stopped). StoreError when
    the backup cannot be read."""
    if not source.is_file():
        raise StoreError(f"no backup at {source}")
    db = sqlite_file(url)
    if db is None:
        _run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--single-transaction",
              "--dbname", _pg_url(url), str(source)])
        return
    _sqlite_copy(source, db)
    os.chmod(db, 0o600)


def _sqlite_copy(source: Path, target: Path) -> None:
    """Copy one SQLite database into another with the online backup API (the target's WAL included)."""
    try:
        src = sqlite3.connect(source)
        try:
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a database, not some file
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot copy {source} to {target}: {exc}") from None


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    if result.returncode != 0:
        raise StoreError(f"{Path(argv[0]).name} failed: {(result.stderr or result.stdout).strip()}")


__all__ = ["BackupOps", "restore_store", "sqlite_file"]
