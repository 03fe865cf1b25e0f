"""The little of HTTP the inbox needs, over raw ASGI: a request view, whole responses, a body
read with a bound.

Every response carries the same protective headers: a Content-Security-Policy that allows
only this origin's own script and style (no inline script, no plug-ins, no framing, no form
posts elsewhere), ``nosniff``, ``no-referrer`` (the first visit's URL holds the token) and
``no-store``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import attrs

__all__ = [
    "SECURITY_HEADERS",
    "BodyTooLargeError",
    "Receive",
    "Request",
    "Send",
    "read_body",
    "respond",
    "start_response",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
)


class BodyTooLargeError(Exception):
    """The request body is longer than the bound given to :func:`read_body`."""


@attrs.frozen(kw_only=True)
class Request:
    """One HTTP request as the app reads it: method, path, query string, headers."""

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def from_scope(cls, scope: Scope) -> Request:
        """The request of an ASGI ``http`` *scope*."""
        return cls(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=tuple(
                (name.decode("latin-1").lower(), value.decode("latin-1"))
                for name, value in scope.get("headers", [])
            ),
        )

    def header(self, name: str) -> str | None:
        """The first header called *name* (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, or :class:`BodyTooLargeError` past *limit* bytes.

    Cancellation: stops reading; the request is abandoned.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body longer than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def start_response(
    send: Send,
    status: int,
    content_type: str,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Send the status line and headers: the security headers, each replaced by one of *extra*
    of the same name (the stats page's own Content-Security-Policy), then *extra*.

    Cancellation: the response may be cut short; the client sees a broken connection.
    """
    named = {name for name, _ in extra}
    kept = [header for header in SECURITY_HEADERS if header[0] not in named]
    headers = [(b"content-type", content_type.encode()), *kept, *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Send a whole response. Cancellation: as :func:`start_response`."""
    await start_response(send, status, content_type, extra)
    await send({"type": "http.response.body", "body": body})
