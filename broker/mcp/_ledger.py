"""The MCP gate's request-id bookkeeping: which requests each side still waits on.

Synopsis::

    ledger = Ledger(pump, server_deadline=600.0)
    ledger.forward(key, request_id)            # a client request is about to reach the server
    waiting = ledger.answered(key)             # the server's response: None if nobody asked
    nursery.start_soon(ledger.expire)          # the server's silence past its bound

A response reaches a peer only for a request that peer sent and that is still waiting; the
gate drops everything else (a forged or late answer). Every table is bounded
(:data:`MAX_OUTSTANDING` per direction). The gate's own request ids start with
:data:`GATE_ID_PREFIX`, which the server may not use.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ._frames import INVALID_REQUEST, SERVER_ERROR, encode, error_response, id_key, valid_id

if TYPE_CHECKING:
    from ._pump import Pump

__all__ = ["GATE_ID_PREFIX", "MAX_OUTSTANDING", "Ledger", "Waiting"]

log = logging.getLogger("broker.mcp")

#: Requests awaiting their response, per direction; one more is refused with an error.
MAX_OUTSTANDING: Final = 1024
#: Every id of the gate's own requests starts so; a server request using it is refused.
GATE_ID_PREFIX: Final = "broker-mcp-gate-"


@attrs.define(eq=False)
class Waiting:
    """A client's request forwarded to the server, waiting for its response until
    *deadline* (trio time)."""

    request_id: object
    deadline: float
    #: For an allowed tools/call: its name and arguments' text (to recognise its continuation).
    call: tuple[str, str] | None = None


@attrs.define(eq=False)
class Ledger:
    """The requests in flight of one connection, both directions, and the server's
    continuations of allowed calls."""

    pump: Pump
    server_deadline: float
    #: id key -> the client's requests the server has not answered yet. Invariant: in
    #: deadline order (every entry gets the same bound and is added at the end), so the
    #: first entry is the next to expire.
    upstream_pending: dict[str, Waiting] = attrs.field(init=False, factory=dict)
    #: id keys of the server's requests the client has not answered yet.
    client_pending: set[str] = attrs.field(init=False, factory=set)
    #: The server's requestState -> the allowed call (name, arguments' text) it continues.
    continuations: dict[str, tuple[str, str]] = attrs.field(init=False, factory=dict)
    _forwarded: trio.Event = attrs.field(init=False, factory=trio.Event)

    def full(self) -> bool:
        """Whether the server already has :data:`MAX_OUTSTANDING` requests to answer."""
        return len(self.upstream_pending) >= MAX_OUTSTANDING

    def forward(self, key: str, request_id: object, call: tuple[str, str] | None = None) -> None:
        """Record a request about to be forwarded to the server (see ``upstream_pending``)."""
        deadline = trio.current_time() + self.server_deadline
        self.upstream_pending[key] = Waiting(request_id=request_id, deadline=deadline, call=call)
        self._forwarded.set()

    def answered(self, message: dict[str, Any]) -> bool:
        """Take the server's response *message* off the books: whether the client waits for
        it (else it is forged or late, and dropped)."""
        key = id_key(message["id"])
        waiting = self.upstream_pending.pop(key, None)
        if waiting is None:
            # Forged or late: the client is not waiting for it (a held call's id included).
            log.warning("dropped a response from the server to id %s, not asked", key)
            return False
        if waiting.call is not None:
            self._note_continuation(message, waiting.call)
        return True

    def withdrawn(self, key: str) -> None:
        """The client cancelled its request *key*: the server may still answer; the client
        ignores that answer, and so does the gate."""
        self.upstream_pending.pop(key, None)

    def server_request(self, request_id: object) -> bytes | None:
        """Book the server's request to the client; the error line for the server instead
        when its id is bad, in use or the gate's own, or when too many wait."""
        if not valid_id(request_id):
            return error_response(None, INVALID_REQUEST, "id must be a string or an integer")
        key = id_key(request_id)
        ours = isinstance(request_id, str) and request_id.startswith(GATE_ID_PREFIX)
        if ours or key in self.client_pending:
            return error_response(request_id, INVALID_REQUEST, f"id {key} is in use: use a new id")
        if len(self.client_pending) >= MAX_OUTSTANDING:
            return error_response(
                request_id,
                SERVER_ERROR,
                f"more than {MAX_OUTSTANDING} requests are waiting for the client",
            )
        self.client_pending.add(key)
        return None

    def server_cancelled(self, message: dict[str, Any]) -> None:
        """The server's ``notifications/cancelled``: the client need not answer that request."""
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if valid_id(request_id):
            self.client_pending.discard(id_key(request_id))

    def client_answered(self, key: str) -> bool:
        """Whether the client's response to *key* answers a request of the server's (then it
        is off the books and goes upstream)."""
        if key in self.client_pending:
            self.client_pending.discard(key)
            return True
        return False

    def _note_continuation(self, message: dict[str, Any], call: tuple[str, str]) -> None:
        """An allowed call's server answered input-required with a ``requestState``: the
        client's retry carrying it (same call) continues that call (:meth:`continues`)."""
        result = message.get("result")
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            return
        state = result.get("requestState")
        if not isinstance(state, str) or state.startswith(GATE_ID_PREFIX):
            return
        if len(self.continuations) >= MAX_OUTSTANDING:
            del self.continuations[next(iter(self.continuations))]  # the oldest
        self.continuations[state] = call

    def continues(self, state: str, call: tuple[str, str]) -> bool:
        """Whether a tools/call carrying the server's *state* repeats the allowed *call*
        (name, arguments' text) that state was issued for (each state is used once)."""
        return self.continuations.pop(state, None) == call

    def server_gone(self) -> None:
        """The server exited: every request it did not answer gets an error (teardown: sent
        only if the client's outbox has room)."""
        for waiting in self.upstream_pending.values():
            self.pump.send_nowait(
                self.pump.to_client,
                error_response(
                    waiting.request_id,
                    SERVER_ERROR,
                    "the MCP server exited before answering: see its standard error",
                ),
            )
        self.upstream_pending.clear()

    async def expire(self) -> None:
        """Answer each request the server leaves unanswered past its deadline: the client
        gets an error, the server ``notifications/cancelled``; a late response is dropped.

        Cancellation: ends the watch (it runs beside the readers and ends with them); a
        request whose error was being sent may be left to the teardown.
        """
        while True:
            if not self.upstream_pending:
                self._forwarded = trio.Event()
                await self._forwarded.wait()
                continue
            key, waiting = next(iter(self.upstream_pending.items()))
            if trio.current_time() < waiting.deadline:
                await trio.sleep_until(waiting.deadline)
                continue  # it may have been answered meanwhile: look again
            del self.upstream_pending[key]
            log.warning("the server did not answer request %s in time", key)
            await self.pump.to_client.send(
                error_response(
                    waiting.request_id,
                    SERVER_ERROR,
                    f"the MCP server did not answer within {self.server_deadline:g} seconds: "
                    "the gate gave up on it (see --server-deadline)",
                )
            )
            cancelled = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": waiting.request_id, "reason": "no answer in time"},
            }
            await self.pump.to_upstream.send(encode(cancelled))
