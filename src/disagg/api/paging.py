"""Cursor pagination, the same for every list of the API.

A listing answers at most `limit` items (default 100, at most 500) and `next`: the path of the next
page (the same query with `cursor=`), or null on the last page. A cursor is opaque to clients: the
sort key of the page's last item, so a page is stable while items come and go (no item is skipped
or shown twice, unlike an offset). A cursor this API did not give answers 422.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Query, Request

from disagg.api.errors import ApiError

#: Items per page by default, and at most.
DEFAULT_LIMIT = 100
MAX_LIMIT = 500

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Items per page (1–{MAX_LIMIT}).")]
Cursor = Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_=-]+$",
                                     description="Where the page starts: a previous page's `next` gives it.")]


def encode_cursor(key: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


#: The parts a cursor's key may have: a sort key's integer (a position, a sequence number, an id: 64-bit),
#: float (a time: finite) or string (an id: at most this long).
MAX_KEY_TEXT = 256


def decode_cursor(cursor: str | None, *types: type) -> list[Any] | None:
    """The key a cursor carries (None: the first page), one part of each of `types` (int, float or str);
    422 naming the cursor for one this API did not give: not base64 JSON, another length, a part of another
    type, an integer past 64 bits, a float that is not finite, a string too long (a crafted cursor was a
    500 with a traceback: `int("x")`, an overflow in the database driver)."""
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError):
        key = None
    if not isinstance(key, list) or len(key) != len(types) or not all(map(_fits, key, types)):
        raise ApiError(422, "cursor: not a cursor this API gave (use a page's `next`)",
                       [{"field": "cursor", "message": "not a cursor this API gave"}])
    return [float(k) if t is float else k for k, t in zip(key, types, strict=True)]


def _fits(part: Any, kind: type) -> bool:
    """Whether a cursor's part is a value of `kind` the store can compare with (module docstring)."""
    if isinstance(part, bool):
        return False
    if kind is int:
        return isinstance(part, int) and -2**63 <= part < 2**63
    if kind is float:
        return isinstance(part, int | float) and math.isfinite(part) and abs(part) < 1e300
    return isinstance(part, str) and len(part) <= MAX_KEY_TEXT


def next_link(request: Request, key: list[Any] | None) -> str | None:
    """The path and query of the page after this one (None: this was the last)."""
    if key is None:
        return None
    params = dict(request.query_params)
    params["cursor"] = encode_cursor(key)
    return str(request.url.path) + "?" + urlencode(params)


__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Cursor", "Limit", "decode_cursor", "encode_cursor", "next_link"]
