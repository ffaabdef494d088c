"""The controller's numbers over time: the loop samples them into the store every `history_every_s`.

Each sample is what the store knows (`Store.current_numbers`: queue, jobs running, devices in use by
kind, link load) plus what only the loop knows: the rounds it ran since the last sample, as rounds per
minute and their mean time. Samples older than `history_retention_s` are dropped as new ones come.
The dashboard's charts and `GET /v1/history` read them (`disagg.store.history`).
"""

from __future__ import annotations

import logging
import threading

from disagg.store import Store

log = logging.getLogger(__name__)


class HistorySampler:
    """Counts the loop's rounds and writes a sample when one is due. Thread-safe; never raises."""

    def __init__(self, store: Store, every_s: float, retention_s: float) -> None:
        self.store = store
        self.every_s = every_s
        self.retention_s = retention_s
        self._lock = threading.Lock()
        self._rounds = 0
        self._round_time = 0.0
        self._since: float | None = None

    def round_done(self, seconds: float) -> None:
        """A placement round ran, taking `seconds`."""
        with self._lock:
            self._rounds += 1
            self._round_time += seconds

    def maybe_sample(self, now: float) -> bool:
        """Write a sample if `every_s` has passed since the last one (the first call only starts the
        clock: rounds per minute needs an interval). Whether one was written."""
        with self._lock:
            if self._since is None:
                self._since = now
                return False
            elapsed = now - self._since
            if elapsed < self.every_s:
                return False
            rounds, spent = self._rounds, self._round_time
            self._rounds, self._round_time, self._since = 0, 0.0, now
        try:
            data = self.store.current_numbers()
            data["rounds_per_min"] = round(rounds * 60.0 / elapsed, 6)
            data["round_s"] = round(spent / rounds, 6) if rounds else None
            self.store.record_history(now, data, keep_after=now - self.retention_s)
        except Exception:  # a sample lost is no reason to stop the loop
            log.exception("history sample failed")
            return False
        return True


__all__ = ["HistorySampler"]
