"""The HTTP server's defences, attacked over raw sockets against a real `disagg serve` (issue 13: "every
size a tenant controls is bounded", "no tenant's input can stop scheduling for the others").

The server runs with small limits from its config file (HTTP below) so that each attack takes a few
seconds: slow headers (slowloris), a slow or stalled body, a body over the size limit (with and without
Content-Length), a connection flood, idle keep-alive connections, hostile JSON and headers. Each test
also checks that the others are still served, and the API process's RSS is read before and after.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from control_helpers import Server, admin_token

FAST = ["--latency-scale", "0.002", "--tick-s", "0.02", "--round-gap-s", "0.02"]
#: A request answered within HELD_S was not held by an attack: a held one waits for the attack's own
#: timeout (the header or the body timeout below, at least twice as long), while one on a busy machine
#: takes well under a second (0.63 s was seen with two CPU-bound neighbours). Not a speed target.
HELD_S = 2.0
#: Slack for "the server cut it off at its timeout": time to notice and close on a busy machine.
SLACK_S = 3.0
HEADER_TIMEOUT_S, BODY_TIMEOUT_S, IDLE_TIMEOUT_S, MAX_CONNECTIONS = 2 * HELD_S, 2 * HELD_S + 0.5, 1, 40
MAX_HEADER_BYTES, MAX_BODY_BYTES = 8192, 262_144
HTTP = (f"http_header_timeout_s: {HEADER_TIMEOUT_S}\nhttp_body_timeout_s: {BODY_TIMEOUT_S}\n"
        f"http_idle_timeout_s: {IDLE_TIMEOUT_S}\nhttp_max_connections: {MAX_CONNECTIONS}\n"
        f"http_max_header_bytes: {MAX_HEADER_BYTES}\nhttp_max_body_bytes: {MAX_BODY_BYTES}\n")


@dataclass
class Api:
    """A running `disagg serve` and the tokens of tenant alice and the admin."""

    server: Server
    tokens: dict[str, str]

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=5)

    def head(self, method: str, path: str, who: str = "alice", extra: str = "") -> bytes:
        """A request's head as a client would send it, with `who`'s token."""
        return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.tokens[who]}\r\n"
                f"{extra}\r\n").encode()

    def served(self) -> float:
        """Seconds a fresh client waits for its list of jobs (asserting it is answered 200)."""
        t0 = time.monotonic()
        r = httpx.get(self.server.url + "/v1/jobs?limit=1", headers=self.auth(), timeout=30)
        assert r.status_code == 200, r.text
        return time.monotonic() - t0

    def auth(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def rss_mb(self, peak: bool = False) -> float:
        """The API process's resident memory now (or its peak), MB; the forked server is the API process,
        its loop process is a child of it."""
        key = "VmHWM:" if peak else "VmRSS:"
        status = Path(f"/proc/{self.server.pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith(key)).split()[1]) / 1024


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    root = Path(tempfile.mkdtemp(prefix="disagg-http-"))
    config = root / "disagg.yaml"
    config.write_text("tenants: [{name: alice}, {name: bob}]\n" + HTTP)
    server = Server(root, f"sqlite:///{root / 'd.db'}", [*FAST, "--config", str(config)])
    server.start()
    try:
        server.ready()
        tokens = {"admin": admin_token(root)}
        r = httpx.post(server.url + "/v1/tokens", headers={"Authorization": f"Bearer {tokens['admin']}"},
                       json={"tenant": "alice"}, timeout=10)
        assert r.status_code == 201, r.text
        tokens["alice"] = r.json()["token"]
        yield Api(server, tokens)
        log = (root / "server.log").read_text()
        assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)


def answer(s: socket.socket, timeout: float = 5.0) -> tuple[int | None, float]:
    """The status code the server answers on `s` (None: it closed or reset the connection without one)
    and the seconds it took."""
    t0 = time.monotonic()
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    code = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None
    return code, time.monotonic() - t0


def closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the server closes `s` within `seconds` (reading and dropping what it sends first)."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            if not s.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:  # reset
        return True
    return False


def refused_now(s: socket.socket) -> bool:
    """Whether the server has closed `s` already, answering nothing or 503."""
    if not select.select([s], [], [], 0)[0]:
        return False
    s.setblocking(False)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except BlockingIOError:  # open still, what it said is all there is
        return False
    except OSError:  # reset
        return True
    finally:
        s.setblocking(True)
    return data == b"" or data.startswith(b"HTTP/1.1 503 ")


def send_quietly(s: socket.socket, data: bytes) -> bool:
    """Send `data`; False when the server has closed the connection meanwhile."""
    try:
        s.sendall(data)
        return True
    except OSError:
        return False


def test_slow_headers_hold_no_one_and_are_cut_at_the_header_timeout(api: Api) -> None:
    """Slowloris: 30 connections each send a header byte every 0.2 s. Others are answered at once
    meanwhile, and every slow connection is closed about `http_header_timeout_s` after it opened."""
    slow = [api.connect() for _ in range(30)]
    opened = time.monotonic()
    stop = threading.Event()

    def trickle() -> None:
        head = api.head("GET", "/v1/jobs", extra="X-Pad: ") + b"a" * 1000
        for i in range(len(head)):
            if stop.wait(0.2):
                return
            for s in slow:
                send_quietly(s, head[i:i + 1])

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        waits = [api.served() for _ in range(5)]
        assert max(waits) < HELD_S, waits
        assert all(closed_within(s, opened + HEADER_TIMEOUT_S + SLACK_S - time.monotonic()) for s in slow)
        took = time.monotonic() - opened
        print(f"slowloris: others answered in {max(waits) * 1000:.0f} ms at most; all closed after {took:.2f} s")
        assert took < HEADER_TIMEOUT_S + SLACK_S
    finally:
        stop.set()
        sender.join()
        for s in slow:
            s.close()
    assert api.served() < HELD_S


@pytest.mark.parametrize("stall", [False, True], ids=["trickle", "stall"])
def test_a_slow_body_is_cut_off_and_holds_no_one_elses_submission(api: Api, stall: bool) -> None:
    """POST /v1/jobs announcing 200,000 bytes (within the limit), then 10 bytes every 0.1 s (or nothing): cut off with a
    408 within `http_body_timeout_s`; meanwhile another client's jobs are submitted at once."""
    with api.connect() as slow:
        slow.sendall(api.head("POST", "/v1/jobs", extra="Content-Type: application/json\r\n"
                              "Content-Length: 200000\r\n") + b'{"name": "')
        t0 = time.monotonic()
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.1) and send_quietly(slow, b"a" * 10):
                pass

        sender = threading.Thread(target=trickle, daemon=True)
        if not stall:
            sender.start()
        try:
            waits = []
            for _ in range(3):
                t1 = time.monotonic()
                r = httpx.post(api.server.url + "/v1/jobs", headers=api.auth(), timeout=30,
                               json={"name": "other", "command": ["true"], "tasks": {"count": 1, "cpus": 1}})
                waits.append(time.monotonic() - t1)
                assert r.status_code == 201 and waits[-1] < HELD_S, (waits, r.text)
            code, _ = answer(slow, timeout=BODY_TIMEOUT_S + SLACK_S)
            print(f"slow body: others submitted in {max(waits) * 1000:.0f} ms at most; "
                  f"{code} after {time.monotonic() - t0:.2f} s")
        finally:
            stop.set()
            if not stall:
                sender.join()
        assert code == 408 and time.monotonic() - t0 < BODY_TIMEOUT_S + SLACK_S


def test_a_body_over_the_limit_is_refused_before_it_is_read(api: Api) -> None:
    """A Content-Length over `http_max_body_bytes` is answered 413 before any of the body is sent; a
    chunked body is counted as it arrives and answered 413 while its end is still to come; a body of
    exactly the limit is read (and judged by the API: 422)."""
    with api.connect() as s:
        s.sendall(api.head("POST", "/v1/jobs", extra=f"Content-Length: {MAX_BODY_BYTES + 1}\r\n"))
        code, took = answer(s)
        assert code == 413 and took < HELD_S  # not after waiting for the body (BODY_TIMEOUT_S)
    with api.connect() as s:
        s.sendall(api.head("POST", "/v1/jobs", extra="Transfer-Encoding: chunked\r\n"))
        chunk = b"%x\r\n%s\r\n" % (65536, b"[" * 65536)
        for _ in range(2 * MAX_BODY_BYTES // 65536):  # twice the limit, never the last chunk
            if not send_quietly(s, chunk):
                break
        assert answer(s)[0] == 413
    body = json.dumps({"name": "x", "command": ["true"], "tasks": {"count": 1}, "pad": ""}).encode()
    at_limit = body.replace(b'"pad": ""', b'"pad": "' + b"p" * (MAX_BODY_BYTES - len(body)) + b'"')
    assert len(at_limit) == MAX_BODY_BYTES
    for content, want in ((at_limit, 422), (at_limit + b" ", 413)):
        r = httpx.post(api.server.url + "/v1/jobs", headers={**api.auth(), "Content-Type": "application/json"},
                       content=content, timeout=5)
        assert r.status_code == want, r.text[:200]
    assert api.served() < HELD_S


def test_a_connection_flood_is_refused_and_the_server_serves_afterwards(api: Api) -> None:
    """150 silent connections against `http_max_connections` = 40: those past the limit are closed at
    once (with a 503), the server stays up, and when the flood ends it serves again."""
    before = api.rss_mb()
    flood = [api.connect() for _ in range(150)]
    try:
        # refused at once: before the header timeout would close the silent ones it let in (at load
        # average 30 on two cores the 110 refusals took 1.5 s to be seen; they take 0.1-0.5 s on a quiet one)
        t0 = time.monotonic()
        deadline, seen = t0 + HEADER_TIMEOUT_S - 0.5, set()
        while len(seen) < 150 - MAX_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.05)
            seen |= {i for i, s in enumerate(flood) if i not in seen and refused_now(s)}
        refused = len(seen)
        print(f"flood: {refused} of 150 refused at once (in {time.monotonic() - t0:.2f} s)")
        assert refused >= 150 - MAX_CONNECTIONS, refused
        with api.connect() as late:  # a request while the limit is taken: refused, not left waiting
            send_quietly(late, api.head("GET", "/healthz"))
            code, took = answer(late)
            assert code in (503, None) and took < HELD_S  # not left waiting for a slot (HEADER_TIMEOUT_S)
    finally:
        for s in flood:
            s.close()
    time.sleep(0.2)
    assert api.served() < HELD_S
    print(f"flood: API RSS {before:.1f} MB before, {api.rss_mb():.1f} MB after")
    assert api.rss_mb() - before < 20


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(api: Api) -> None:
    with api.connect() as s:
        s.sendall(api.head("GET", "/healthz"))
        assert answer(s)[0] == 200
        t0 = time.monotonic()
        assert closed_within(s, IDLE_TIMEOUT_S + SLACK_S) and time.monotonic() - t0 > IDLE_TIMEOUT_S - 0.2


def _nested(depth: int) -> bytes:
    return b'{"name": "x", "command": ["true"], "tasks": {"count": 1}, "x": ' + b"[" * depth + b"]" * depth + b"}"


HOSTILE_BODIES = {
    "100k-nested-arrays": b"[" * 100_000 + b"]" * 100_000,
    "30k-nested-objects": b'{"a": ' * 30_000 + b"1" + b"}" * 30_000,
    "nested-in-a-field": _nested(100_000),
    "string-at-the-limit": json.dumps({"name": "n" * (MAX_BODY_BYTES - 100), "command": ["true"]}).encode(),
    "50k-arguments": json.dumps({"name": "x", "command": [""] * 50_000, "tasks": {"count": 1}}).encode(),
    "a-huge-number": b'{"name": "x", "command": ["true"], "tasks": {"count": 1' + b"0" * 100_000 + b"}}",
    "not-utf8": b'{"name": "\xff\xfe"}',
}


@pytest.mark.parametrize("body", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_hostile_json_is_a_4xx(api: Api, body: bytes) -> None:
    assert len(body) <= MAX_BODY_BYTES
    r = httpx.post(api.server.url + "/v1/jobs", headers={**api.auth(), "Content-Type": "application/json"},
                   content=body, timeout=10)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert api.served() < HELD_S


def _header_attacks(api: Api) -> dict[str, bytes]:
    """Requests whose head is over `http_max_header_bytes` (or near it), each with what it must get."""
    line = f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.tokens['alice']}\r\n"
    return {
        "5000-headers": (line + "".join(f"X-{i}: v\r\n" for i in range(5000)) + "\r\n").encode(),
        "a-2-MB-header": (line + "X-Big: " + "b" * 2_000_000 + "\r\n\r\n").encode(),
        "a-2-MB-url": ("GET /v1/jobs?" + "q" * 2_000_000 + " HTTP/1.1\r\nHost: x\r\n\r\n").encode(),
        "a-40-MB-header": (line + "X-Big: " + "b" * 40_000_000 + "\r\n\r\n").encode(),
        "an-endless-header": (line + "X-Big: " + "b" * 1_000_000).encode(),  # never ends: 431 while it comes
    }


def test_huge_or_many_headers_are_a_431_and_the_api_stays_small(api: Api) -> None:
    """Heads over `http_max_header_bytes` are answered 431 as soon as the limit is passed (the rest is
    not read); 100 ordinary headers are fine; the API process's peak RSS grows by less than 20 MB."""
    before, peak = api.rss_mb(), api.rss_mb(peak=True)
    for name, request in _header_attacks(api).items():
        with api.connect() as s:
            sender = threading.Thread(target=send_quietly, args=(s, request), daemon=True)
            sender.start()
            code, took = answer(s)
            assert code == 431 and took < HELD_S, (name, code, took)  # not at the header timeout
            s.shutdown(socket.SHUT_RDWR)
            sender.join()
    many = {f"X-{i}": "v" for i in range(100)}
    assert httpx.get(api.server.url + "/v1/jobs?limit=1", headers={**api.auth(), **many}, timeout=5).status_code == 200
    grew, peaked = api.rss_mb() - before, api.rss_mb(peak=True) - peak
    print(f"API RSS {before:.1f} MB before the header attacks, grew {grew:.1f} MB, its peak by {peaked:.1f} MB")
    assert grew < 20 and peaked < 20


PIPELINED = {  # what follows a GET /healthz sent in the same write, and the answers due to both
    "a-get": (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", [200, 200]),
    "a-body-over-the-limit": (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
                              .encode(), [200, 413]),
    "a-stalled-body": (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{", [200, 408]),
}


@pytest.mark.parametrize(("second", "want"), PIPELINED.values(), ids=PIPELINED.keys())
def test_a_refused_pipelined_request_is_answered_after_the_one_before_it(api: Api, second: bytes,
                                                                         want: list[int]) -> None:
    """A refusal is never written into the middle of an earlier request's answer: it follows it."""
    with api.connect() as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + second)
        s.settimeout(BODY_TIMEOUT_S + IDLE_TIMEOUT_S + SLACK_S)
        data = b""
        try:
            while len(re.findall(rb"HTTP/1\.1 \d{3} ", data)) < 2 and (chunk := s.recv(65536)):
                data += chunk
        except TimeoutError:
            pass
        assert [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)] == want, data[:300]
