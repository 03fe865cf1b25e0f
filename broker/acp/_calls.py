"""Outgoing calls: the requests and notifications we send, and the responses that answer them.

:class:`Calls` owns the ids we hand out, the table of requests waiting for their response, and
the memory of requests our callers abandoned (so that a late response is dropped quietly). The
reader hands it each response frame; teardown fails every waiting request at once.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from .._framing import encode_line
from .._json_names import json_type
from ._envelope import (
    CANCEL_REQUEST_METHOD,
    RequestId,
    check_method,
    clip,
    params_object,
    response_problem,
    valid_id,
)
from ._errors import ConnectionClosed, ErrorCode, JsonRpcError
from ._outbox import Outbox

__all__ = ["Calls"]

logger = logging.getLogger("broker.acp")

# How many ids of requests our callers abandoned we remember, so that their late responses are
# dropped quietly (a response to an id we never sent is logged as a warning instead).
_ABANDONED_MEMORY = 1024


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


@attrs.define(eq=False)
class Calls:
    """The client side of a connection: our requests, their ids and their responses."""

    outbox: Outbox
    #: How long a cancelled :meth:`request` may wait (shielded) to queue its cancel notice.
    cancel_grace: float
    # Invariant: holds exactly the requests we sent whose response, error or closure has not
    # been delivered; the reader pops an entry before resolving it, so each resolves once.
    _outstanding: dict[RequestId, _Outstanding] = attrs.field(factory=dict, init=False)
    _abandoned: collections.OrderedDict[RequestId, None] = attrs.field(
        factory=collections.OrderedDict, init=False
    )
    _next_id: int = attrs.field(default=0, init=False)

    async def request(self, method: str, params: Mapping[str, Any] | None) -> Any:
        """Send a request and return its result (see :meth:`JsonRpcConnection.request`)."""
        check_method(method, "request")
        request_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params_object(params, "request")
        line = encode_line(message)
        self._next_id += 1
        entry = _Outstanding(method)
        self._outstanding[request_id] = entry
        try:
            await self.outbox.send_line(line)
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
                notice = encode_line(
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
                    await self.outbox.send_quietly(notice)
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

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Queue a notification (see :meth:`JsonRpcConnection.notify`)."""
        check_method(method, "notify")
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params_object(params, "notify")
        await self.outbox.send_line(encode_line(message))

    def fail_all(self, reason: str) -> None:
        """Teardown: every request still waiting raises ``ConnectionClosed(reason)``."""
        outstanding = list(self._outstanding.values())
        self._outstanding.clear()
        for entry in outstanding:
            entry.fail(ConnectionClosed(reason))

    def on_response_frame(self, message: dict[str, Any]) -> None:
        """Deliver a response (a frame with an id and a result or an error) to its request."""
        response_id = message["id"]
        if not valid_id(response_id):
            logger.warning("acp: response with an invalid id (%s) ignored", json_type(response_id))
            return
        entry = self._outstanding.pop(response_id, None)
        if entry is None:
            if response_id in self._abandoned:
                logger.debug("acp: late response to abandoned request %r dropped", response_id)
            else:
                logger.warning("acp: response to unknown request id %s ignored", clip(response_id))
            return
        problem = response_problem(message)
        if problem is not None:
            logger.warning("acp: malformed response to request %r: %s", response_id, problem)
            entry.fail(JsonRpcError(ErrorCode.INVALID_REQUEST, f"invalid response: {problem}"))
        elif "error" in message:
            error = message["error"]
            entry.fail(JsonRpcError(error["code"], error["message"], error.get("data")))
        else:
            entry.resolve(message["result"])

    def _abandon(self, request_id: RequestId) -> None:
        self._abandoned[request_id] = None
        while len(self._abandoned) > _ABANDONED_MEMORY:
            self._abandoned.popitem(last=False)
