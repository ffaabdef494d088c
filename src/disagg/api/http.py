"""The HTTP server of the API: uvicorn, with the limits a server facing untrusted clients needs.

  - a request's headers must arrive within `http_header_timeout_s` of the connection (or of the
    previous answer on it): a client that connects and says nothing, or trickles its headers a byte
    at a time (slowloris), is disconnected instead of holding a connection for ever;
  - an idle keep-alive connection closes after `http_idle_timeout_s`;
  - at most `http_max_connections` connections and requests at once; past that, 503 at once;
  - request headers are bounded by the parser (h11/httptools: 16 KiB of incomplete headers).
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from disagg.control.config import Config


def guarded_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline for a request's headers (see the module docstring)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderDeadline(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline


def serve_http(app: FastAPI, settings: Config, sock: socket.socket) -> None:
    """Run `app` on `sock` (bound already, so that the banner could name the real address) until
    stopped, with the limits of the module docstring."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=guarded_protocol(settings.http_header_timeout_s),
        timeout_keep_alive=settings.http_idle_timeout_s,
        limit_concurrency=settings.http_max_connections,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["guarded_protocol", "serve_http"]
