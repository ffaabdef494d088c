"""What the browser tests read from Chrome besides the page: the requests it sent."""

from __future__ import annotations

import json
from typing import Any


def requested_urls(driver: Any) -> list[str]:
    """Every URL the browser sent a request for since the last call (Chrome's performance log, drained).

    A request the page's Content-Security-Policy stopped in the browser (`blockedReason: csp`) was
    never sent, and is left out."""
    urls: list[tuple[str, str]] = []  # (request id, url): a redirect is a second url under the same id
    blocked: set[str] = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message.get("method") == "Network.requestWillBeSent":
            urls.append((params["requestId"], params["request"]["url"]))
        elif message.get("method") == "Network.loadingFailed" and params.get("blockedReason") == "csp":
            blocked.add(params["requestId"])
    return [url for rid, url in urls if rid not in blocked]
