"""The MCP gate's upstream over MCP's streamable-HTTP transport, as the two byte streams the
relay reads and writes (one JSON-RPC message per line, as on stdio).

Synopsis::

    async with open_streamable_upstream(UpstreamUrl.parse(url)) as upstream:
        await relay(broker, client_in=..., client_out=...,
                    upstream_in=upstream.receive_stream, upstream_out=upstream.send_stream)

Each line the relay sends becomes one POST of that JSON-RPC message (``Accept:
application/json, text/event-stream``). A request's POST runs in a task of its own: its
response — a JSON body, or an event stream carrying the server's own requests and
notifications for that request and then its response — comes back as lines the relay reads.
Notifications and responses are POSTed in order, the writer waiting for each ``202``. Once
the client said it is initialized, the server's own stream (a GET) is relayed too: what the
server sends outside any request. The ``Mcp-Session-Id`` the server gives the ``initialize``
response, and the protocol version that response names (``MCP-Protocol-Version``), go with
every later request; the session is ended with a ``DELETE`` when the gate stops.

A request's event stream that ends or breaks before its response, after events with ids, is
resumed with a ``GET`` carrying ``Last-Event-ID`` (handshake revisions only; the POST is never
sent again, so an allowed call cannot run twice); so is the server's own stream. Connections
are kept alive in a bounded pool and probed before reuse (:class:`~broker.mcp._http.Pool`).

The server is untrusted: its messages are bounded by *max_message_bytes* (the request that
carried an over-long one gets an error), its session id must be visible ASCII, and a request it
fails — it cannot be reached, breaks the connection, answers an HTTP error or ends its stream
without answering — gets the client a JSON-RPC error at once, never a hang. Requests in flight
are bounded (:data:`MAX_STREAMS`; one more gets an error); a request the relay gives up on
(``notifications/cancelled``) has its POST closed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Final

import attrs
import trio

from .._display import printable
from ._frames import (
    SERVER_ERROR,
    FrameError,
    encode,
    error_response,
    id_key,
    parse_frame,
    valid_id,
)
from ._http import HttpError, Pool, Response, UpstreamUrl, exchange
from ._messages import envelope_version
from ._params import ParamError, ToolHeaders, header_value
from ._sse import SseParser, TooLong

__all__ = ["MAX_STREAMS", "StreamableUpstream", "open_streamable_upstream"]

log = logging.getLogger("broker.mcp")

#: Requests whose POST is in flight at once; one more is answered with an error at once.
MAX_STREAMS: Final = 128
#: Seconds the server gets to accept a notification or a response (its ``202``).
NOTIFY_DEADLINE: Final = 10.0
#: Seconds the closing ``DELETE`` of the session may take.
CLOSE_DEADLINE: Final = 2.0
#: Seconds between two attempts at the server's own stream (GET), and how many attempts in a
#: row may bring nothing before the gate stops listening.
LISTEN_RETRY: Final = 1.0
LISTEN_ATTEMPTS: Final = 5
#: Seconds before re-opening a request's broken event stream when the server named none
#: (``retry:``), and how many attempts in a row may bring nothing before the request fails.
RESUME_RETRY: Final = 1.0
RESUME_ATTEMPTS: Final = 5
#: Seconds an answered request's event stream gets to end, so that its connection can be
#: reused (the answer has passed already: nobody waits on this).
STREAM_END_DEADLINE: Final = 1.0
#: Lines read from the server waiting for the relay (backpressure on the POSTs beyond).
_INBOX: Final = 64
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")
_SAFE_VALUE = re.compile(r"[\x20-\x7e]{0,1024}")
#: The methods whose target is named in ``Mcp-Name``, and the param naming it.
_NAME_KEYS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_VERSION = re.compile(r"[0-9A-Za-z._-]{1,32}")
_EVENT_ID = re.compile(rb"[\x21-\x7e][\x20-\x7e]{0,1022}[\x21-\x7e]|[\x21-\x7e]")
_ACCEPT: Final = (b"accept", b"application/json, text/event-stream")
_JSON: Final = (b"content-type", b"application/json")


class _Failed(Exception):
    """A request the server failed; the text is what the client is told."""


@attrs.define(eq=False)
class StreamableUpstream:
    """One connection's upstream over streamable HTTP; its POSTs run in *nursery*."""

    url: UpstreamUrl
    nursery: trio.Nursery
    max_message_bytes: int
    session_id: bytes | None = attrs.field(init=False, default=None)
    protocol_version: bytes | None = attrs.field(init=False, default=None)
    #: id key -> that request's POST, while it is in flight.
    posts: dict[str, _Post] = attrs.field(init=False, factory=dict)
    #: Idle keep-alive connections to the server.
    pool: Pool = attrs.field(init=False, factory=Pool)
    #: The ``x-mcp-header`` annotations of the tools the server listed (2026-07-28).
    tools: ToolHeaders = attrs.field(init=False, factory=ToolHeaders)
    closed: bool = attrs.field(init=False, default=False)
    #: The server's own stream (GET), once the client said it is initialized.
    listening: trio.CancelScope | None = attrs.field(init=False, default=None)
    _lines: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    _inbox: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    receive_stream: _Lines = attrs.field(init=False)
    send_stream: _Posts = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._lines, self._inbox = trio.open_memory_channel[bytes](_INBOX)
        self.receive_stream = _Lines(self._inbox)
        self.send_stream = _Posts(self)

    @property
    def _where(self) -> str:
        return f"the MCP server at {self.url.text}"

    def _headers(self) -> list[tuple[bytes, bytes]]:
        """The headers of a POST on the handshake revisions (and of the closing DELETE)."""
        headers = [_ACCEPT, _JSON]
        if self.session_id is not None:
            headers.append((b"mcp-session-id", self.session_id))
        if self.protocol_version is not None:
            headers.append((b"mcp-protocol-version", self.protocol_version))
        return headers

    async def send(self, line: bytes) -> None:
        """POST the message *line* (module doc): a request in a task of its own, anything
        else in order, waiting for the server to accept it.

        Cancellation: the message may or may not have reached the server.
        """
        try:
            message = parse_frame(line)
        except FrameError:
            message = None
        if not isinstance(message, dict) or self.closed:
            log.warning("did not send a line to the MCP server: %s", "closed" if message else "bad")
            await trio.lowlevel.checkpoint()
            return
        body = line.rstrip(b"\n")
        method = message.get("method")
        request_id = message.get("id")
        if isinstance(method, str) and valid_id(request_id):
            routing = _routing(message, method)
            if routing is not None and method == "tools/call":
                try:
                    routing += self.tools.headers(message.get("params"))
                except ParamError as exc:
                    why = f"the gate did not send the call to {self._where}: {exc}"
                    log.warning("%s", why)
                    await self._lines.send(error_response(request_id, SERVER_ERROR, why))
                    return
            headers = self._headers() if routing is None else [_ACCEPT, _JSON, *routing]
            await self._start_request(request_id, method, body, headers, routing is not None)
            return
        if method == "notifications/cancelled":
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            post = self.posts.get(id_key(cancelled)) if valid_id(cancelled) else None
            if post is not None:
                post.scope.cancel()  # nobody waits for its response any more
                if post.stateless:
                    # 2026-07-28 over HTTP has no client notifications: the closed POST is
                    # the cancellation.
                    await trio.lowlevel.checkpoint()
                    return
        await self._post_one(body)
        if method == "notifications/initialized" and self.listening is None:
            self.listening = trio.CancelScope()
            self.nursery.start_soon(self._listen, self.listening)

    async def _start_request(
        self,
        request_id: object,
        method: str,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        stateless: bool,
    ) -> None:
        key = id_key(request_id)
        why = None
        if key in self.posts:
            why = f"id {key} is still in flight to the MCP server: use a new id"
        elif len(self.posts) >= MAX_STREAMS:
            why = f"more than {MAX_STREAMS} requests are in flight to the MCP server: wait"
        if why is not None:
            await self._lines.send(error_response(request_id, SERVER_ERROR, why))
            return
        post = _Post(stateless=stateless)
        self.posts[key] = post
        self.nursery.start_soon(self._request, post, key, request_id, method, (body, headers))
        await trio.lowlevel.checkpoint()

    async def _request(
        self,
        post: _Post,
        key: str,
        request_id: object,
        method: str,
        request: tuple[bytes, list[tuple[bytes, bytes]]],
    ) -> None:
        try:
            with post.scope:
                try:
                    await self._exchange(key, method, request, post.stateless)
                except _Failed as exc:
                    log.warning("request %s to the MCP server failed: %s", key, exc)
                    await self._lines.send(error_response(request_id, SERVER_ERROR, str(exc)))
        except trio.ClosedResourceError:
            log.info("request %s ended after the gate stopped reading the server", key)
            await trio.lowlevel.checkpoint()
        finally:
            if self.posts.get(key) is post:
                del self.posts[key]

    async def _exchange(
        self,
        key: str,
        method: str,
        request: tuple[bytes, list[tuple[bytes, bytes]]],
        stateless: bool,
    ) -> None:
        where = self._where
        events = SseParser(limit=self.max_message_bytes)
        broke: HttpError | None = None
        try:
            async with exchange(self.url, b"POST", *request, pool=self.pool) as response:
                if response.status != 200:
                    raise _Failed(_status_text(where, response.status, self.session_id))
                if method == "initialize":
                    self._take_session(response.header(b"mcp-session-id"))
                kind = (response.header(b"content-type") or b"").split(b";")[0].strip().lower()
                if kind == b"text/event-stream":
                    answered = await self._events(key, method, response, events)
                elif kind == b"application/json":
                    answered = await self._json(key, method, response)
                else:
                    raise _Failed(
                        f"{where} answered with content type {printable(kind.decode('latin-1'))!r},"
                        " not application/json or text/event-stream"
                    )
        except HttpError as exc:
            if events.last_id is None or stateless:
                raise _Failed(f"{where} failed the request: {exc}") from None
            broke, answered = exc, False
            await trio.lowlevel.checkpoint()
        except TooLong as exc:
            raise _Failed(f"{where} sent a message the gate dropped: {exc}") from None
        if not answered and events.last_id is not None and not stateless:
            log.info("the event stream of request %s ended unanswered (%s): resuming", key, broke)
            answered = await self._resume(key, method, events)
        if not answered:
            raise _Failed(f"{where} ended its response without answering the request")

    async def _resume(self, key: str, method: str, events: SseParser) -> bool:
        """Re-open request *key*'s broken event stream: ``GET`` with ``Last-Event-ID`` (never
        the POST again: an allowed call must not run twice), after the server's ``retry``
        (else :data:`RESUME_RETRY`), until its answer passed or :data:`RESUME_ATTEMPTS` in a
        row brought no event. Whether it was answered; :class:`_Failed` when the server
        refuses to resume it. Not on 2026-07-28 (that revision's streams are not resumable)."""
        where = self._where
        idle = 0
        while idle < RESUME_ATTEMPTS:
            idle += 1
            await trio.sleep(events.retry if events.retry is not None else RESUME_RETRY)
            cursor = events.last_id
            if cursor is None or _EVENT_ID.fullmatch(cursor) is None:
                raise _Failed(
                    f"{where} broke the request's event stream, and its last event id cannot "
                    "be sent back (Last-Event-ID: 1-1024 visible ASCII characters)"
                )
            events.reconnected()
            try:
                headers = self._stream_headers(cursor)
                async with exchange(self.url, b"GET", b"", headers, pool=self.pool) as got:
                    kind = got.header(b"content-type") or b""
                    if got.status != 200 or not kind.startswith(b"text/event-stream"):
                        raise _Failed(
                            f"{where} broke the request's event stream and did not resume it "
                            f"(GET with Last-Event-ID: HTTP {got.status}): see its log"
                        )
                    if await self._events(key, method, got, events):
                        return True
            except HttpError as exc:
                log.info("resuming the event stream of request %s broke: %s", key, exc)
            except TooLong as exc:
                raise _Failed(f"{where} sent a message the gate dropped: {exc}") from None
            if events.last_id != cursor:
                idle = 0  # it brought events: the stream lives
        raise _Failed(
            f"{where} broke the request's event stream, and {RESUME_ATTEMPTS} attempts in a "
            "row to resume it (GET with Last-Event-ID) brought nothing"
        )

    def _stream_headers(self, cursor: bytes | None) -> list[tuple[bytes, bytes]]:
        """The headers of a GET of an event stream: the server's own, or resuming one."""
        headers = [(b"accept", b"text/event-stream")]
        headers += [
            h for h in self._headers() if h[0] in (b"mcp-session-id", b"mcp-protocol-version")
        ]
        if cursor is not None:
            headers.append((b"last-event-id", cursor))
        return headers

    async def _json(self, key: str, method: str, response: Response) -> bool:
        body = bytearray()
        while (chunk := await response.next_chunk()) is not None:
            body += chunk
            if len(body) > self.max_message_bytes:
                raise TooLong(f"a response longer than {self.max_message_bytes} bytes")
        return await self._deliver(key, method, bytes(body))

    async def _events(self, key: str, method: str, response: Response, events: SseParser) -> bool:
        while (chunk := await response.next_chunk()) is not None:
            for data in events.feed(chunk):
                if await self._deliver(key, method, data):
                    # Its response: the stream has nothing more for anyone. The request is
                    # done (its id free again); its end is awaited, briefly, to keep the
                    # connection.
                    self.posts.pop(key, None)
                    with trio.move_on_after(STREAM_END_DEADLINE), suppress(HttpError):
                        await response.next_chunk()  # None: it ended (else it is closed)
                    return True
        return False

    async def _deliver(self, key: str, method: str, data: bytes) -> bool:
        """Hand one message of the server's to the relay; whether it answers request *key*."""
        # A raw newline in JSON text is only whitespace between tokens: one message, one line.
        line = data.replace(b"\r", b" ").replace(b"\n", b" ").strip()
        if not line:
            await trio.lowlevel.checkpoint()
            return False
        answers = False
        try:
            message = parse_frame(line)
        except FrameError:
            message = None  # the relay refuses it, and tells the server
        if isinstance(message, dict) and "method" not in message and valid_id(message.get("id")):
            answers = id_key(message["id"]) == key
            if answers and method == "initialize":
                self._take_version(message.get("result"))
            post = self.posts.get(key)
            if answers and method == "tools/list" and post is not None and post.stateless:
                line = self._listed(message, line)
        await self._lines.send(line + b"\n")
        return answers

    def _listed(self, message: dict[str, Any], line: bytes) -> bytes:
        """Learn the ``x-mcp-header`` annotations of a 2026-07-28 ``tools/list`` result
        (*message*, received as *line*); a tool whose annotations are invalid is left out, as
        the specification says a client over HTTP must (the line is then re-encoded)."""
        result = message.get("result")
        invalid = self.tools.learn(result)
        if not invalid:
            return line
        for name, why in invalid:
            log.warning(
                "left the MCP server's tool %r out of tools/list: its x-mcp-header is invalid: %s",
                printable(name),
                why,
            )
        assert isinstance(result, dict)  # it listed tools
        dropped = {name for name, _ in invalid}
        tools = result["tools"]
        result["tools"] = [
            t for t in tools if not (isinstance(t, dict) and t.get("name") in dropped)
        ]
        return encode(message).rstrip(b"\n")

    def _take_session(self, value: bytes | None) -> None:
        if value is None or self.session_id is not None:
            return
        if _SESSION_ID.fullmatch(value.decode("latin-1")) is None:
            log.warning("ignored the MCP server's session id: not 1-256 visible ASCII characters")
            return
        self.session_id = value

    def _take_version(self, result: Any) -> None:
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str) and _VERSION.fullmatch(version):
            self.protocol_version = version.encode("ascii")

    async def _post_one(self, body: bytes) -> None:
        """POST a notification or a response and wait (bounded) for the server to take it;
        a failure is logged (nobody waits for an answer to it)."""
        with trio.move_on_after(NOTIFY_DEADLINE) as bound:
            status = await self._status_of(b"POST", body)
            if status is not None and status not in (200, 202):
                log.warning("%s", _status_text("the MCP server", status, self.session_id))
        if bound.cancelled_caught:
            log.warning("the MCP server did not take a message within %g s", NOTIFY_DEADLINE)

    async def _listen(self, scope: trio.CancelScope) -> None:
        """Relay the server's own stream (GET): what it sends outside any request (its
        requests, such as ``roots/list``, and notifications, such as ``list_changed``). A
        server without one (405) is not asked again; a stream that ends is opened again
        after the server's ``retry`` (else :data:`LISTEN_RETRY` seconds), resuming it
        (``Last-Event-ID``) when its events had ids, until :data:`LISTEN_ATTEMPTS` in a row
        brought nothing. Ends with :meth:`close`."""
        await trio.lowlevel.checkpoint()
        events = SseParser(limit=self.max_message_bytes)
        idle = 0
        with scope:
            while idle < LISTEN_ATTEMPTS:
                idle += 1
                cursor = events.last_id
                if cursor is not None and _EVENT_ID.fullmatch(cursor) is None:
                    log.warning("the MCP server's stream has an event id that cannot be sent back")
                    cursor = None
                events.reconnected()
                try:
                    headers = self._stream_headers(cursor)
                    async with exchange(self.url, b"GET", b"", headers, pool=self.pool) as response:
                        kind = response.header(b"content-type") or b""
                        if response.status == 405:
                            log.info("the MCP server has no stream of its own (GET: 405)")
                            return
                        if response.status == 200 and kind.startswith(b"text/event-stream"):
                            while (chunk := await response.next_chunk()) is not None:
                                for data in events.feed(chunk):
                                    idle = 0
                                    await self._deliver("", "", data)
                        else:
                            log.warning(
                                "the MCP server answered its stream (GET) with %d", response.status
                            )
                except (HttpError, TooLong) as exc:
                    log.warning("the MCP server's own stream (GET) failed: %s", exc)
                except trio.ClosedResourceError:
                    return  # the gate stopped reading the server
                await trio.sleep(events.retry if events.retry is not None else LISTEN_RETRY)
            log.warning("stopped listening to the MCP server's own stream: it brought nothing")

    async def close(self) -> None:
        """Stop: close every POST in flight, end the relay's reading, and end the session
        with a ``DELETE`` (bounded by :data:`CLOSE_DEADLINE`; a server that refuses it is
        only logged).

        Cancellation: the ``DELETE`` is shielded within its bound.
        """
        if self.closed:
            await trio.lowlevel.checkpoint()
            return
        self.closed = True
        for post in self.posts.values():
            post.scope.cancel()
        if self.listening is not None:
            self.listening.cancel()
        self._lines.close()
        if self.session_id is not None:
            with trio.move_on_after(CLOSE_DEADLINE, shield=True):
                status = await self._status_of(b"DELETE", b"")
                log.info("the MCP server answered HTTP %s to ending the session", status)
        await self.pool.aclose()
        log.info(
            "HTTP connections to the MCP server: %d opened, %d requests on a kept-alive one",
            self.pool.opened,
            self.pool.reused,
        )

    async def _status_of(self, method: bytes, body: bytes) -> int | None:
        """Send one request whose response has nothing for the client: its status, or
        ``None`` (logged) when the exchange failed.

        Cancellation: the connection is closed; ``Cancelled`` propagates.
        """
        try:
            async with exchange(self.url, method, body, self._headers(), pool=self.pool) as got:
                return got.status
        except HttpError as exc:
            log.warning("could not send a message to the MCP server: %s", exc)
            await trio.lowlevel.checkpoint()
            return None


@attrs.define(eq=False)
class _Post:
    """A request's POST in flight."""

    stateless: bool
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


def _routing(message: dict[str, Any], method: str) -> list[tuple[bytes, bytes]] | None:
    """The routing headers a 2026-07-28 request carries over HTTP, mirroring its envelope
    (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``); ``None`` on the handshake
    revisions. A value that cannot be a header is left out (the server then refuses the
    request: fail closed). ``Mcp-Param-*`` headers (a tool schema's ``x-mcp-header``) are not
    derived."""
    params = message.get("params")
    version = envelope_version(params)
    if version is None or not _VERSION.fullmatch(version):
        return None
    headers = [(b"mcp-protocol-version", version.encode("ascii"))]
    if _SAFE_VALUE.fullmatch(method):
        headers.append((b"mcp-method", method.encode("ascii")))
    key = _NAME_KEYS.get(method)
    name = params.get(key) if key is not None and isinstance(params, dict) else None
    if isinstance(name, str):
        headers.append((b"mcp-name", header_value(name)))
    return headers


def _status_text(where: str, status: int, session: bytes | None) -> str:
    if status == 404 and session is not None:
        return (
            f"{where} no longer knows this session (HTTP 404): restart the gate, and the "
            "client's connection with it"
        )
    return f"{where} answered HTTP {status}: see its log"


@attrs.define(eq=False)
class _Lines(trio.abc.ReceiveStream):
    """The relay's upstream_in: the server's messages, one line each."""

    _inbox: trio.MemoryReceiveChannel[bytes]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next line (whole: the relay bounds lines itself); ``b""`` once closed.

        Cancellation: nothing is taken.
        """
        try:
            return await self._inbox.receive()
        except trio.EndOfChannel:
            await trio.lowlevel.checkpoint()
            return b""

    async def aclose(self) -> None:
        """Stop reading. Cancellation: closes all the same."""
        await self._inbox.aclose()


@attrs.define(eq=False)
class _Posts(trio.abc.SendStream):
    """The relay's upstream_out: every line it writes is POSTed (one line per call)."""

    _upstream: StreamableUpstream

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """POST the message *data* (:meth:`StreamableUpstream.send`).

        Cancellation: the message may or may not have reached the server.
        """
        await self._upstream.send(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        """Always ready. Cancellation: nothing happens."""
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """The relay is done: :meth:`StreamableUpstream.close`. Cancellation: the POSTs are
        closed all the same; the ``DELETE`` is shielded within its bound."""
        await self._upstream.close()


@asynccontextmanager
async def open_streamable_upstream(
    url: UpstreamUrl, *, max_message_bytes: int
) -> AsyncIterator[StreamableUpstream]:
    """The upstream at *url*, its POSTs in a nursery of this context; on exit it is closed
    (:meth:`StreamableUpstream.close`) and every POST still in flight is cancelled.

    Cancellation: as on exit; ``Cancelled`` propagates.
    """
    async with trio.open_nursery() as nursery:
        upstream = StreamableUpstream(url=url, nursery=nursery, max_message_bytes=max_message_bytes)
        try:
            yield upstream
        finally:
            with trio.move_on_after(CLOSE_DEADLINE, shield=True):
                await upstream.close()
            nursery.cancel_scope.cancel()
