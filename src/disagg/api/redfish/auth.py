"""Who is asking a Redfish request: a session (`X-Auth-Token`), Basic credentials, or a disagg bearer token.

A Redfish user is a disagg tenant and its password a disagg token of that tenant (`disagg token
create`): `POST /redfish/v1/SessionService/Sessions {"UserName": tenant, "Password": token}` opens a
session whose `X-Auth-Token` stands for the tenant from then on. Sessions live in the API process
(a restarted controller forgets them; a client logs in again on 401, as it must with any service).
"""

from __future__ import annotations

import secrets
import threading
import time
from base64 import b64decode
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from disagg.api.redfish.protocol import RedfishError
from disagg.store import Principal, Store

#: Sessions end after this long without a request (seconds): Redfish's SessionTimeout.
SESSION_TIMEOUT_S = 1800


@dataclass
class Session:
    id: str
    token: str
    who: Principal
    user: str
    last_used: float


class Sessions:
    """The open sessions of one API process, by token and by id."""

    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, who: Principal, user: str) -> Session:
        s = Session(secrets.token_hex(8), secrets.token_urlsafe(24), who, user, time.monotonic())
        with self._lock:
            self._by_token[s.token] = s
        return s

    def by_token(self, token: str) -> Session | None:
        now = time.monotonic()
        with self._lock:
            s = self._by_token.get(token)
            if s is None or now - s.last_used > SESSION_TIMEOUT_S:
                self._by_token.pop(token, None)
                return None
            s.last_used = now
            return s

    def by_id(self, ident: str) -> Session | None:
        with self._lock:
            return next((s for s in self._by_token.values() if s.id == ident), None)

    def close(self, ident: str) -> bool:
        with self._lock:
            token = next((t for t, s in self._by_token.items() if s.id == ident), None)
            return token is not None and self._by_token.pop(token, None) is not None

    def all(self) -> list[Session]:
        with self._lock:
            return sorted(self._by_token.values(), key=lambda s: s.id)


async def login(store: Store, user: object, password: object) -> Principal:
    """The tenant `user` if `password` is one of its tokens (an admin token logs in as its own tenant)."""
    if not isinstance(user, str) or not isinstance(password, str) or not user or not password:
        raise RedfishError(401, "NoValidSession", "UserName and Password (a disagg token of that tenant) are needed")
    who = await run_in_threadpool(store.principal, password)
    if who is None or who.tenant != user:
        raise RedfishError(401, "NoValidSession", "the user name or the token is not valid")
    return who


async def caller(request: Request) -> Principal:
    """The principal of a request: session token, Basic credentials or bearer token; 401 otherwise."""
    sessions: Sessions = request.app.state.sessions
    store: Store = request.app.state.store
    token = request.headers.get("X-Auth-Token")
    if token:
        s = sessions.by_token(token)
        if s is None:
            raise RedfishError(401, "NoValidSession", "the session has ended or never was; log in again")
        return s.who
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = b64decode(value.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise RedfishError(401, "NoValidSession", "malformed Basic credentials") from None
        return await login(store, user, password)
    if scheme.lower() == "bearer" and value.strip():
        who = await run_in_threadpool(store.principal, value.strip())
        if who is not None:
            return who
    raise RedfishError(401, "NoValidSession", "log in (X-Auth-Token from SessionService) or send Basic credentials")


__all__ = ["SESSION_TIMEOUT_S", "Session", "Sessions", "caller", "login"]
