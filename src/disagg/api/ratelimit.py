"""Per-tenant rate limits of the writes that make work for the controller: job submissions and Redfish
compositions (and their updates). A token bucket per tenant and kind: `rate` a second, bursts of `burst`;
a request past it is answered 429 with `Retry-After` (whole seconds until a token is back), before anything
is stored. So a tenant's flood enters the queue at `rate` a second at most, and the slice workers (which
take work in a fair order between tenants, `control.slice.fair_pick`) keep another tenant's trivial job
within a bound (docs/security.md).

Buckets live in the API process (one per tenant that wrote lately), at most `MAX_BUCKETS`: when full, the
buckets that are full again (idle tenants) are dropped, which changes nothing for them.
"""

from __future__ import annotations

import math
import threading
import time

#: At most this many buckets (tenants that wrote lately) per kind.
MAX_BUCKETS = 100_000


class TenantBuckets:
    """Token buckets by tenant: `take` tokens (one a job), or learn how long until they are back."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, max(1.0, burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant → (tokens, at)
        self._lock = threading.Lock()

    def take(self, tenant: str, now: float | None = None, count: int = 1) -> float:
        """Take `count` tokens of `tenant`'s bucket: 0.0 when taken, else the seconds until they are back
        (nothing taken). A rate of 0 means no limit; `count` may not pass the burst (`fits`)."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._buckets.get(tenant, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens < count:
                self._buckets[tenant] = (tokens, now)
                return (count - tokens) / self.rate
            if len(self._buckets) >= MAX_BUCKETS and tenant not in self._buckets:
                self._prune(now)
            self._buckets[tenant] = (tokens - count, now)
            return 0.0

    def fits(self, count: int) -> bool:
        """Whether `count` tokens can ever be taken at once (no more than the burst)."""
        return self.rate <= 0 or count <= self.burst

    def _prune(self, now: float) -> None:
        self._buckets = {t: (n, at) for t, (n, at) in self._buckets.items()
                         if n + (now - at) * self.rate < self.burst}


def retry_after(wait_s: float) -> str:
    """`Retry-After`'s whole seconds (at least 1) for a wait of `wait_s`."""
    return str(max(1, math.ceil(wait_s)))


__all__ = ["MAX_BUCKETS", "TenantBuckets", "retry_after"]
