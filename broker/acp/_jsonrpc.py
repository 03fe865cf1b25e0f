"""JSON-RPC 2.0 over a pair of trio byte streams, one JSON object per line (ACP's stdio framing).

The connection is untyped: params and results are JSON values (``dict``/``list``/``str``...).
ACP's typed values live in :mod:`broker.acp._wire`; handlers decode their params there.

:class:`JsonRpcConnection` composes the parts, one concept a module: :mod:`broker._framing` (lines
and their limit), :mod:`._envelope` (what a valid message is, and the error lines we answer
with), :mod:`._dispatch` (incoming requests and notifications), :mod:`._calls` (our requests
and their responses), :mod:`._outbox` (the one writer) and :mod:`._frames` (the frame hook and
recorder). The connection itself owns the lifecycle: serving, routing each line read to the
part it concerns, and teardown.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from .._collapse import collapse_single
from .._framing import DEFAULT_MAX_LINE_BYTES, parse_line, read_lines
from .._json_names import json_type
from ._calls import Calls
from ._dispatch import (
    DEFAULT_MAX_CONCURRENT_HANDLERS,
    Dispatcher,
    NotificationHandler,
    RequestHandler,
)
from ._envelope import CANCEL_REQUEST_METHOD, RequestId, error_line, invalid_line
from ._errors import ConnectionClosed, ErrorCode, JsonRpcError
from ._frames import Direction, Frame, FrameHook, FrameRecorder
from ._outbox import Outbox

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


class _State(enum.Enum):
    NEW = "new"
    SERVING = "serving"
    CLOSED = "closed"


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

    _outbox: Outbox = attrs.field(factory=Outbox, init=False)
    _calls: Calls = attrs.field(init=False)
    _dispatcher: Dispatcher = attrs.field(init=False)
    _state: _State = attrs.field(default=_State.NEW, init=False)
    _close_reason: str | None = attrs.field(default=None, init=False)
    _close_requested: trio.Event = attrs.field(factory=trio.Event, init=False)
    _finished: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._calls = Calls(self._outbox, self.cancel_grace)
        self._dispatcher = Dispatcher(self._outbox, self.max_concurrent_handlers)

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
        self._dispatcher.on_request(method, handler, on_receive)

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for each notification *method*, inline, in arrival order.

        Keep it quick and non-blocking (cancel a scope, ``send_nowait``...). Its exceptions are
        logged and contained: nobody is waiting for an answer to a notification.
        """
        self._dispatcher.on_notification(method, handler)

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
                                self._dispatcher.nursery = handlers
                                io.start_soon(self._read_loop)
                                io.start_soon(
                                    self._outbox.write_loop,
                                    self.send_stream,
                                    self.on_frame,
                                    self._close_nowait,
                                )
                                task_status.started()
                                await self._close_requested.wait()
                                handlers.cancel_scope.cancel(reason=self._teardown_reason())
                    finally:
                        self._close_nowait("serve() was cancelled or failed")
                        io.cancel_scope.cancel(reason=self._teardown_reason())
        finally:
            self._dispatcher.nursery = None
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
        self._calls.fail_all(reason)
        # Blocked senders get BrokenResourceError (-> ConnectionClosed); queued frames drop.
        self._outbox.close(reason)
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
        return await self._calls.request(method, params)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification; returns once it is queued for the writer, in order.

        Raises :class:`ConnectionClosed` if the connection is closed. Cancellation: the
        notification is either queued whole or not sent at all.
        """
        await self._ready("notify")
        await self._calls.notify(method, params)

    async def _ready(self, where: str) -> None:
        await trio.lowlevel.checkpoint()
        if self._close_reason is not None:
            raise ConnectionClosed(self._close_reason)
        if self._state is _State.NEW:
            raise RuntimeError(
                f"{where}() needs a serving connection: start it with"
                " `await nursery.start(conn.serve)` first"
            )

    # -- incoming -----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "end of input: the peer closed its side of the connection"
        try:
            await read_lines(self.receive_stream, self.max_line_bytes, self._on_line)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = f"the receive stream broke ({type(exc).__name__})"
        except ConnectionClosed:
            pass  # an answer could not be queued: the connection is already closing
        self._close_nowait(reason)
        await trio.lowlevel.checkpoint()

    async def _on_line(self, raw: bytes | None) -> None:
        # One checkpoint per incoming line keeps a chunk full of small lines from hogging the
        # run loop; the router's answer, if any, is an error line to send.
        answer = self._too_long() if raw is None else self._route(raw)
        if answer is None:
            await trio.lowlevel.checkpoint()
        else:
            await self._outbox.send_line(answer)

    def _too_long(self) -> bytes:
        logger.warning("acp: skipped a line longer than %d bytes", self.max_line_bytes)
        return error_line(
            None,
            JsonRpcError(
                ErrorCode.INVALID_REQUEST,
                f"invalid request: a line may hold at most max_line_bytes={self.max_line_bytes}"
                " bytes; the message was skipped, send a smaller one",
            ),
        )

    def _route(self, raw: bytes) -> bytes | None:
        """Hand one line's message to the part it concerns; synchronous, the reader's only."""
        if self._close_reason is not None or not raw.strip():
            return None  # blank lines (and a stray \r) carry no message
        try:
            message = parse_line(raw)
        except (ValueError, RecursionError):
            return error_line(
                None,
                JsonRpcError(
                    ErrorCode.PARSE_ERROR,
                    "parse error: each line must be one JSON value in UTF-8,"
                    " without NaN or Infinity",
                ),
            )
        if not isinstance(message, dict):
            what = "a batch (array)" if isinstance(message, list) else json_type(message)
            return invalid_line(
                None, f"a message must be a JSON object, got {what}; acp does not use batches"
            )
        if self.on_frame is not None:
            self.on_frame(Frame(Direction.RECEIVED, message))
        if "method" in message:
            if "id" in message:
                return self._dispatcher.on_request_frame(message)
            return self._dispatcher.on_notification_frame(message)
        if "id" in message and ("result" in message or "error" in message):
            self._calls.on_response_frame(message)
            return None
        return invalid_line(
            None,
            "a message needs a method (request or notification) or an id with a result or an"
            " error (response)",
        )
