"""The HTTP server of the API: uvicorn, with the limits a server facing untrusted clients needs.

Every size and every wait a client controls is bounded (docs/security.md, "The HTTP server"):

  - a request's line and headers must arrive within `http_header_timeout_s` of the connection (or of
    its first byte, on a kept-alive connection): a client that connects and says nothing, or trickles
    its headers a byte at a time (slowloris), is disconnected instead of holding a connection for ever;
  - they may take `http_max_header_bytes` at most (431), counted as they arrive: the parser (httptools)
    has no limit of its own and would gather a header of any length;
  - a body must arrive within `http_body_timeout_s` of its headers (408), and may have
    `http_max_body_bytes` at most (413): a Content-Length over it is refused before a byte of the body
    is read, a chunked body as soon as it passes it. FastAPI reads the whole body before a route runs,
    so a slow body never reaches the submission path (`JobService.submit_async`'s group commit);
  - an idle keep-alive connection closes after `http_idle_timeout_s`;
  - at most `http_max_connections` connections are open at once; one past it is answered 503 and
    closed at once, before it says anything.

A refusal is answered like the API's errors (`{"detail", "problems"}`) with `Connection: close`; the
server then stops reading, sends its end of the connection and drops what still comes for
`LINGER_S` at most, so that a client still sending its body reads the answer instead of a reset. A
refusal is never written into an answer under way: a pipelined request refused in its head is answered
after the requests before it (or the connection is closed without a word when that cannot be).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import threading
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from fastapi import FastAPI

    from disagg.control.config import Config

#: How long a refused connection is kept open, at most, to drop what its client still sends.
LINGER_S = 2.0
_REASONS = {408: "Request Timeout", 413: "Content Too Large", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class HttpLimits:
    """The server's limits (see the module docstring), from the `http_*` settings of the Config."""

    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    max_body_bytes: int
    max_connections: int
    max_connections_per_peer: int = 0  # 0: no limit per peer

    @classmethod
    def of(cls, settings: Config) -> HttpLimits:
        return cls(settings.http_header_timeout_s, settings.http_body_timeout_s, settings.http_max_header_bytes,
                   settings.http_max_body_bytes, settings.http_max_connections, settings.http_max_connections_per_peer)


#: Netlink's socket-diagnostics protocol and its request type (linux/sock_diag.h).
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20


def socket_owner(family: int, local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The uid that made the TCP socket with this local and remote address (the kernel's inet_diag, one
    exact lookup: about 56 µs here; reading /proc/net/tcp took 57 ms with 600 sockets). None: not found."""
    src = socket.inet_pton(family, local[0]).ljust(16, b"\0")
    dst = socket.inet_pton(family, remote[0]).ljust(16, b"\0")
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
    req += struct.pack("!HH", local[1], remote[1]) + src + dst + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    msg = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req  # NLM_F_REQUEST
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(0.5)
            nl.send(msg)
            data = nl.recv(8192)
    except OSError:
        return None
    if len(data) < 84 or struct.unpack_from("=H", data, 4)[0] != SOCK_DIAG_BY_FAMILY:
        return None
    uid: int = struct.unpack_from("=I", data, 16 + 64)[0]  # inet_diag_msg: 4 + sockid 48 + 12, then uid
    return uid


def peer_of(peer: Any, local: Any = None) -> str | None:
    """Who a connection comes from, for the per-peer limit: its address; on loopback, the Unix user that
    made the client's socket (a job with the host's network and the operator's CLI share 127.0.0.1).
    None: not limited (root, this server's own user, unknown)."""
    if not isinstance(peer, tuple) or len(peer) < 2:
        return None
    host = str(peer[0])
    if host not in ("::1", "::ffff:127.0.0.1") and not host.startswith("127."):
        return f"addr {host}"
    if not isinstance(local, tuple) or len(local) < 2:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    uid = socket_owner(family, (host, int(peer[1])), (str(local[0]), int(local[1])))
    return None if uid is None or uid in (0, os.geteuid()) else f"uid {uid}"


def refusal(status: int, detail: str) -> bytes:
    """A whole HTTP/1.1 answer with the API's error body, closing the connection."""
    body = json.dumps({"detail": detail, "problems": []}).encode()
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def _content_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The request's Content-Length (0 without one; the parser has checked that it is a number)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value)
    return 0



class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of the module docstring (`limits`, set by
    `guarded_protocol` on a subclass per server: uvicorn makes one protocol object per connection)."""

    limits: ClassVar[HttpLimits]
    _timer: asyncio.TimerHandle | None = None
    _in_head = True  # waiting for (the rest of) a request's line and headers
    _head_bytes = 0  # bytes of the request's line and headers parsed
    _head_waiting = 0  # bytes received since the request began, while its head is not whole
    _body_bytes = 0
    _refused = False
    _owed = b""  # a refusal to write once the answers to earlier pipelined requests are written
    _app_cycle: Any = None  # the app's request/answer of the request being read, once it has one
    _peer: str | None = None  # who the connection is counted against (`peer_of`), if anyone
    _peers: ClassVar[dict[str, int]] = {}  # the server's: connections open per peer

    def _deadline(self, seconds: float, status: int | None, detail: str) -> None:
        """Refuse the request with `status` unless `_clear` is called within `seconds`."""
        self._clear()
        self._timer = self.loop.call_later(seconds, self._refuse, status, detail)

    def _clear(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, status: int | None, detail: str) -> None:
        """Answer `status` (None, or an answer under way: close without a word), end the app's request,
        close."""
        self._clear()
        self._refused = True
        transport, cycle = self.transport, self._app_cycle
        if transport.is_closing():
            return
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive() says so, and its answer is dropped
            cycle.message_event.set()
        if status is not None and cycle is None and not self._may_answer():
            # A pipelined request refused in its head: answer once the earlier ones are (or close then).
            self._owed = refusal(status, detail)
            self._timer = self.loop.call_later(self.limits.body_timeout_s, transport.close)
        elif status is None or not self._may_answer():
            transport.close()
        else:
            self._answer(refusal(status, detail))

    def _answer(self, answer: bytes) -> None:
        """Write a refusal, send the end of the connection, drop what still comes for LINGER_S, close."""
        transport = self.transport
        transport.write(answer)
        self.flow.resume_reading()  # to drop what the client still sends (data_received)
        if transport.can_write_eof():
            transport.write_eof()
            self._timer = self.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()

    def _may_answer(self) -> bool:
        """Whether a refusal may be written now: no answer to an earlier (pipelined) request is owed or
        under way, and the app has not begun one to this request."""
        cycle = self._app_cycle
        if cycle is None:  # still in the head: the previous request must have been answered in full
            return self.cycle is None or bool(self.cycle.response_complete)
        return not cycle.response_started and all(queued is not cycle for queued, _ in self.pipeline)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refused = True
            transport.write(refusal(503, f"more than {self.limits.max_connections} connections at once"))
            transport.close()
            return
        most = self.limits.max_connections_per_peer
        if most:
            self._peer = peer_of(transport.get_extra_info("peername"), transport.get_extra_info("sockname"))
            if self._peer is not None:
                held = self._peers.get(self._peer, 0)
                self._peers[self._peer] = held + 1
                if held >= most:
                    self._refused = True
                    transport.write(refusal(503, f"more than {most} connections at once from {self._peer}"))
                    transport.close()
                    return
        self._begin_head()

    def _begin_head(self) -> None:
        self._in_head, self._app_cycle = True, None
        self._head_bytes = self._head_waiting = self._body_bytes = 0
        if self._timer is None:  # a silent or slow client is dropped without an answer, as before
            self._deadline(self.limits.header_timeout_s, None, "")

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._in_head and not self._refused:  # the parser keeps a header until it is whole
            self._head_waiting += len(data)
            if self._head_waiting > self.limits.max_header_bytes:
                self._refuse(431, f"the request's line and headers pass {self.limits.max_header_bytes} bytes")

    def _count_head(self, n: int) -> None:
        """Refuse (431) a head longer than the limit, parsed already (`n` more bytes) or still coming."""
        self._head_bytes += n
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse(431, f"the request's line and headers pass {self.limits.max_header_bytes} bytes")

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            super().on_url(url)
            self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused:
            super().on_header(name, value)
            self._count_head(len(name) + len(value) + 4)

    def on_message_begin(self) -> None:
        if self._refused:  # the rest of a chunk the refusal came in
            return
        super().on_message_begin()
        self._begin_head()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._clear()
        if _content_length(self.headers) > self.limits.max_body_bytes:
            self._refuse(413, f"the body passes {self.limits.max_body_bytes} bytes")
            return
        super().on_headers_complete()
        self._app_cycle = self.cycle
        self._deadline(self.limits.body_timeout_s, 408, f"the body did not come within {self.limits.body_timeout_s} s")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:  # chunked: counted as it comes
            self._refuse(413, f"the body passes {self.limits.max_body_bytes} bytes")
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._clear()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._owed and not self.transport.is_closing() and self._may_answer():
            self._clear()
            self._unset_keepalive_if_required()
            self._answer(self._owed)

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear()
        if self._peer is not None:
            left = self._peers.get(self._peer, 1) - 1
            if left > 0:
                self._peers[self._peer] = left
            else:
                self._peers.pop(self._peer, None)
            self._peer = None
        super().connection_lost(exc)


def guarded_protocol(limits: HttpLimits) -> type[GuardedProtocol]:
    """The protocol class uvicorn is given: GuardedProtocol with `limits` (and the server's count of the
    connections each peer holds)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits, "_peers": {}})


def serve_http(app: FastAPI, settings: Config, sock: socket.socket) -> None:
    """Run `app` on `sock` (bound already, so that the banner could name the real address) until
    stopped, with the limits of the module docstring."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=guarded_protocol(HttpLimits.of(settings)),
        timeout_keep_alive=settings.http_idle_timeout_s,
        # A connection past the limit is refused when it opens (GuardedProtocol.connection_made); requests
        # cannot outnumber the connections, so uvicorn's own check (503 once the *open connections*
        # reach it, counting the asking one) is set where it never refuses one that was let in.
        limit_concurrency=settings.http_max_connections + 1,
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True  # before uvicorn's own handler is in place: it stops at once once started

    # uvicorn shuts down on SIGTERM, then puts back the handler it found and raises the signal again. Found
    # SIG_DFL, that killed the process there: the caller's shutdown (stop the loop process, which PDEATHSIG
    # then SIGKILLed mid-round instead; give up the lease; say what is left running) never ran, and a replica
    # that stepped down ended by the signal instead of its exit code 3. The handler it finds now takes the
    # repeated signal as said already, and the caller's shutdown runs.
    if threading.current_thread() is not threading.main_thread():  # no signals there (uvicorn sets none)
        server.run(sockets=[sock])
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["GuardedProtocol", "HttpLimits", "guarded_protocol", "refusal", "serve_http"]
