"""The Redfish protocol's plumbing: answers, errors and the headers every answer carries.

  - every answer: `OData-Version: 4.0`, `Allow` (the methods its path has), `Cache-Control: no-cache`;
  - a resource (a payload with `@odata.type`): `ETag` (a hash of the payload) and
    `Link: <its JSON schema>; rel=describedby`;
  - a request for another OData version: 412; a `$` query parameter (none is supported): 501;
  - an error: `{"error": {"code", "message", "@Message.ExtendedInfo": [...]}}`, with Base registry
    message ids (`ResourceInUse`, `PropertyMissing`, …) that a client acts on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match

#: The Base message registry the message ids are from.
BASE = "Base.1.19"
T_MESSAGE = "#Message.v1_3_0.Message"
SCHEMAS = "http://redfish.dmtf.org/schemas/v1"


class RedfishError(Exception):
    """An answer other than 2xx: HTTP status, Base registry message (`message_id` without the registry),
    the sentence, and the message's arguments."""

    def __init__(self, status: int, message_id: str, message: str, args: Sequence[str] = (),
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message_id, self.message, self.args_ = status, message_id, message, tuple(args)
        self.headers = headers or {}


def error_body(message_id: str, message: str, args: Sequence[str] = ()) -> dict[str, Any]:
    """Redfish's error payload with one extended message."""
    info = {"@odata.type": T_MESSAGE, "MessageId": f"{BASE}.{message_id}", "Message": message,
            "MessageArgs": list(args), "MessageSeverity": "Critical" if message_id == "GeneralError" else "Warning",
            "Resolution": _RESOLUTION.get(message_id, "Correct the request and resubmit it.")}
    return {"error": {"code": f"{BASE}.{'GeneralError' if message_id != 'GeneralError' else message_id}",
                      "message": message, "@Message.ExtendedInfo": [info]}}


_RESOLUTION = {
    "ResourceInUse": "Pick resource blocks that are not in use, or wait until they are freed.",
    "NoValidSession": "Log in (POST SessionService/Sessions) or send valid Basic credentials.",
    "ResourceNotFound": "Use a URI the service lists.",
    "PreconditionFailed": "Read the resource again and resubmit with its current ETag.",
    "QueryNotSupported": "Leave out the query parameter.",
    "ServiceTemporarilyUnavailable": "Wait the number of seconds in Retry-After and resubmit the request.",
}


def etag(payload: dict[str, Any]) -> str:
    """A weak ETag: a hash of the payload as served."""
    return 'W/"' + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16] + '"'


class RedfishResponse(JSONResponse):
    """A Redfish answer: a resource gets its ETag and its `describedby` schema link."""

    def __init__(self, payload: dict[str, Any], status_code: int = 200, headers: dict[str, str] | None = None
                 ) -> None:
        extra = dict(headers or {})
        odata_type = payload.get("@odata.type")
        if isinstance(odata_type, str) and odata_type.startswith("#"):
            extra.setdefault("ETag", etag(payload))
            extra.setdefault("Link", f"<{SCHEMAS}/{odata_type[1:].rsplit('.', 1)[0]}.json>; rel=describedby")
        super().__init__(payload, status_code=status_code, headers=extra)


def error_response(exc: RedfishError) -> Response:
    headers = dict(exc.headers)
    if exc.status == 401:
        headers.setdefault("WWW-Authenticate", 'Basic realm="disagg"')
    return JSONResponse(error_body(exc.message_id, exc.message, exc.args_), status_code=exc.status, headers=headers)


def check_if_match(request: Request, payload: dict[str, Any]) -> None:
    """412 when the request's If-Match names another version of the resource than `payload`."""
    wanted = request.headers.get("If-Match")
    if wanted and wanted.strip() != "*" and etag(payload) not in {w.strip() for w in wanted.split(",")}:
        raise RedfishError(412, "PreconditionFailed", "the resource changed: If-Match does not match its ETag")


def allowed(routes: Sequence[BaseRoute], scope: dict[str, Any]) -> str:
    """The methods the request's path has (for `Allow`), HEAD with every GET."""
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches({**scope, "method": "__none__"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


class Protocol(BaseHTTPMiddleware):
    """The checks and headers of every Redfish request (the module docstring)."""

    def __init__(self, app: Any, routes: Callable[[], Sequence[BaseRoute]]) -> None:
        super().__init__(app)
        self.routes = routes

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        version = request.headers.get("OData-Version")
        dollar = sorted(k for k in request.query_params if k.startswith("$"))
        if version is not None and version.strip() != "4.0":
            response = error_response(RedfishError(412, "PreconditionFailed",
                                                   f"OData-Version {version} is not supported (4.0 is)"))
        elif dollar:
            response = error_response(RedfishError(501, "QueryNotSupported",
                                                   f"the query parameter {dollar[0]} is not supported", dollar[:1]))
        else:
            response = await call_next(request)
        response.headers["OData-Version"] = "4.0"
        response.headers.setdefault("Cache-Control", "no-cache")
        methods = allowed(self.routes(), dict(request.scope))
        if methods:
            response.headers["Allow"] = methods
        return response


__all__ = ["RedfishError", "RedfishResponse", "check_if_match", "error_body", "error_response", "etag"]
