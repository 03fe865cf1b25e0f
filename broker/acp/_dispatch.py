"""Dispatch of incoming requests and notifications to the handlers registered for them.

:class:`Dispatcher` owns the handler tables, the requests being handled (one cancel scope each,
by the peer's id, so ``$/cancel_request`` can reach them) and the limit on how many run at once.
Its frame methods are synchronous and called only by the reader: they never wait, and return
the error line to answer with (or None); each accepted request runs in its own task in the
handler nursery the connection lends it while serving.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

import attrs
import trio

from .._framing import encode_line
from .._json_names import json_type
from ._envelope import (
    CANCEL_REQUEST_METHOD,
    MISSING,
    NOTIFICATION_KEYS,
    REQUEST_KEYS,
    RequestId,
    check_method,
    clip,
    envelope_problem,
    error_line,
    invalid_line,
    valid_id,
)
from ._errors import ErrorCode, JsonRpcError
from ._outbox import Outbox

__all__ = [
    "DEFAULT_MAX_CONCURRENT_HANDLERS",
    "Dispatcher",
    "NotificationHandler",
    "RequestHandler",
]

logger = logging.getLogger("broker.acp")

DEFAULT_MAX_CONCURRENT_HANDLERS: Final = 64

#: ``async def handler(params) -> result``; *result* must be JSON-encodable.
RequestHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable[Any]]
#: ``def handler(params) -> None``; runs inline in the reader task, so it must not block.
NotificationHandler: TypeAlias = Callable[[dict[str, Any]], None]


@attrs.define(eq=False)
class Dispatcher:
    """The server side of a connection: handlers, the requests they are handling, the limit."""

    outbox: Outbox
    max_concurrent_handlers: int
    #: Where handler tasks run; set by the connection while it serves.
    nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _request_handlers: dict[str, RequestHandler] = attrs.field(factory=dict, init=False)
    _receive_hooks: dict[str, NotificationHandler] = attrs.field(factory=dict, init=False)
    _notification_handlers: dict[str, NotificationHandler] = attrs.field(factory=dict, init=False)
    # Incoming requests whose handler has not finished, by the peer's id.
    _running: dict[RequestId, trio.CancelScope] = attrs.field(factory=dict, init=False)
    _limiter: trio.CapacityLimiter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limiter = trio.CapacityLimiter(self.max_concurrent_handlers)

    # -- registration -------------------------------------------------------------------------

    def on_request(
        self, method: str, handler: RequestHandler, on_receive: NotificationHandler | None
    ) -> None:
        """Register *handler* (and *on_receive*) for requests *method*; once per method."""
        self._check_registration(method, "on_request")
        self._request_handlers[method] = handler
        if on_receive is not None:
            self._receive_hooks[method] = on_receive

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Register *handler* for notifications *method*; once per method."""
        self._check_registration(method, "on_notification")
        self._notification_handlers[method] = handler

    def _check_registration(self, method: str, where: str) -> None:
        check_method(method, where)
        if method == CANCEL_REQUEST_METHOD:
            raise ValueError(
                f"{where}: {CANCEL_REQUEST_METHOD} is handled by the connection itself:"
                " it cancels the handler of the request it names"
            )
        if method in self._request_handlers or method in self._notification_handlers:
            raise ValueError(f"{where}: method {method!r} already has a handler: register once")

    # -- requests -----------------------------------------------------------------------------

    def on_request_frame(self, message: dict[str, Any]) -> bytes | None:
        """Start the handler of a request frame, or return the error line to answer with."""
        request_id = message["id"]
        if not valid_id(request_id):
            return invalid_line(
                None, f"id must be a string, an integer or null, got {json_type(request_id)}"
            )
        problem = envelope_problem(message, REQUEST_KEYS)
        if problem is not None:
            return invalid_line(request_id, problem)
        method: str = message["method"]
        params = message.get("params")
        if isinstance(params, list):
            return error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.INVALID_PARAMS,
                    "invalid params: acp passes params as a JSON object, got an array",
                ),
            )
        if request_id in self._running:
            return invalid_line(
                None,
                f"id {clip(request_id)} is already used by a request still being handled;"
                " use a fresh id for each request",
            )
        handler = self._request_handlers.get(method)
        if handler is None:
            return error_line(
                request_id,
                JsonRpcError(ErrorCode.METHOD_NOT_FOUND, f"method not found: {clip(method)}"),
            )
        token = object()
        try:
            self._limiter.acquire_on_behalf_of_nowait(token)
        except trio.WouldBlock:
            return error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.INTERNAL_ERROR,
                    f"too many concurrent requests: at most max_concurrent_handlers="
                    f"{self.max_concurrent_handlers} are handled at once; wait for an answer",
                ),
            )
        assert self.nursery is not None  # the reader runs only while serving
        hook = self._receive_hooks.get(method)
        if hook is not None:
            try:
                hook(params or {})
            except Exception:
                logger.exception("on_receive hook of %s failed; the handler still runs", method)
        scope = trio.CancelScope()
        self._running[request_id] = scope
        self.nursery.start_soon(
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
                    line = encode_line({"jsonrpc": "2.0", "id": request_id, "result": result})
                except JsonRpcError as exc:
                    line = error_line(request_id, exc)
                except Exception:
                    # Contained: one failing handler must not end the connection.
                    logger.exception("acp: handler for %s (id %r) failed", method, request_id)
                    line = error_line(
                        request_id, JsonRpcError(ErrorCode.INTERNAL_ERROR, "internal error")
                    )
        finally:
            if self._running.get(request_id) is scope:
                del self._running[request_id]
            self._limiter.release_on_behalf_of(token)
        if line is None:
            # Only the peer's $/cancel_request cancels *scope*; teardown cancels from outside.
            line = error_line(
                request_id,
                JsonRpcError(
                    ErrorCode.REQUEST_CANCELLED,
                    f"request cancelled: the peer sent {CANCEL_REQUEST_METHOD}",
                ),
            )
        await self.outbox.send_quietly(line)

    # -- notifications ------------------------------------------------------------------------

    def on_notification_frame(self, message: dict[str, Any]) -> bytes | None:
        """Run a notification's handler inline; return the error line for a bad envelope."""
        problem = envelope_problem(message, NOTIFICATION_KEYS)
        if problem is not None:
            # Not a valid notification, so JSON-RPC's "never answer a notification" is moot.
            return invalid_line(None, problem)
        method: str = message["method"]
        params = message.get("params")
        if isinstance(params, list):
            logger.warning("acp: notification %s with array params ignored", clip(method))
            return None
        if method == CANCEL_REQUEST_METHOD:
            self._on_cancel_request(params or {})
            return None
        handler = self._notification_handlers.get(method)
        if handler is None:
            # '$/' notifications may be ignored by design; others have no one to answer.
            logger.debug("acp: notification %s has no handler; ignored", clip(method))
            return None
        try:
            handler(params or {})
        except JsonRpcError as exc:
            logger.warning("acp: notification %s rejected: %s", clip(method), exc.message)
        except Exception:
            logger.exception("acp: notification handler for %s failed", clip(method))
        return None

    def _on_cancel_request(self, params: dict[str, Any]) -> None:
        request_id = params.get("requestId", MISSING)
        if not valid_id(request_id):
            logger.debug("acp: %s without a valid requestId ignored", CANCEL_REQUEST_METHOD)
            return
        scope = self._running.get(request_id)
        if scope is None:
            logger.debug(
                "acp: %s for unknown request %r ignored", CANCEL_REQUEST_METHOD, request_id
            )
            return
        scope.cancel(reason=f"the peer sent {CANCEL_REQUEST_METHOD} for request {request_id!r}")
