"""Free space on the store's filesystem: below `min_free_disk_mb`, /healthz says `degraded` and new
submissions are refused with 503, so that what is left keeps the writes that free things: cancels,
the loop's bookkeeping of jobs that end. A job cannot fill that filesystem through its working
directory (docs/security.md: `check_disks`), but logs, other programs or a full host can.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

#: How long one look at the filesystem is kept, seconds (a statvfs per request would do, but need not).
CACHE_S = 1.0


class DiskWatch:
    """Whether the store's filesystem (`path`: the SQLite file's directory or the state directory) has at
    least `min_free` bytes free; looked at once a second at most."""

    def __init__(self, path: Path, min_free: int) -> None:
        self.path = path
        self.min_free = min_free
        self._lock = threading.Lock()
        self._at = -CACHE_S
        self._trouble: str | None = None

    def free(self) -> int:
        """Bytes free to an unprivileged writer on the filesystem (what SQLite of a non-root store gets)."""
        st = os.statvfs(self.path if self.path.exists() else self.path.parent)
        return st.f_bavail * st.f_frsize

    def trouble(self) -> str | None:
        """Why the disk is low (None: it is not, or there is no minimum)."""
        if self.min_free <= 0:
            return None
        with self._lock:
            now = time.monotonic()
            if now - self._at >= CACHE_S:
                self._at = now
                try:
                    free = self.free()
                except OSError as exc:
                    self._trouble = f"cannot see the free space of {self.path}: {exc}"
                else:
                    self._trouble = (f"low disk: {free // 2**20} MiB free on the store's filesystem ({self.path}), "
                                     f"below min_free_disk_mb ({self.min_free // 2**20}); new submissions are "
                                     "refused until there is more") if free < self.min_free else None
            return self._trouble


__all__ = ["DiskWatch"]
