"""A Content-Security-Policy on every answer: a page of disagg's may load from disagg only.

The dashboard asks for nothing elsewhere, and Swagger UI and ReDoc are served from the package's own
copies; but ReDoc's bundle still shows a logo from its maker's CDN. In an air-gapped data center
that request would only hang; with this policy the browser does not send it at all. Inline scripts
and styles are allowed (FastAPI's docs pages start Swagger UI and ReDoc inline; matplotlib's SVG
charts carry style attributes); workers from blob: URLs are ReDoc's.

A plain ASGI middleware (it only adds a header to the response's start): no cost per request worth
measuring, unlike Starlette's BaseHTTPMiddleware.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
          "script-src 'self' 'unsafe-inline'; worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:; "
          "frame-ancestors 'none'; base-uri 'self'; form-action 'self'")


class SameOriginOnly:
    """Adds the policy (and `X-Content-Type-Options: nosniff`) to every HTTP answer of `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"content-security-policy", POLICY.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_policy)


__all__ = ["POLICY", "SameOriginOnly"]
