"""The HTTP/1.1 client of the MCP gate's streamable-HTTP upstream: one request per
connection, on trio, with h11 (the sans-I/O HTTP/1.1 library hypercorn is built on, so every
install of the broker has it).

Synopsis::

    url = UpstreamUrl.parse("http://127.0.0.1:8000/mcp")     # ValueError: says what to fix
    async with exchange(url, b"POST", body, headers) as response:
        response.status, response.header(b"content-type")
        while (chunk := await response.next_chunk()) is not None:
            ...

Bounds: connecting (and the TLS handshake) within *connect_deadline*; the response's status
line and headers within :data:`MAX_HEADER_BYTES`; the body is read chunk by chunk, never
buffered here. Redirects are not followed (the caller sees the 3xx).
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import h11
import trio

__all__ = ["MAX_HEADER_BYTES", "HttpError", "Response", "UpstreamUrl", "exchange"]

#: The longest status line and headers a server may send.
MAX_HEADER_BYTES: Final = 64 * 1024
_CHUNK: Final = 64 * 1024


class HttpError(Exception):
    """The exchange broke: the connection failed, or the server broke HTTP/1.1."""


@attrs.frozen
class UpstreamUrl:
    """Where the upstream MCP server answers: ``http://`` or ``https://`` with a host."""

    text: str
    tls: bool
    host: str
    port: int
    #: The request target: the path and query (``/`` when none).
    target: bytes
    #: The ``Host`` header.
    authority: bytes

    @classmethod
    def parse(cls, text: str) -> UpstreamUrl:
        """Read *text*; :class:`ValueError` naming what is wrong and the fix."""
        example = "e.g. http://127.0.0.1:8000/mcp"
        try:
            parts = urllib.parse.urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"--upstream-url {text!r} is not a URL ({exc}): {example}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"--upstream-url must be an http:// or https:// URL with a host, {example}, "
                f"got {text!r}"
            )
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "--upstream-url must not carry credentials (user:password@): the gate sends "
                f"none, {example}"
            )
        if not text.isascii() or any(char.isspace() for char in text):
            raise ValueError(
                f"--upstream-url must be ASCII without spaces (percent-encode the rest), {example}"
            )
        tls = parts.scheme == "https"
        port = port if port is not None else (443 if tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(
            text=text,
            tls=tls,
            host=parts.hostname,
            port=port,
            target=target.encode("ascii"),
            authority=parts.netloc.encode("ascii"),
        )


@attrs.define(eq=False)
class Response:
    """The status and headers of a response; :meth:`next_chunk` reads its body."""

    status: int
    headers: dict[bytes, bytes]
    _connection: h11.Connection
    _stream: trio.abc.Stream

    def header(self, name: bytes) -> bytes | None:
        """The value of header *name* (lower case), the last one if repeated."""
        return self.headers.get(name)

    async def next_chunk(self) -> bytes | None:
        """The next piece of the body as it arrives; ``None`` at its end. :class:`HttpError`
        if the connection breaks first. (A method, not an async generator: a reader that
        stops early leaves nothing for the garbage collector to finalize.)

        Cancellation: the body's rest is lost (the caller is leaving the exchange).
        """
        while True:
            event = await _next_event(self._connection, self._stream)
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return None
            else:
                raise HttpError(
                    f"the connection broke off in the response ({type(event).__name__})"
                )


async def _next_event(connection: h11.Connection, stream: trio.abc.Stream) -> object:
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            if connection.their_state is h11.ERROR and _closed(connection):
                raise HttpError("the server closed the connection in mid-response") from None
            raise HttpError(f"not HTTP/1.1: {exc}") from None
        if event is not h11.NEED_DATA:
            await trio.lowlevel.checkpoint()  # events already buffered: still yield
            return event
        try:
            data = await stream.receive_some(_CHUNK)
        except (trio.BrokenResourceError, OSError) as exc:
            raise HttpError(f"the connection broke: {exc}") from None
        connection.receive_data(bytes(data))  # b"": the server closed it


def _closed(connection: h11.Connection) -> bool:
    """Whether the server's side ended (h11 saw the end of its input)."""
    return bool(connection.trailing_data[1])


async def _connect(url: UpstreamUrl, connect_deadline: float) -> trio.abc.Stream:
    with trio.move_on_after(connect_deadline) as scope:
        try:
            tcp = await trio.open_tcp_stream(url.host, url.port)
        except OSError as exc:
            raise HttpError(f"cannot connect: {exc.strerror or exc}") from None
        if not url.tls:
            return tcp
        stream = trio.SSLStream(
            tcp, ssl.create_default_context(), server_hostname=url.host, https_compatible=True
        )
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            await trio.aclose_forcefully(tcp)
            raise HttpError(f"TLS handshake failed: {exc.__cause__ or exc}") from None
        except BaseException:
            await trio.aclose_forcefully(tcp)
            raise
        return stream
    assert scope.cancelled_caught
    raise HttpError(f"cannot connect within {connect_deadline:g} seconds")


@asynccontextmanager
async def exchange(
    url: UpstreamUrl,
    method: bytes,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    connect_deadline: float = 10.0,
) -> AsyncIterator[Response]:
    """Send one request (*headers* besides ``Host``, ``Content-Length`` and ``Connection``)
    on a new connection and yield its response once the status and headers arrived (its body is
    read with :meth:`Response.next_chunk`); the
    connection is closed on exit. :class:`HttpError` when the exchange breaks.

    Cancellation: the connection is closed at once, ``Cancelled`` propagates.
    """
    stream = await _connect(url, connect_deadline)
    try:
        connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        every = [
            (b"host", url.authority),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
            *headers,
        ]
        try:
            out = connection.send(h11.Request(method=method, target=url.target, headers=every))
            assert out is not None
            out += connection.send(h11.Data(data=body)) or b""
            out += connection.send(h11.EndOfMessage()) or b""
            await stream.send_all(out)
        except (trio.BrokenResourceError, OSError) as exc:
            raise HttpError(f"the connection broke: {exc}") from None
        while True:
            event = await _next_event(connection, stream)
            if isinstance(event, h11.Response):
                break
            if not isinstance(event, h11.InformationalResponse):
                raise HttpError(f"the server closed the connection ({type(event).__name__})")
        yield Response(
            status=event.status_code,
            headers={name.lower(): value for name, value in event.headers},
            connection=connection,
            stream=stream,
        )
    finally:
        await trio.aclose_forcefully(stream)
