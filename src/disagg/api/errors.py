"""Errors of the REST API: `ApiError`, the handlers that give every 4xx one body, and the shared docs.

Every error answers `{"detail": <a sentence>, "problems": [{"field", "message"}, ...]}` (schema
`ErrorOut`): bad input names each field at fault and what is allowed; 401 carries
`WWW-Authenticate: Bearer`; 405 names in `Allow` every method the path has; a store that does not
answer (down, restarting, out of connections: `store.UNAVAILABLE`) is a 503 with `Retry-After`, not a
500. The one exception is a request for a page of the dashboard: `install_handlers` takes a `pages`
hook that answers those with an HTML page instead (the same status, headers and message), so a browser
never shows raw JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from disagg.api import schemas as S
from disagg.store import UNAVAILABLE

log = logging.getLogger(__name__)

#: Seconds a client is asked to wait before it tries again when the store did not answer.
STORE_RETRY_AFTER_S = 2

#: The error answers a route documents (its `responses=`), one dict per status code.
Responses = dict[int | str, dict[str, Any]]

R400: Responses = {400: {"model": S.ErrorOut, "description": "The body is not JSON."}}
R401: Responses = {401: {"model": S.ErrorOut, "description": "No token, or not a valid one."}}
R403: Responses = {403: {"model": S.ErrorOut, "description": "Admin only."}}
R404: Responses = {404: {"model": S.ErrorOut, "description": "No such object (or not yours)."}}
R409: Responses = {409: {"model": S.ErrorOut, "description": "Idempotency key reused with another body."}}
R422: Responses = {422: {"model": S.ErrorOut, "description": "Bad input: the fields at fault and what is allowed."}}
R429: Responses = {429: {"model": S.ErrorOut, "description": "The tenant has as many jobs queued as it may."}}


class ApiError(HTTPException):
    """An answer other than 2xx, with the fields at fault for bad input."""

    def __init__(self, status: int, detail: str, problems: list[dict[str, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, detail, headers)
        self.problems = problems or []


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    """A validation error's location as a dotted field name (`tasks.count`), without where it came from."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


async def _invalid(req: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming every field at fault (an unknown field says so and lists the allowed ones, as a spec
    file's error does), the first five in `detail`; a body that is not JSON at all is a 400 saying where."""
    errors = exc.errors()
    bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if bad_json is not None:
        why = (bad_json.get("ctx") or {}).get("error", "not valid JSON")
        where = bad_json.get("loc", ("body", 0))[-1]
        detail = f"the body is not valid JSON: {why} (at character {where})"
        return JSONResponse(status_code=400, content={"detail": detail, "problems": [
            {"field": "body", "message": detail}]})
    body = _body_model(req)
    problems = []
    for e in errors:
        msg = str(e.get("msg", "invalid"))
        loc = tuple(e.get("loc", ()))
        if e.get("type") == "extra_forbidden":
            allowed = _allowed_at(body, loc[1:-1]) if loc[:1] == ("body",) else None
            msg = f"unknown field {loc[-1]!r}" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
        problems.append({"field": _field(loc), "message": msg})
    detail = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5]) or "invalid request"
    return JSONResponse(status_code=422, content={"detail": detail, "problems": problems})


def _body_model(req: Request) -> type[BaseModel] | None:
    """The model of the route's JSON body, if it has one."""
    route = req.scope.get("route")
    field = getattr(route, "body_field", None)
    kind = getattr(getattr(field, "field_info", None), "annotation", None)
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _allowed_at(model: type[BaseModel] | None, path: tuple[Any, ...]) -> list[str] | None:
    """The field names allowed at `path` inside `model` (following nested models), or None if unknown."""
    for part in path:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        kind = model.model_fields[part].annotation
        model = kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None
    return list(model.model_fields) if model is not None else None


async def _http_error(routes: Sequence[BaseRoute], req: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own errors (404 no route, 405) in the API's error body."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # name every method the path has, not only the first route's
        methods: set[str] = set()
        for route in routes:
            match, _ = route.matches({**req.scope, "method": "__none__"})
            if match == Match.PARTIAL and isinstance(route, APIRoute):
                methods |= route.methods or set()
        headers["Allow"] = ", ".join(sorted(methods))
    detail, problems = str(exc.detail), []
    if exc.status_code == 400 and detail == _UNPARSED:  # FastAPI's words for a body json.loads gave up on
        detail = ("the body is not valid JSON: it is not UTF-8 text, or it nests deeper than the JSON reader "
                  "follows")
        problems = [{"field": "body", "message": detail}]
    return JSONResponse(status_code=exc.status_code, headers=headers, content={"detail": detail, "problems": problems})


#: What FastAPI says of a body it could not decode (not UTF-8, nested past the recursion limit).
_UNPARSED = "There was an error parsing the body"


async def _api_error(_req: Request, exc: ApiError) -> JSONResponse:
    headers = dict(exc.headers or {})  # e.g. a 429's Retry-After
    if exc.status_code == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(
        status_code=exc.status_code,
        headers=headers,
        content={"detail": exc.detail, "problems": exc.problems},
    )


def store_unavailable(req: Request, exc: Exception) -> str:
    """What a request that met a store that did not answer is told (on /v1 and on Redfish, each in its own
    error body): 503, not 500, since the request was fine and nothing it asked for was done (its
    transaction did not commit), so the client may send it again. The log keeps the database's own words
    for the operator."""
    log.warning("%s %s: the store did not answer: %s: %s", req.method, req.url.path, type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "")
    return f"the store did not answer ({type(exc).__name__}); nothing was changed: try again in {STORE_RETRY_AFTER_S} s"


async def _store_unavailable(req: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=503, headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
                        content={"detail": store_unavailable(req, exc), "problems": []})


#: The dashboard's hook: an HTML page for an error of a request for one of its pages (from the answer
#: the API would give), or None to answer with that JSON.
ErrorPages = Callable[[Request, JSONResponse], Awaitable[Response | None]]
Handler = Callable[[Request, Any], Awaitable[JSONResponse]]


def _or_page(handler: Handler, pages: ErrorPages) -> Handler | Callable[[Request, Any], Awaitable[Response]]:
    """`handler`, whose answer `pages` may replace by an HTML page (keeping the status and headers such
    as `Allow`); the JSON body is made once, by the API's own handler, and the page shows it."""
    async def answer(req: Request, exc: Any) -> Response:
        out = await handler(req, exc)
        page = await pages(req, out)
        if page is None:
            return out
        for name, value in out.headers.items():
            if name.lower() not in ("content-length", "content-type"):
                page.headers[name] = value
        return page

    return answer


def install_handlers(app: FastAPI, routes: Sequence[BaseRoute], pages: ErrorPages | None = None) -> None:
    """Give every error of `app` the API's error body, or the page `pages` makes for it. `routes` are the
    API's routes, for the `Allow` header of a 405 (FastAPI keeps an included router's routes to itself,
    not in `app.routes`)."""
    handlers: list[tuple[type[Exception], Handler]] = [
        (RequestValidationError, _invalid), (StarletteHTTPException, partial(_http_error, tuple(routes))),
        (ApiError, _api_error), *((kind, _store_unavailable) for kind in UNAVAILABLE)]
    for kind, handler in handlers:
        app.add_exception_handler(kind, _or_page(handler, pages) if pages else handler)


__all__ = [
    "R400",
    "R401",
    "R403",
    "R404",
    "R409",
    "R422",
    "R429",
    "STORE_RETRY_AFTER_S",
    "ApiError",
    "ErrorPages",
    "Responses",
    "install_handlers",
    "store_unavailable",
]
