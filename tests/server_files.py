"""What a `disagg serve` a test started left in its directory."""

from __future__ import annotations

from pathlib import Path


def admin_token(root: Path) -> str:
    """The admin token a server's first start wrote (its log names the 0600 file, never the token)."""
    log = (root / "server.log").read_text()
    path = Path(log.split("admin token written to ")[1].split(" (mode")[0])
    assert path.stat().st_mode & 0o777 == 0o600 and "dg_" not in log
    return path.read_text().strip()
