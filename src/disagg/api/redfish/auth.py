"""Who is asking a Redfish request: a session (`X-Auth-Token`), Basic credentials, or a disagg bearer token.

A Redfish user is a disagg tenant and its password a disagg token of that tenant (`disagg token
create`): `POST /redfish/v1/SessionService/Sessions {"UserName": tenant, "Password": token}` opens a
session whose `X-Auth-Token` stands for that token from then on: each request through it looks the token
up again, so the session ends when the token is revoked or expires (`disagg.api.sessions`). Sessions live
in the API process (a restarted controller forgets them; a client logs in again on 401, as it must with
any service), at most `SESSIONS_PER_TENANT` per tenant.
"""

from __future__ import annotations

from base64 import b64decode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from disagg.api.deps import lookup_token
from disagg.api.redfish.protocol import RedfishError
from disagg.api.sessions import SESSION_TIMEOUT_S, Session, SessionTable
from disagg.store import Principal
from disagg.store.ports import ApiPort

#: The Redfish service's sessions (`disagg.api.sessions`: bounded per tenant, each request re-checks its token).
Sessions = SessionTable


async def login(store: ApiPort, user: object, password: object) -> Principal:
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
    store: ApiPort = request.app.state.store
    key = request.headers.get("X-Auth-Token")
    if key:
        s = sessions.by_key(key)
        who = None if s is None else await lookup_token(request, s.token)
        if who is None:  # its token was revoked or expired meanwhile: the session ends with it
            if s is not None:
                sessions.close(s.id)
            raise RedfishError(401, "NoValidSession", "the session has ended or never was (or its token was "
                               "revoked or expired); log in again")
        return who
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
