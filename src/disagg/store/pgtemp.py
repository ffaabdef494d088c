"""A throw-away PostgreSQL server from Debian's package, for tests and benchmarks.

`initdb`/`pg_ctl` refuse to run as root, so as root they run as the `postgres` user (runuser), in a
data directory that user owns, listening on 127.0.0.1 only, with fsync off (the data is thrown
away). `find_bin()` says whether the server binaries are installed at all.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def find_bin() -> Path | None:
    """The directory of initdb/pg_ctl (Debian puts them under /usr/lib/postgresql/<v>/bin)."""
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        for v in sorted(root.iterdir(), key=lambda p: p.name, reverse=True):
            if (v / "bin" / "initdb").exists() and (v / "bin" / "pg_ctl").exists():
                return v / "bin"
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """Start with `start()`, use `url`, end with `stop()` (or use it as a context manager)."""

    def __init__(self) -> None:
        bindir = find_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
        self.bin = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="disagg-pg-"))
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_pg, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> TempPostgres:
        if self.as_pg:
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server on its data (again, after `halt`), on the same port."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                  "start")

    def halt(self) -> None:
        """Stop the server at once, as a crash would, keeping its data (`resume` starts it again)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        data = self.dir / "data"
        if data.exists():
            subprocess.run(
                [*self.as_pg, str(self.bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.dir, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A fresh database on this server; returns its URL."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
