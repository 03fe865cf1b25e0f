"""The HTTP/1.1 client of the MCP gate's streamable-HTTP upstream, on trio, with h11 (the
sans-I/O HTTP/1.1 library hypercorn is built on, so every install of the broker has it).

Synopsis::

    url = UpstreamUrl.parse("http://127.0.0.1:8000/mcp")     # ValueError: says what to fix
    pool = Pool()                                            # keep-alive; else one per request
    async with exchange(url, b"POST", body, headers, pool=pool) as response:
        response.status, response.header(b"content-type")
        while (chunk := await response.next_chunk()) is not None:
            ...
    await pool.aclose()

Bounds: connecting (and the TLS handshake) within *connect_deadline*; the response's status
line and headers within :data:`MAX_HEADER_BYTES`; the body is read chunk by chunk, never
buffered here. Redirects are not followed (the caller sees the 3xx).

Keep-alive: with a :class:`Pool`, a connection whose response was read to its end (and that
neither side asked to close) is kept idle, at most :data:`MAX_IDLE` of them, each for at most
:data:`IDLE_AGE` seconds. Before an idle connection carries a request it is probed without
waiting: if the server closed it (or sent anything unasked) it is dropped and another one is
taken or opened. A request is never sent twice: should the server close a probed connection
in the moment before the request reaches it, that request fails (:class:`HttpError`), since
it may have been received and acted on.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import h11
import trio

__all__ = [
    "IDLE_AGE",
    "MAX_HEADER_BYTES",
    "MAX_IDLE",
    "HttpError",
    "Pool",
    "Response",
    "UpstreamUrl",
    "exchange",
]

#: The longest status line and headers a server may send.
MAX_HEADER_BYTES: Final = 64 * 1024
#: Idle keep-alive connections a pool keeps, and the seconds each may stay idle (well under
#: the keep-alive timeouts servers commonly use, 5 s in uvicorn and hypercorn, so that a
#: server rarely closes one just as a request is sent on it).
MAX_IDLE: Final = 8
IDLE_AGE: Final = 2.0
_CHUNK: Final = 64 * 1024
_QUICKACK: Final = getattr(socket, "TCP_QUICKACK", None)


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
        _quick_ack(stream)
        try:
            data = await stream.receive_some(_CHUNK)
        except (trio.BrokenResourceError, OSError) as exc:
            raise HttpError(f"the connection broke: {exc}") from None
        connection.receive_data(bytes(data))  # b"": the server closed it


def _quick_ack(stream: trio.abc.Stream) -> None:
    """Ask the kernel to acknowledge what arrives at once (Linux ``TCP_QUICKACK``, which
    lapses by itself, so it is asked before each read). On a kept-alive connection a server
    that writes a response's head and body separately, with Nagle's algorithm on, holds the
    body until the head is acknowledged: with a delayed acknowledgement that costs ~40 ms."""
    raw = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    if _QUICKACK is not None and isinstance(raw, trio.SocketStream):
        with contextlib.suppress(OSError):  # not TCP, or closed: the read says what is wrong
            raw.socket.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


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


@attrs.define(eq=False)
class _Idle:
    stream: trio.abc.Stream
    connection: h11.Connection
    since: float


@attrs.define(eq=False)
class Pool:
    """Idle keep-alive connections to one server (module doc), newest used first."""

    max_idle: int = MAX_IDLE
    max_age: float = IDLE_AGE
    #: Connections opened, and requests sent on a reused one (for tests and measurements).
    opened: int = attrs.field(init=False, default=0)
    reused: int = attrs.field(init=False, default=0)
    _idle: list[_Idle] = attrs.field(init=False, factory=list)
    _closed: bool = attrs.field(init=False, default=False)

    @property
    def idle(self) -> int:
        """How many connections are idle now."""
        return len(self._idle)

    async def _take(self) -> _Idle | None:
        """An idle connection that is still open, or ``None``; the rest are closed.

        Cancellation: none is taken; one found stale is closed all the same.
        """
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        while self._idle:
            idle = self._idle.pop()
            if now - idle.since <= self.max_age and _still_open(idle.stream):
                self.reused += 1
                return idle
            await trio.aclose_forcefully(idle.stream)
        return None

    def _keep(self, stream: trio.abc.Stream, connection: h11.Connection) -> bool:
        """Keep *stream* idle; ``False`` (the caller closes it) when the pool is closed or full."""
        if self._closed or len(self._idle) >= self.max_idle:
            return False
        self._idle.append(_Idle(stream, connection, trio.current_time()))
        return True

    async def aclose(self) -> None:
        """Close every idle connection; later ones are closed when their exchange ends.

        Cancellation: they are closed all the same.
        """
        self._closed = True
        idle, self._idle = self._idle, []
        for each in idle:
            await trio.aclose_forcefully(each.stream)
        await trio.lowlevel.checkpoint()


def _still_open(stream: trio.abc.Stream) -> bool:
    """Whether an idle connection is still open, probed without waiting: its socket must have
    nothing to read (a server's close, or anything it sent unasked, makes it readable)."""
    raw = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    if not isinstance(raw, trio.SocketStream):
        return False
    try:
        fd = raw.socket.fileno()
        if fd < 0:
            return False
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
            return not poller.poll(0)
        return not select.select([fd], [], [fd], 0)[0]  # pragma: no cover (no poll)
    except (OSError, ValueError):
        return False


@asynccontextmanager
async def exchange(
    url: UpstreamUrl,
    method: bytes,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    connect_deadline: float = 10.0,
    pool: Pool | None = None,
) -> AsyncIterator[Response]:
    """Send one request (*headers* besides ``Host``, ``Content-Length`` and ``Connection``)
    and yield its response once the status and headers arrived (its body is read with
    :meth:`Response.next_chunk`). Without *pool* the request goes on a new connection, closed
    on exit; with one, on a probed idle connection of it or a new one, kept idle on exit when
    the response was read to its end (module doc). :class:`HttpError` when the exchange
    breaks.

    Cancellation: the connection is closed at once, ``Cancelled`` propagates.
    """
    idle = await pool._take() if pool is not None else None
    if idle is not None:
        stream, connection = idle.stream, idle.connection
    else:
        stream = await _connect(url, connect_deadline)
        connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        if pool is not None:
            pool.opened += 1
    keep = False
    try:
        every = [
            (b"host", url.authority),
            (b"content-length", str(len(body)).encode("ascii")),
            *([(b"connection", b"close")] if pool is None else []),
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
        response = Response(
            status=event.status_code,
            headers={name.lower(): value for name, value in event.headers},
            connection=connection,
            stream=stream,
        )
        yield response
        keep = pool is not None and _reusable(response)
    finally:
        if not (keep and pool is not None and pool._keep(stream, connection)):
            await trio.aclose_forcefully(stream)


def _reusable(response: Response) -> bool:
    """Whether the response ended (its end may already be buffered though not yet read) and the
    connection can carry the next request; if so, it is made ready for it."""
    connection = response._connection
    while connection.their_state is h11.SEND_BODY:
        try:
            event = connection.next_event()  # only what is buffered: no waiting here
        except h11.RemoteProtocolError:
            return False
        if event is h11.NEED_DATA or event is h11.PAUSED:
            return False
    if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
        return False
    connection.start_next_cycle()
    data, closed = connection.trailing_data
    return not data and not closed
