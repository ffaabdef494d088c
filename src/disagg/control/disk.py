"""Free space on the store's filesystem and the state directory's: below `min_free_disk_mb`, /healthz says
`degraded` and new submissions are refused with 503, so that what is left keeps the writes that free
things: cancels, the loop's bookkeeping of jobs that end. A job cannot fill them through its working
directory (docs/security.md: `check_disks`), but logs, other programs or a full host can. The state
directory counts as much as the store: the fabric's records, the jobs' records and what the loop process
publishes are written there, and with it full every slice step failed and every round with it, while
/healthz said `ok` (a SQLite store elsewhere had room).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

#: How long one look at the filesystem is kept, seconds (a statvfs per request would do, but need not).
CACHE_S = 1.0


class DiskWatch:
    """Whether the filesystems the controller writes (`paths`, by what they hold: the store's, the state
    directory's) have at least `min_free` bytes free each; looked at once a second at most."""

    def __init__(self, paths: dict[str, Path], min_free: int) -> None:
        self.paths = paths
        self.min_free = min_free
        self._lock = threading.Lock()
        self._at = -CACHE_S
        self._trouble: str | None = None

    @staticmethod
    def free(path: Path) -> int:
        """Bytes free to an unprivileged writer on `path`'s filesystem (what SQLite of a non-root store gets)."""
        st = os.statvfs(path if path.exists() else path.parent)
        return st.f_bavail * st.f_frsize

    def trouble(self) -> str | None:
        """Why the disk is low (None: it is not, or there is no minimum)."""
        if self.min_free <= 0:
            return None
        with self._lock:
            now = time.monotonic()
            if now - self._at >= CACHE_S:
                self._at = now
                self._trouble = next(filter(None, map(self._look, self.paths.items())), None)
            return self._trouble

    def _look(self, item: tuple[str, Path]) -> str | None:
        what, path = item
        try:
            free = self.free(path)
        except OSError as exc:
            return f"cannot see the free space of {path}: {exc}"
        if free >= self.min_free:
            return None
        return (f"low disk: {free // 2**20} MiB free on {what} ({path}), below min_free_disk_mb "
                f"({self.min_free // 2**20}); new submissions are refused until there is more")


__all__ = ["DiskWatch"]
