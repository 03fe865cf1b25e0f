"""JSON-RPC 2.0 over a pair of trio byte streams, one JSON object per line (ACP's stdio framing).

The connection is untyped: params and results are JSON values (``dict``/``list``/``str``...).
ACP's typed values live in :mod:`broker.acp._wire`; handlers decode their params there.
"""

from __future__ import annotations

import collections
import enum
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeAlias, TypeGuard

import attrs
import trio

from .._collapse import collapse_single
from .._json_names import json_type
from ._errors import ConnectionClosed, ErrorCode, JsonRpcError

__all__ = [
    "CANCEL_REQUEST_METHOD",
    "DEFAULT_MAX_CONCURRENT_HANDLERS",
    "DEFAULT_MAX_LINE_BYTES",
    "Direction",
    "Frame",
    "FrameHook",
    "FrameRecorder",
    "JsonRpcConnection",
    "NotificationHandler",
    "RequestHandler",
    "RequestId",
]

logger = logging.getLogger("broker.acp")

#: ACP's protocol-level notification ``{"requestId": id}`` (schema ``CancelRequestNotification``).
CANCEL_REQUEST_METHOD: Final = "$/cancel_request"
DEFAULT_MAX_LINE_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_CONCURRENT_HANDLERS: Final = 64

_RECEIVE_CHUNK = 64 * 1024
# Frames queued for the writer. Small on purpose: a peer that stops reading pushes back on the
# tasks that write, instead of growing a buffer.
_OUTBOX_CAPACITY = 16
# How many ids of requests our callers abandoned we remember, so that their late responses are
# dropped quietly (a response to an id we never sent is logged as a warning instead).
_ABANDONED_MEMORY = 1024
# Peer-controlled strings (method names, ids) are clipped to this many characters in messages.
_CLIP = 80

_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_NOTIFICATION_KEYS = frozenset({"jsonrpc", "method", "params"})
_RESPONSE_KEYS = frozenset({"jsonrpc", "id", "result", "error"})
_MISSING: Final = object()

RequestId: TypeAlias = int | str | None
#: ``async def handler(params) -> result``; *result* must be JSON-encodable.
RequestHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable[Any]]
#: ``def handler(params) -> None``; runs inline in the reader task, so it must not block.
NotificationHandler: TypeAlias = Callable[[dict[str, Any]], None]


class Direction(enum.Enum):
    """Which way a :class:`Frame` went."""

    SENT = "sent"
    RECEIVED = "received"


@attrs.frozen
class Frame:
    """One JSON-RPC message as it crossed the wire (parsed), for tests and snapshots."""

    direction: Direction
    message: dict[str, Any]


FrameHook: TypeAlias = Callable[[Frame], None]


@attrs.define(eq=False)
class FrameRecorder:
    """A :data:`FrameHook` that keeps every frame, in wire order (for tests: it never forgets).

    Synopsis::

        recorder = FrameRecorder()
        conn = JsonRpcConnection(send_stream=s, receive_stream=r, on_frame=recorder)
        ...
        assert recorder.sent[0] == {"jsonrpc": "2.0", "id": 0, "method": ..., "params": ...}
    """

    frames: list[Frame] = attrs.field(factory=list, init=False)

    def __call__(self, frame: Frame) -> None:
        self.frames.append(frame)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The messages we wrote, in order."""
        return [f.message for f in self.frames if f.direction is Direction.SENT]

    @property
    def received(self) -> list[dict[str, Any]]:
        """The JSON objects we read, in order (lines that were not JSON objects are not frames)."""
        return [f.message for f in self.frames if f.direction is Direction.RECEIVED]


class _State(enum.Enum):
    NEW = "new"
    SERVING = "serving"
    CLOSED = "closed"


@attrs.define(eq=False)
class _Outstanding:
    """One request we sent, waiting for its response. Resolved once, by the reader or by close."""

    method: str
    done: trio.Event = attrs.field(factory=trio.Event)
    result: Any = None
    error: BaseException | None = None

    def resolve(self, result: Any) -> None:
        self.result = result
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


def _positive_int(name: str, default: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_instance: object, _attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{name} must be a positive integer, got {value!r}: pass at least 1"
                f" (the default is {default})"
            )

    return check


def _check_grace(_instance: object, _attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 3600:
        raise ValueError(
            f"cancel_grace must be a number of seconds in [0, 3600), got {value!r}: pass e.g. 1.0"
        )


@attrs.define(eq=False)
class JsonRpcConnection:
    """A JSON-RPC 2.0 peer over newline-delimited JSON: answers requests and makes its own.

    Synopsis::

        conn = JsonRpcConnection(send_stream=stdout, receive_stream=stdin)
        conn.on_request("session/prompt", prompt)            # async def prompt(params) -> result
        conn.on_notification("session/cancel", cancel)       # def cancel(params) -> None
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            answer = await conn.request("session/request_permission", {...})

    Register handlers before :meth:`serve` (a request for an unregistered method is answered
    -32601 "method not found"). The connection owns both streams and closes them when
    :meth:`serve` ends.

    Reading: one reader task splits lines (``\\n``, an optional ``\\r`` before it is ignored),
    parses and dispatches. Each incoming request runs its handler in its own task, at most
    *max_concurrent_handlers* at a time; one more is answered -32603 at once (the reader never
    waits for a handler, or a handler awaiting :meth:`request` could never see its response).
    Notification handlers are plain functions run inline by the reader, in arrival order.

    Writing: one writer task owns the send stream and writes whole lines from a small bounded
    queue, so frames never interleave and a cancelled sender never leaves half a line behind.

    Errors we answer, always as a response: -32700 for a line that is not UTF-8 JSON, -32600
    for anything that is not a JSON-RPC 2.0 message (id ``null``, unless the message is a
    request with a valid id) and for a line longer than *max_line_bytes* (it is skipped up to
    its newline without being buffered), -32601, -32602 for array params, -32603 for a handler
    that raised something other than :class:`JsonRpcError` (logged; the connection goes on),
    -32800 for a handler cancelled by the peer's ``$/cancel_request``. A malformed message is
    never answered when it is a response; it fails the request it answers, if any.

    Teardown (end of input, a broken stream, :meth:`close`/:meth:`aclose`, or cancellation of
    :meth:`serve`), in this order: (1) the connection is marked closed and every outstanding
    :meth:`request` raises :class:`ConnectionClosed`, as does any later ``request``/``notify``;
    queued frames are dropped; (2) running handlers are cancelled and awaited (their responses
    are not sent); (3) the reader and writer are cancelled; (4) both streams are closed. When
    :meth:`serve` itself is cancelled, steps 2 and 3 happen together.
    """

    send_stream: trio.abc.SendStream = attrs.field(kw_only=True)
    receive_stream: trio.abc.ReceiveStream = attrs.field(kw_only=True)
    #: Longest accepted line in bytes, without its newline.
    max_line_bytes: int = attrs.field(
        default=DEFAULT_MAX_LINE_BYTES,
        kw_only=True,
        validator=_positive_int("max_line_bytes", DEFAULT_MAX_LINE_BYTES),
    )
    max_concurrent_handlers: int = attrs.field(
        default=DEFAULT_MAX_CONCURRENT_HANDLERS,
        kw_only=True,
        validator=_positive_int("max_concurrent_handlers", DEFAULT_MAX_CONCURRENT_HANDLERS),
    )
    #: How long a cancelled :meth:`request` may wait (shielded) to queue its
    #: ``$/cancel_request`` when the write queue is full; after that the notice is dropped.
    cancel_grace: float = attrs.field(default=1.0, kw_only=True, validator=_check_grace)
    #: Sees every frame sent and received; its exceptions propagate out of :meth:`serve`.
    on_frame: FrameHook | None = attrs.field(default=None, kw_only=True)

    _request_handlers: dict[str, RequestHandler] = attrs.field(factory=dict, init=False)
    _receive_hooks: dict[str, NotificationHandler] = attrs.field(factory=dict, init=False)
    _notification_handlers: dict[str, NotificationHandler] = attrs.field(factory=dict, init=False)
    # Invariant: holds exactly the requests we sent whose response, error or closure has not
    # been delivered; the reader pops an entry before resolving it, so each resolves once.
    _outstanding: dict[RequestId, _Outstanding] = attrs.field(factory=dict, init=False)
    _abandoned: collections.OrderedDict[RequestId, None] = attrs.field(
        factory=collections.OrderedDict, init=False
    )
    # Incoming requests whose handler has not finished, by the peer's id.
    _running: dict[RequestId, trio.CancelScope] = attrs.field(factory=dict, init=False)
    _next_id: int = attrs.field(default=0, init=False)
    _limiter: trio.CapacityLimiter = attrs.field(init=False)
    _outbox_send: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    _outbox_receive: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    _state: _State = attrs.field(default=_State.NEW, init=False)
    _close_reason: str | None = attrs.field(default=None, init=False)
    _close_requested: trio.Event = attrs.field(factory=trio.Event, init=False)
    _finished: trio.Event = attrs.field(factory=trio.Event, init=False)
    _handler_nursery: trio.Nursery | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._limiter = trio.CapacityLimiter(self.max_concurrent_handlers)
        self._outbox_send, self._outbox_receive = trio.open_memory_channel[bytes](_OUTBOX_CAPACITY)

    # -- registration -------------------------------------------------------------------------

    def on_request(
        self,
        method: str,
        handler: RequestHandler,
        *,
        on_receive: NotificationHandler | None = None,
    ) -> None:
        """Answer requests for *method* with ``await handler(params)``.

        *params* is the request's params object (``{}`` when absent or null). The handler's
        return value is the result; raising :class:`JsonRpcError` answers with that error.
        The handler runs in the connection's nursery and is cancelled by the peer's
        ``$/cancel_request`` (answered -32800) or by teardown (not answered).

        *on_receive*, if given, is called inline by the reader with the same params just before
        the handler's task is started — in arrival order with notifications, which a handler
        task (started later) cannot be. Use it to make a request visible to notifications that
        follow it on the wire (e.g. a cancel right behind a prompt). Its exceptions are logged
        and contained; the handler still runs.
        """
        self._check_registration(method, "on_request")
        self._request_handlers[method] = handler
        if on_receive is not None:
            self._receive_hooks[method] = on_receive

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for each notification *method*, inline, in arrival order.

        Keep it quick and non-blocking (cancel a scope, ``send_nowait``...). Its exceptions are
        logged and contained: nobody is waiting for an answer to a notification.
        """
        self._check_registration(method, "on_notification")
        self._notification_handlers[method] = handler

    def _check_registration(self, method: str, where: str) -> None:
        if not isinstance(method, str) or not method:
            raise ValueError(f"{where}: method must be a non-empty string, got {method!r}")
        if method == CANCEL_REQUEST_METHOD:
            raise ValueError(
                f"{where}: {CANCEL_REQUEST_METHOD} is handled by the connection itself:"
                " it cancels the handler of the request it names"
            )
        if method in self._request_handlers or method in self._notification_handlers:
            raise ValueError(f"{where}: method {method!r} already has a handler: register once")

    # -- state --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether teardown has begun (no more frames are sent or dispatched)."""
        return self._close_reason is not None

    @property
    def close_reason(self) -> str | None:
        """Who or what closed the connection, or None while it is open."""
        return self._close_reason

    def close(self, reason: str = "closed by the application") -> None:
        """Begin teardown (see the class docstring) and return at once; idempotent.

        The first *reason* is kept and carried by every :class:`ConnectionClosed`.
        """
        self._close_nowait(reason)

    async def aclose(self, reason: str = "closed by the application") -> None:
        """:meth:`close`, then wait until :meth:`serve` has finished its teardown.

        On a connection that never served, closes its streams instead. Cancellation: stops
        waiting; the teardown goes on in the task running :meth:`serve`.
        """
        self._close_nowait(reason)
        if self._state is _State.NEW:
            self._state = _State.CLOSED
            await trio.aclose_forcefully(self.send_stream)
            await trio.aclose_forcefully(self.receive_stream)
            self._finished.set()
        await self._finished.wait()

    # -- serving ------------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the connection until it closes: ``await nursery.start(conn.serve)``.

        Started once the reader and writer are scheduled. Returns normally after end of input,
        a broken stream or :meth:`close`; raises only what the frame hook or a bug raises
        (garbage from the peer is answered, never raised). Cancellation: tears down as the
        class docstring says, then re-raises.
        """
        if self._state is not _State.NEW:
            raise RuntimeError(
                f"serve() cannot run on a {self._state.value} connection: a JsonRpcConnection"
                " serves once; create a new one"
            )
        self._state = _State.SERVING
        try:
            # Both nurseries are details: an error of the reader, the writer or a handler
            # leaves serve() as itself (broker._collapse).
            with collapse_single():
                async with trio.open_nursery() as io:
                    try:
                        with collapse_single():
                            async with trio.open_nursery() as handlers:
                                self._handler_nursery = handlers
                                io.start_soon(self._read_loop)
                                io.start_soon(self._write_loop)
                                task_status.started()
                                await self._close_requested.wait()
                                handlers.cancel_scope.cancel(reason=self._teardown_reason())
                    finally:
                        self._close_nowait("serve() was cancelled or failed")
                        io.cancel_scope.cancel(reason=self._teardown_reason())
        finally:
            self._handler_nursery = None
            self._state = _State.CLOSED
            # Bounded and safe in a cancelled context: aclose_forcefully cancels its own aclose.
            await trio.aclose_forcefully(self.send_stream)
            await trio.aclose_forcefully(self.receive_stream)
            self._finished.set()

    def _teardown_reason(self) -> str:
        return f"acp connection closed: {self._close_reason}"

    def _close_nowait(self, reason: str) -> None:
        if self._close_reason is not None:
            return
        self._close_reason = reason
        logger.debug("acp connection closing: %s", reason)
        outstanding = list(self._outstanding.values())
        self._outstanding.clear()
        for entry in outstanding:
            entry.fail(ConnectionClosed(reason))
        # Blocked senders get BrokenResourceError (-> ConnectionClosed); queued frames drop.
        self._outbox_receive.close()
        self._close_requested.set()

    # -- outgoing -----------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and return its result.

        Ids are integers counting from 0, like the official TypeScript and Python SDKs. Raises
        :class:`JsonRpcError` when the peer answers with an error (or with a malformed
        response), :class:`ConnectionClosed` when the connection ends first.

        Cancellation: if the request was already queued, the entry is forgotten, the peer is
        sent ``$/cancel_request {"requestId": id}`` (shielded, waiting at most *cancel_grace*
        seconds when the write queue is full) and a late response is dropped; then
        :class:`trio.Cancelled` propagates. If it was not queued yet, nothing is sent.
        """
        await self._ready("request")
        _check_method(method, "request")
        request_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = _params(params, "request")
        line = _encode(message)
        self._next_id += 1
        entry = _Outstanding(method)
        self._outstanding[request_id] = entry
        try:
            await self._send_line(line)
        except BaseException:
            self._outstanding.pop(request_id, None)
            raise
        try:
            await entry.done.wait()
        except trio.Cancelled as exc:
            if self._outstanding.pop(request_id, None) is not None:
                self._abandon(request_id)
                logger.debug(
                    "acp: request %r (%s) cancelled by its caller (%s): sending %s",
                    request_id,
                    method,
                    exc.reason,
                    CANCEL_REQUEST_METHOD,
                )
                notice = _encode(
                    {
                        "jsonrpc": "2.0",
                        "method": CANCEL_REQUEST_METHOD,
                        "params": {"requestId": request_id},
                    }
                )
                # In a cancelled context: shielded, and bounded so that a peer that stopped
                # reading cannot hold the caller's cancellation hostage. With room in the write
                # queue this does not wait at all.
                with trio.CancelScope(shield=True), trio.move_on_after(self.cancel_grace) as grace:
                    await self._send_quietly(notice)
                if grace.cancelled_caught:
                    logger.warning(
                        "acp: %s for request %r dropped: the write queue stayed full for %ss",
                        CANCEL_REQUEST_METHOD,
                        request_id,
                        self.cancel_grace,
                    )
            raise
        if entry.error is not None:
            raise entry.error
        return entry.result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification; returns once it is queued for the writer, in order.

        Raises :class:`ConnectionClosed` if the connection is closed. Cancellation: the
        notification is either queued whole or not sent at all.
        """
        await self._ready("notify")
        _check_method(method, "notify")
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = _params(params, "notify")
        await self._send_line(_encode(message))

    async def _ready(self, where: str) -> None:
        await trio.lowlevel.checkpoint()
        if self._close_reason is not None:
            raise ConnectionClosed(self._close_reason)
        if self._state is _State.NEW:
            raise RuntimeError(
                f"{where}() needs a serving connection: start it with"
                " `await nursery.start(conn.serve)` first"
            )

    def _abandon(self, request_id: RequestId) -> None:
        self._abandoned[request_id] = None
        while len(self._abandoned) > _ABANDONED_MEMORY:
            self._abandoned.popitem(last=False)

    async def _send_line(self, line: bytes) -> None:
        """Queue *line* for the writer, or raise :class:`ConnectionClosed`."""
        if not await self._send_quietly(line):
            raise ConnectionClosed(self._close_reason or "the write queue is closed")

    async def _send_quietly(self, line: bytes) -> bool:
        """Queue *line* for the writer; False when the connection is closed. Checkpoints."""
        try:
            await self._outbox_send.send(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # send() only checked for cancellation before failing: make this a checkpoint.
            await trio.lowlevel.checkpoint()
            return False
        return True

    async def _write_loop(self) -> None:
        # Invariant: the only task that touches send_stream, and it writes whole lines.
        try:
            async for line in self._outbox_receive:
                if self.on_frame is not None:
                    self.on_frame(Frame(Direction.SENT, json.loads(line)))
                await self.send_stream.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # A no-op when close() closed the queue; otherwise the peer's end went away.
            self._close_nowait(
                f"the send stream broke ({type(exc).__name__}): the peer stopped reading"
            )
        await trio.lowlevel.checkpoint()

    # -- incoming -----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "end of input: the peer closed its side of the connection"
        try:
            await self._read_lines()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = f"the receive stream broke ({type(exc).__name__})"
        except ConnectionClosed:
            pass  # an answer could not be queued: the connection is already closing
        self._close_nowait(reason)
        await trio.lowlevel.checkpoint()

    async def _read_lines(self) -> None:
        limit = self.max_line_bytes
        buffer = bytearray()
        scanned = 0  # bytes of *buffer* known to hold no newline
        discarding = False  # skipping the rest of an over-long line
        while True:
            chunk = await self.receive_stream.receive_some(_RECEIVE_CHUNK)
            if not chunk:
                break
            if discarding:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                discarding = False
                chunk = chunk[newline + 1 :]
            buffer += chunk
            start = 0
            while True:
                newline = buffer.find(b"\n", max(start, scanned))
                if newline < 0:
                    break
                line = bytes(buffer[start:newline])
                start = scanned = newline + 1
                await self._reply(self._too_long() if len(line) > limit else self._on_line(line))
            del buffer[:start]
            scanned = len(buffer)
            if len(buffer) > limit:
                # Invariant: never hold more than one limit (plus one chunk) of a single line.
                buffer.clear()
                scanned = 0
                discarding = True
                await self._reply(self._too_long())
        if buffer and not discarding:
            # A last line without its newline: accepted, as the TypeScript SDK does.
            await self._reply(self._on_line(bytes(buffer)))

    async def _reply(self, line: bytes | None) -> None:
        # One checkpoint per incoming line keeps a chunk full of small lines from hogging the
        # run loop; *line* is the error answer the dispatcher chose, if any.
        if line is None:
            await trio.lowlevel.checkpoint()
        else:
            await self._send_line(line)

    def _too_long(self) -> bytes:
        logger.warning("acp: skipped a line longer than %d bytes", self.max_line_bytes)
        return _error_line(
            None,
            JsonRpcError(
                ErrorCode.INVALID_REQUEST,
                f"invalid request: a line may hold at most max_line_bytes={self.max_line_bytes}"
                " bytes; the message was skipped, send a smaller one",
            ),
        )

    # The dispatchers below are synchronous: they never wait, and return the error line to
    # answer with (or None). Only the reader task calls them.

    def _on_line(self, raw: bytes) -> bytes | None:
        if self._close_reason is not None or not raw.strip():
            return None  # blank lines (and a stray \r) carry no message
        try:
            message = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            # ValueError covers bad UTF-8, bad JSON and integers too long to convert.
            return _error_line(
                None,
                JsonRpcError(
                    ErrorCode.PARSE_ERROR,
                    "parse error: each line must be one JSON value in UTF-8,"
                    " without NaN or Infinity",
                ),
            )
        if not isinstance(message, dict):
            what = "a batch (array)" if isinstance(message, list) else json_type(message)
            return _invalid(
                None, f"a message must be a JSON object, got {what}; acp does not use batches"
            )
        if self.on_frame is not None:
            self.on_frame(Frame(Direction.RECEIVED, message))
        if "method" in message:
            if "id" in message:
                return self._on_request_frame(message)
            return self._on_notification_frame(message)
        if "id" in message and ("result" in message or "error" in message):
            self._on_response_frame(message)
            return None
        return _invalid(
            None,
            "a message needs a method (request or notification) or an id with a result or an"
            " error (response)",
        )

    def _on_request_frame(self, message: dict[str, Any]) -> bytes | None:
        request_id = message["id"]
        if not _valid_id(request_id):
            return _invalid(
                None, f"id must be a string, an integer or null, got {json_type(request_id)}"
            )
        problem = _envelope_problem(message, _REQUEST_KEYS)
        if problem is not None:
            return _invalid(request_id, problem)
        method: str = message["method"]
        params = message.get("params")
        if isinstance(params, list):
            return _error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.INVALID_PARAMS,
                    "invalid params: acp passes params as a JSON object, got an array",
                ),
            )
        if request_id in self._running:
            return _invalid(
                None,
                f"id {_clip(request_id)} is already used by a request still being handled;"
                " use a fresh id for each request",
            )
        handler = self._request_handlers.get(method)
        if handler is None:
            return _error_line(
                request_id,
                JsonRpcError(ErrorCode.METHOD_NOT_FOUND, f"method not found: {_clip(method)}"),
            )
        token = object()
        try:
            self._limiter.acquire_on_behalf_of_nowait(token)
        except trio.WouldBlock:
            return _error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.INTERNAL_ERROR,
                    f"too many concurrent requests: at most max_concurrent_handlers="
                    f"{self.max_concurrent_handlers} are handled at once; wait for an answer",
                ),
            )
        assert self._handler_nursery is not None  # the reader runs only while serving
        hook = self._receive_hooks.get(method)
        if hook is not None:
            try:
                hook(params or {})
            except Exception:
                logger.exception("on_receive hook of %s failed; the handler still runs", method)
        scope = trio.CancelScope()
        self._running[request_id] = scope
        self._handler_nursery.start_soon(
            self._run_handler, request_id, method, params or {}, handler, scope, token
        )
        return None

    async def _run_handler(
        self,
        request_id: RequestId,
        method: str,
        params: dict[str, Any],
        handler: RequestHandler,
        scope: trio.CancelScope,
        token: object,
    ) -> None:
        line: bytes | None = None
        try:
            with scope:
                try:
                    result = await handler(params)
                    line = _encode({"jsonrpc": "2.0", "id": request_id, "result": result})
                except JsonRpcError as exc:
                    line = _error_line(request_id, exc)
                except Exception:
                    # Contained: one failing handler must not end the connection.
                    logger.exception("acp: handler for %s (id %r) failed", method, request_id)
                    line = _error_line(
                        request_id, JsonRpcError(ErrorCode.INTERNAL_ERROR, "internal error")
                    )
        finally:
            if self._running.get(request_id) is scope:
                del self._running[request_id]
            self._limiter.release_on_behalf_of(token)
        if line is None:
            # Only the peer's $/cancel_request cancels *scope*; teardown cancels from outside.
            line = _error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.REQUEST_CANCELLED,
                    f"request cancelled: the peer sent {CANCEL_REQUEST_METHOD}",
                ),
            )
        await self._send_quietly(line)

    def _on_notification_frame(self, message: dict[str, Any]) -> bytes | None:
        problem = _envelope_problem(message, _NOTIFICATION_KEYS)
        if problem is not None:
            # Not a valid notification, so JSON-RPC's "never answer a notification" is moot.
            return _invalid(None, problem)
        method: str = message["method"]
        params = message.get("params")
        if isinstance(params, list):
            logger.warning("acp: notification %s with array params ignored", _clip(method))
            return None
        if method == CANCEL_REQUEST_METHOD:
            self._on_cancel_request(params or {})
            return None
        handler = self._notification_handlers.get(method)
        if handler is None:
            # '$/' notifications may be ignored by design; others have no one to answer.
            logger.debug("acp: notification %s has no handler; ignored", _clip(method))
            return None
        try:
            handler(params or {})
        except JsonRpcError as exc:
            logger.warning("acp: notification %s rejected: %s", _clip(method), exc.message)
        except Exception:
            logger.exception("acp: notification handler for %s failed", _clip(method))
        return None

    def _on_cancel_request(self, params: dict[str, Any]) -> None:
        request_id = params.get("requestId", _MISSING)
        if not _valid_id(request_id):
            logger.debug("acp: %s without a valid requestId ignored", CANCEL_REQUEST_METHOD)
            return
        scope = self._running.get(request_id)
        if scope is None:
            logger.debug(
                "acp: %s for unknown request %r ignored", CANCEL_REQUEST_METHOD, request_id
            )
            return
        scope.cancel(reason=f"the peer sent {CANCEL_REQUEST_METHOD} for request {request_id!r}")

    def _on_response_frame(self, message: dict[str, Any]) -> None:
        response_id = message["id"]
        if not _valid_id(response_id):
            logger.warning("acp: response with an invalid id (%s) ignored", json_type(response_id))
            return
        entry = self._outstanding.pop(response_id, None)
        if entry is None:
            if response_id in self._abandoned:
                logger.debug("acp: late response to abandoned request %r dropped", response_id)
            else:
                logger.warning("acp: response to unknown request id %s ignored", _clip(response_id))
            return
        problem = _response_problem(message)
        if problem is not None:
            logger.warning("acp: malformed response to request %r: %s", response_id, problem)
            entry.fail(JsonRpcError(ErrorCode.INVALID_REQUEST, f"invalid response: {problem}"))
        elif "error" in message:
            error = message["error"]
            entry.fail(JsonRpcError(error["code"], error["message"], error.get("data")))
        else:
            entry.resolve(message["result"])


# -- helpers ----------------------------------------------------------------------------------


def _encode(message: dict[str, Any]) -> bytes:
    """One line: compact JSON, UTF-8, newline-terminated. JSON escapes every raw newline."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (legal in a JSON escape we parsed) cannot be UTF-8: escape it.
        text = json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return (text + "\n").encode("ascii")


def _invalid(request_id: RequestId, problem: str) -> bytes:
    return _error_line(
        request_id, JsonRpcError(ErrorCode.INVALID_REQUEST, f"invalid request: {problem}")
    )


def _error_line(request_id: RequestId, error: JsonRpcError) -> bytes:
    try:
        return _encode({"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()})
    except (TypeError, ValueError):
        logger.error("acp: error data for %r is not JSON; sent without data", request_id)
        bare = JsonRpcError(error.code, error.message)
        return _encode({"jsonrpc": "2.0", "id": request_id, "error": bare.to_dict()})


def _check_method(method: object, where: str) -> None:
    if not isinstance(method, str) or not method:
        raise ValueError(f"{where}: method must be a non-empty string, got {method!r}")


def _params(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(params, Mapping):
        raise TypeError(
            f"{where}: params must be a mapping (acp uses named params), got"
            f" {type(params).__name__}"
        )
    return dict(params)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _valid_id(value: object) -> TypeGuard[RequestId]:
    return value is None or isinstance(value, str) or type(value) is int


def _envelope_problem(message: dict[str, Any], keys: frozenset[str]) -> str | None:
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0": acp speaks json-rpc 2.0 only'
    if not isinstance(message.get("method"), str):
        return "method must be a string"
    params = message.get("params")
    if params is not None and not isinstance(params, dict | list):
        return f"params must be an object, got {json_type(params)}"
    extra = set(message) - keys
    if extra:
        allowed = ", ".join(sorted(keys))
        return f"unexpected members {_clip(sorted(extra))}: a message may carry only {allowed}"
    return None


def _response_problem(message: dict[str, Any]) -> str | None:
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    extra = set(message) - _RESPONSE_KEYS
    if extra:
        return f"unexpected members {_clip(sorted(extra))}"
    if "result" in message and "error" in message:
        return "a response carries a result or an error, not both"
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            return f"error must be an object, got {json_type(error)}"
        if type(error.get("code")) is not int:
            return "error.code must be an integer"
        if not isinstance(error.get("message"), str):
            return "error.message must be a string"
        if set(error) - {"code", "message", "data"}:
            return "error has members other than code, message and data"
    return None


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _CLIP else text[: _CLIP - 3] + "..."
