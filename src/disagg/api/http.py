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
`LINGER_S` at most, so that a client still sending its body reads the answer instead of a reset.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_header_bytes: int = 16_384
    max_body_bytes: int = 1_048_576
    max_connections: int = 256

    @classmethod
    def of(cls, settings: Config) -> HttpLimits:
        return cls(settings.http_header_timeout_s, settings.http_body_timeout_s, settings.http_max_header_bytes,
                   settings.http_max_body_bytes, settings.http_max_connections)


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


def guarded_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with the limits of the module docstring."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Guarded(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _in_head = True  # waiting for (the rest of) a request's line and headers
        _head_bytes = 0  # bytes of the request's line and headers parsed
        _head_waiting = 0  # bytes received since the request began, while its head is not whole
        _body_bytes = 0
        _refused = False
        _app_cycle: Any = None  # the app's request/answer of the request being read, once it has one

        def _deadline(self, seconds: float, status: int | None, detail: str) -> None:
            """Refuse the request with `status` unless `_clear` is called within `seconds`."""
            self._clear()
            self._timer = self.loop.call_later(seconds, self._refuse, status, detail)

        def _clear(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _refuse(self, status: int | None, detail: str) -> None:
            """Answer `status` (None: close without a word) unless the app has begun its answer, end the
            app's request, close."""
            self._clear()
            self._refused = True
            transport, cycle = self.transport, self._app_cycle
            if transport.is_closing():
                return
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the app's receive() says so, and its answer is dropped
                cycle.message_event.set()
            if status is None:
                transport.close()
                return
            if cycle is None or not cycle.response_started:
                transport.write(refusal(status, detail))
            self.flow.resume_reading()  # to drop what the client still sends (data_received)
            if transport.can_write_eof():
                transport.write_eof()
                self._timer = self.loop.call_later(LINGER_S, transport.close)
            else:
                transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refused = True
                transport.write(refusal(503, f"more than {limits.max_connections} connections at once"))
                transport.close()
                return
            self._begin_head()

        def _begin_head(self) -> None:
            self._in_head, self._app_cycle = True, None
            self._head_bytes = self._head_waiting = self._body_bytes = 0
            if self._timer is None:  # a silent or slow client is dropped without an answer, as before
                self._deadline(limits.header_timeout_s, None, "")

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self._in_head and not self._refused:  # the parser keeps a header until it is whole
                self._head_waiting += len(data)
                if self._head_waiting > limits.max_header_bytes:
                    self._refuse(431, f"the request's line and headers pass {limits.max_header_bytes} bytes")

        def _count_head(self, n: int) -> None:
            """Refuse (431) a head longer than the limit, parsed already (`n` more bytes) or still coming."""
            self._head_bytes += n
            if self._head_bytes > limits.max_header_bytes:
                self._refuse(431, f"the request's line and headers pass {limits.max_header_bytes} bytes")

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
            if _content_length(self.headers) > limits.max_body_bytes:
                self._refuse(413, f"the body passes {limits.max_body_bytes} bytes")
                return
            super().on_headers_complete()
            self._app_cycle = self.cycle
            self._deadline(limits.body_timeout_s, 408, f"the body did not come within {limits.body_timeout_s} s")

        def on_body(self, body: bytes) -> None:
            if self._refused:
                return
            self._body_bytes += len(body)
            if self._body_bytes > limits.max_body_bytes:  # chunked: counted as it comes
                self._refuse(413, f"the body passes {limits.max_body_bytes} bytes")
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refused:
                return
            self._clear()
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._clear()
            super().connection_lost(exc)

    return Guarded


def serve_http(app: FastAPI, settings: Config, sock: socket.socket) -> None:
    """Run `app` on `sock` (bound already, so that the banner could name the real address) until
    stopped, with the limits of the module docstring."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=guarded_protocol(HttpLimits.of(settings)),
        timeout_keep_alive=settings.http_idle_timeout_s,
        # A connection past the limit is refused when it opens (Guarded.connection_made); requests
        # cannot outnumber the connections, so uvicorn's own check (503 once the *open connections*
        # reach it, counting the asking one) is set where it never refuses one that was let in.
        limit_concurrency=settings.http_max_connections + 1,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["HttpLimits", "guarded_protocol", "refusal", "serve_http"]
