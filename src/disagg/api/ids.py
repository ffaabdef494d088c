"""Ids as a user types them: wherever a route takes an id in its path (a job, a slice, a device, a
link, a tenant's name), any unique beginning of it does, as git and docker take ids.

One answer for every kind: none matches → 404 naming what was typed (another tenant's job or slice
matches nothing, so it answers as an unknown one does); several match → 409 naming them (up to
SHOWN_MATCHES, each also in `problems`), because the request is well-formed and the object may
exist, but which one is meant conflicts. Exactly one → its whole id. An id typed whole always
wins, even when it also begins another id (`node1` and `node10`).

Token ids are the exception: they are small integers that a revocation deletes, so after `1` is
revoked, "1" would begin `12`; repeating a revocation must never revoke another token, so a
token's id is taken whole.
"""

from __future__ import annotations

from disagg.api import schemas as S
from disagg.api.errors import ApiError, Responses
from disagg.store import Principal
from disagg.store.ports import ApiPort
from disagg.store.prefixes import SHOWN_MATCHES, IdKind

#: What a route that takes an id documents besides its own answers.
R409_AMBIGUOUS: Responses = {409: {"model": S.ErrorOut,
                                   "description": "The id prefix matches several objects (they are listed)."}}


def one_match(kind: str, typed: str, found: list[str], field: str, hint: str = "") -> str:
    """The one id in `found` (the ids that `typed` is or begins, as `ids_by_prefix` or `matching` gives
    them): ApiError 404 when there is none (`hint`: what such ids look like), 409 naming them when there
    are several."""
    if not found:
        raise ApiError(404, f"no {kind} {typed!r}{hint}", [{"field": field, "message": f"no {kind} begins {typed!r}"}])
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN_MATCHES]) + (", …" if len(found) > SHOWN_MATCHES else "")
        raise ApiError(409, f"{kind} id {typed!r} is ambiguous: it begins {shown}; give more of it",
                       [{"field": field, "message": f"matches {m}"} for m in found[:SHOWN_MATCHES]])
    return found[0]


def resolve(store: ApiPort, kind: IdKind, typed: str, who: Principal, hint: str = "") -> str:
    """The whole id of the one `kind` that `who` may see and that `typed` is or begins (see the module)."""
    return one_match(kind, typed, store.ids_by_prefix(kind, typed, who), f"{kind}_id", hint)


__all__ = ["R409_AMBIGUOUS", "one_match", "resolve"]
