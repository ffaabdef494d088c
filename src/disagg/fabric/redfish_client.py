"""A Redfish client that behaves as a client of real hardware must (httpx underneath).

  - login: a session (`POST SessionService/Sessions`, `X-Auth-Token`), Basic credentials where the
    service has no session service; a 401 on a request logs in again once;
  - TLS verified by default (`insecure` turns it off; a CA bundle may be named), every request with a
    timeout;
  - 5xx answers and connection errors retried with exponential backoff (`retries`, `backoff_s`), then
    a retryable FabricError;
  - `202 Accepted` followed: the task monitor (`Location`, absolute or relative) is polled until it
    answers something else, honouring `Retry-After`, within `task_timeout_s`;
  - DELETE done on 200/202/204, and on 404 (deleted already: a repeat after a crash);
  - ETags: a resource's last ETag goes back as `If-Match` when it is changed (a 412 re-reads and
    retries once);
  - a Redfish error (`@Message.ExtendedInfo`) becomes `RedfishFault` with the service's messages:
    `ResourceInUse` (and any 4xx) is not retryable, and names the blocks in use.

sushy (OpenStack's client) reads compositions but cannot compose, and two of its bugs break reading a
schema-correct service (docs/design-decisions.md), so this client is plain httpx.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin, urlparse

import httpx

from disagg.fabric.base import FabricError

SESSIONS = "/redfish/v1/SessionService/Sessions"


#: The longest a client waits on a service's 429 before its next try (the service's Retry-After, capped).
MAX_RETRY_AFTER_S = 5.0


def _retry_after(response: httpx.Response) -> float:
    """The seconds a 429's `Retry-After` asks for (1 when it names none a client can read)."""
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


class RedfishFault(FabricError):
    """A Redfish request failed: HTTP `status` (0: no answer), the service's message ids and messages,
    and for `ResourceInUse` the URIs in use (`in_use`)."""

    def __init__(self, message: str, status: int = 0, message_ids: tuple[str, ...] = (),
                 in_use: tuple[str, ...] = (), retryable: bool | None = None) -> None:
        super().__init__(message, retryable=status in (0, 429) or status >= 500 if retryable is None else retryable)
        self.status, self.message_ids, self.in_use = status, message_ids, in_use

    @property
    def resource_in_use(self) -> bool:
        return any(m.endswith(".ResourceInUse") for m in self.message_ids)


def fault_of(response: httpx.Response, what: str) -> RedfishFault:
    """The error a Redfish answer carries: the messages of `@Message.ExtendedInfo` (or `error.message`)."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    infos = error.get("@Message.ExtendedInfo", []) if isinstance(error, dict) else []
    infos = [i for i in infos if isinstance(i, dict)]
    ids = tuple(str(i.get("MessageId", "")) for i in infos)
    messages = [str(i.get("Message", "")) for i in infos if i.get("Message")]
    text = "; ".join(messages) or (error.get("message") if isinstance(error, dict) else None) or response.reason_phrase
    in_use = tuple(str(a) for i in infos if str(i.get("MessageId", "")).endswith(".ResourceInUse")
                   for a in i.get("MessageArgs", []) or [])
    return RedfishFault(f"{what}: HTTP {response.status_code}: {text}", response.status_code, ids, in_use)


class RedfishClient:
    """One Redfish service, logged in lazily; thread-safe (httpx's client is, the session is locked)."""

    def __init__(self, url: str, username: str | None = None, password: str | None = None, *,
                 verify: bool | str = True, timeout_s: float = 10.0, retries: int = 4, backoff_s: float = 0.2,
                 task_timeout_s: float = 300.0, task_poll_s: float = 0.1,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base = url.rstrip("/")
        self.username, self.password = username, password
        self.retries, self.backoff_s = retries, backoff_s
        self.task_timeout_s, self.task_poll_s = task_timeout_s, task_poll_s
        self.http = httpx.Client(base_url=self.base, verify=verify, timeout=timeout_s, transport=transport,
                                 headers={"OData-Version": "4.0", "Accept": "application/json"})
        self._lock = threading.Lock()
        self._token: str | None = None
        self._session: str | None = None
        self._basic = False
        self._etags: dict[str, str] = {}

    # --- auth --------------------------------------------------------------------------------
    def _auth(self) -> dict[str, str]:
        if self.username is None:
            return {}
        with self._lock:
            if self._token is None and not self._basic:
                self._login()
            if self._token is not None:
                return {"X-Auth-Token": self._token}
        return {}

    def _login(self) -> None:
        """A session if the service has one; Basic otherwise (404/405/501 on the sessions URI)."""
        body = {"UserName": self.username, "Password": self.password}
        response = self._send("POST", SESSIONS, json=body, auth=False)
        if response.status_code in (404, 405, 501):
            self._basic = True
            self.http.auth = httpx.BasicAuth(self.username or "", self.password or "")
            return
        if response.status_code not in (200, 201) or "X-Auth-Token" not in response.headers:
            raise fault_of(response, "login")
        self._token = response.headers["X-Auth-Token"]
        self._session = response.headers.get("Location")

    def close(self) -> None:
        """Log out (the session is the service's resource) and close the connections."""
        with self._lock:
            token, session, self._token = self._token, self._session, None
        if token is not None and session:
            with contextlib.suppress(httpx.HTTPError):  # the service is gone: so is the session
                self.http.delete(self.path(session), headers={"X-Auth-Token": token})
        self.http.close()

    # --- requests ----------------------------------------------------------------------------
    def path(self, location: str) -> str:
        """A `Location` or `@odata.id`, absolute or relative, as a URL relative to the service when it is
        the service's own (an absolute URL elsewhere is kept)."""
        full = urljoin(self.base + "/", location)
        base = urlparse(self.base)
        parsed = urlparse(full)
        if (parsed.scheme, parsed.netloc) == (base.scheme, base.netloc):
            return parsed.path + (f"?{parsed.query}" if parsed.query else "")
        return full

    def _send(self, method: str, path: str, json: Any = None, headers: dict[str, str] | None = None,
              auth: bool = True) -> httpx.Response:
        """One request, retried with backoff on a connection error or a 5xx, after the service's Retry-After
        on a 429 (its rate limit); a 401 logs in again once."""
        relogged = False
        for attempt in range(self.retries + 1):
            try:
                hdrs = {**(self._auth() if auth else {}), **(headers or {})}
                response = self.http.request(method, path, json=json, headers=hdrs)
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise RedfishFault(f"{method} {path}: no answer from {self.base}: {exc}") from exc
            else:
                if response.status_code == 401 and auth and not relogged and self.username is not None:
                    relogged = True
                    with self._lock:
                        self._token = None
                    continue
                if response.status_code == 429 and attempt < self.retries:  # the service's rate limit
                    time.sleep(min(_retry_after(response), MAX_RETRY_AFTER_S))
                    continue
                if response.status_code < 500 or attempt == self.retries:
                    return response
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def get(self, path: str) -> dict[str, Any]:
        """A resource; its ETag is kept for the next change."""
        response = self._send("GET", self.path(path))
        if response.status_code != 200:
            raise fault_of(response, f"GET {path}")
        if "ETag" in response.headers:
            self._etags[self.path(path)] = response.headers["ETag"]
        body = response.json()
        if not isinstance(body, dict):
            raise RedfishFault(f"GET {path}: not a JSON object", response.status_code, retryable=False)
        return body

    def members(self, path: str) -> list[str]:
        """The member URIs of a collection."""
        return [str(m["@odata.id"]) for m in self.get(path).get("Members", []) if isinstance(m, dict)]

    def change(self, method: str, path: str, json: Any = None, etag_of: str | None = None,
               ok: Iterable[int] = (200, 201, 204)) -> httpx.Response:
        """POST, PATCH or DELETE, with If-Match when the service gave an ETag for `etag_of` (default `path`);
        a 202 is followed to its task's end. Returns the final answer; RedfishFault otherwise."""
        target = self.path(etag_of or path)
        for again in (False, True):
            tag = self._etags.get(target)
            response = self._send(method, self.path(path), json=json, headers={"If-Match": tag} if tag else None)
            if response.status_code == 412 and tag and not again:
                self._etags.pop(target, None)
                self.get(target)  # read it again: its current ETag
                continue
            break
        if response.status_code == 202:
            response = self.wait(response, f"{method} {path}")
        if response.status_code not in set(ok):
            raise fault_of(response, f"{method} {path}")
        return response

    def wait(self, accepted: httpx.Response, what: str) -> httpx.Response:
        """Poll the task monitor of a 202 until it answers anything but 202 (within task_timeout_s)."""
        monitor = accepted.headers.get("Location")
        if not monitor:
            return accepted
        end = time.monotonic() + self.task_timeout_s
        response = accepted
        while response.status_code == 202:
            if time.monotonic() > end:
                raise RedfishFault(f"{what}: its task {monitor} still runs after {self.task_timeout_s:g}s")
            delay = response.headers.get("Retry-After")
            time.sleep(min(float(delay), 5.0) if delay and delay.isdigit() else self.task_poll_s)
            response = self._send("GET", self.path(monitor))
        return response

    def delete(self, path: str) -> None:
        """Delete a resource; gone already (404) is done."""
        try:
            self.change("DELETE", path, ok=(200, 202, 204))
        except RedfishFault as exc:
            if exc.status != 404:
                raise


__all__ = ["RedfishClient", "RedfishFault", "fault_of"]
