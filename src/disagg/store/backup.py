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
import tempfile
from pathlib import Path
from typing import IO

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
        """A consistent copy of the store in `target`, a new file (0600), taken while it is in use.

        `target` is made with O_CREAT|O_EXCL|O_NOFOLLOW: an existing file or link there is refused
        (`BackupExists`), so a file someone made beforehand (0666, in a shared directory) never receives
        the store, and a link never makes the controller's user overwrite what it points to. The copy is
        written through that descriptor only: SQLite's backup goes to a private (0700) directory first,
        pg_dump to the descriptor as its stdout."""
        db = sqlite_file(self.url)
        fd = _create_new(target)
        try:
            with os.fdopen(fd, "wb") as out:
                if db is None:
                    _run([_tool("pg_dump"), "--format=custom", "--no-owner", _pg_url(self.url)], stdout=out)
                    return
                with tempfile.TemporaryDirectory(prefix=".disagg-backup-", dir=target.parent) as private:
                    copy = Path(private) / "store.db"
                    _sqlite_copy(db, copy)
                    with open(copy, "rb") as f:
                        shutil.copyfileobj(f, out, 2**20)
        except BaseException:
            target.unlink(missing_ok=True)
            raise


class BackupExists(StoreError):
    """The backup's target exists already (a file, a link, anything): a backup is always a new file."""


def _create_new(target: Path) -> int:
    """A new file at `target`, 0600, opened for writing; BackupExists when anything is there (a link
    included, even a dangling one)."""
    try:
        return os.open(target, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        what = ("a symbolic link" if target.is_symlink() else "a file" if target.is_file()
                else "a directory" if target.is_dir() else "a device or other special file")
        raise BackupExists(f"{target} exists ({what}): a backup is written to a new path only, never over a "
                           "file or through a link; choose a path that does not exist") from None
    except OSError as exc:  # no such directory (it is not made: a typo'd path would be), not writable, /proc
        raise BackupExists(f"cannot make {target}: {exc.strerror or exc}; choose a new path in a directory "
                           "that exists and this user may write") from None


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


def _run(argv: list[str], stdout: IO[bytes] | None = None) -> None:
    """Run a PostgreSQL tool; its output to `stdout` when given. StoreError with what it said when it fails."""
    result = subprocess.run(argv, stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                            check=False, timeout=3600)
    if result.returncode != 0:
        said = (result.stderr or result.stdout or b"").decode("utf-8", "replace").strip()
        raise StoreError(f"{Path(argv[0]).name} failed: {said}")


__all__ = ["BackupExists", "BackupOps", "restore_store", "sqlite_file"]
