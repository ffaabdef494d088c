"""Sessions of one API process: the Redfish service's (`X-Auth-Token`) and the dashboard's (its cookie).

A session stands for a disagg token, never for the principal the token had when the session opened: every
request through it looks the token up again (`deps.lookup_token`, at most half a second old), so a session
ends when its token is revoked or expires (issue 22). A session also ends after `idle_s` without a request,
or when its owner logs out. The table is bounded: at most `per_tenant` sessions per tenant (opening one more
ends that tenant's least recently used session), and ended sessions are purged whenever one opens, so no
number of logins grows the process beyond `per_tenant` sessions per tenant that holds a token.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from disagg.store import Principal

#: Sessions end after this long without a request (seconds): Redfish's SessionTimeout.
SESSION_TIMEOUT_S = 1800
#: At most this many sessions per tenant in one API process (one more ends the least recently used).
SESSIONS_PER_TENANT = 32


@dataclass
class Session:
    """An open session: its id (the resource's), its key (what the client sends back), the disagg token it
    stands for, who that token was when it opened (for listings only), and when it was last used."""

    id: str
    key: str
    token: str
    who: Principal
    user: str
    last_used: float


class SessionTable:
    """The open sessions of one API process, by key, bounded per tenant (module docstring)."""

    def __init__(self, idle_s: float = SESSION_TIMEOUT_S, per_tenant: int = SESSIONS_PER_TENANT) -> None:
        self.idle_s, self.per_tenant = idle_s, per_tenant
        self._by_key: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, who: Principal, token: str, user: str) -> Session:
        """A new session for `token` (whose principal is `who`): ended sessions are purged first, and the
        tenant's least recently used one ends when it already has `per_tenant`."""
        now = time.monotonic()
        s = Session(secrets.token_hex(8), secrets.token_urlsafe(24), token, who, user, now)
        with self._lock:
            self._purge(now)
            mine = sorted((x for x in self._by_key.values() if x.who.tenant == who.tenant),
                          key=lambda x: x.last_used)
            for old in mine[:max(0, len(mine) - self.per_tenant + 1)]:
                self._by_key.pop(old.key, None)
            self._by_key[s.key] = s
        return s

    def _purge(self, now: float) -> None:
        for key in [k for k, x in self._by_key.items() if now - x.last_used > self.idle_s]:
            del self._by_key[key]

    def by_key(self, key: str) -> Session | None:
        """The session `key` opens (its idle clock starts again), or None: unknown, ended or idle too long."""
        now = time.monotonic()
        with self._lock:
            s = self._by_key.get(key)
            if s is None or now - s.last_used > self.idle_s:
                self._by_key.pop(key, None)
                return None
            s.last_used = now
            return s

    def by_id(self, ident: str) -> Session | None:
        with self._lock:
            return next((s for s in self._by_key.values() if s.id == ident), None)

    def close(self, ident: str) -> bool:
        """End the session `ident`; False when there is none."""
        with self._lock:
            key = next((k for k, s in self._by_key.items() if s.id == ident), None)
            return key is not None and self._by_key.pop(key, None) is not None

    def all(self) -> list[Session]:
        """The open sessions (idle ones purged), by id."""
        with self._lock:
            self._purge(time.monotonic())
            return sorted(self._by_key.values(), key=lambda s: s.id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)


__all__ = ["SESSIONS_PER_TENANT", "SESSION_TIMEOUT_S", "Session", "SessionTable"]
