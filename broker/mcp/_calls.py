"""The MCP gate's tools/call gate: a client's ``tools/call`` is held, becomes a question of the
connection's broker session, and goes to the server only once the broker says
``allowed-once``; any other outcome answers the client with a fail-closed tool result.

Synopsis::

    calls = CallGate(broker=broker, session=session, pump=pump, ledger=ledger, ...)
    await calls.run(read_both_sides)     # questions live in its nursery; withdrawn at the end
    await calls.hold(message)            # a client's tools/call (from the client's reader)
    calls.withdraw(message)              # the client's notifications/cancelled for one

A held call is forwarded re-encoded (compact JSON), so the arguments shown in the question are
a byte-exact part of what the server receives. On the stateless 2026-07-28 revision a held call
may be answered with an input-required result (``_elicit.py``); the client's retry, carrying the
gate's ``requestState``, takes the held call's place (:meth:`CallGate.hold`).
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._display import printable
from .._errors import BrokerError
from .._request import ApprovalRequest
from .._signal import AbortSignal
from .._vocabulary import Outcome
from ._frames import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    error_response,
    id_key,
    valid_id,
)
from ._ledger import GATE_ID_PREFIX
from ._messages import canonical, is_stateless, refusal, stateless_elicits

if TYPE_CHECKING:
    from .._broker import Broker
    from .._questions import Decision
    from .._session import Session
    from ._ledger import Ledger
    from ._pump import Pump

__all__ = ["CURRENT", "MAX_HELD", "REASON_ARGUMENTS", "CallGate", "Held"]

log = logging.getLogger("broker.mcp")

#: Tool calls waiting for an answer at once; one more is refused at once (fail closed).
MAX_HELD: Final = 64
#: How much of the arguments ``approval/asked`` records in its reason.
REASON_ARGUMENTS: Final = 400


@attrs.define(eq=False)
class Held:
    """A ``tools/call`` waiting for its answer. Invariant: in ``CallGate.held`` exactly until
    its outcome is known (or in ``CallGate.retries`` while its retry is awaited); then
    forwarded (and in the ledger's ``upstream_pending``) or answered."""

    key: str
    request_id: object
    message: dict[str, Any]
    name: str
    arguments: str
    line: bytes
    stateless: bool
    #: A 2026-07-28 client that can be asked by an input-required result.
    elicits: bool = False
    signal: AbortSignal = attrs.field(factory=AbortSignal)
    withdrawn_by_client: bool = False
    #: The requestState of the input-required result sent for it; its retry carries it back.
    token: str | None = None
    retried: trio.Event = attrs.field(factory=trio.Event)
    responses: object = None


#: The held call whose question the current task asks (answerers run in the asking task).
CURRENT: contextvars.ContextVar[Held | None] = contextvars.ContextVar(
    "broker_mcp_held", default=None
)


@attrs.define(eq=False)
class CallGate:
    """The held calls of one connection; each question runs in :meth:`run`'s nursery."""

    broker: Broker
    session: Session
    pump: Pump
    ledger: Ledger
    deadline: float
    #: id key -> the held call (tools/call waiting for the broker).
    held: dict[str, Held] = attrs.field(init=False, factory=dict)
    #: requestState -> a held call answered with input-required, waiting for its retry.
    retries: dict[str, Held] = attrs.field(init=False, factory=dict)
    _calls: trio.Nursery | None = attrs.field(init=False, default=None)

    async def run(self, serve: Callable[[], Awaitable[None]]) -> None:
        """Take calls while ``await serve()`` runs; then mark the pump closing and withdraw
        every held call (each settles ``cancelled`` with its audit pair) and wait for them.

        Cancellation: the questions are cancelled with the nursery (the session's teardown
        settles them), ``Cancelled`` propagates.
        """
        async with trio.open_nursery() as calls:
            self._calls = calls
            await serve()
            self.pump.closing = True
            for held in [*self.held.values(), *self.retries.values()]:
                held.signal.abort("the MCP connection ended")

    def in_use(self, key: str) -> bool:
        """Whether *key* is the id of a held call."""
        return key in self.held

    async def _reply(self, line: bytes) -> None:
        await self.pump.to_client.send(line)

    def withdraw(self, message: dict[str, Any]) -> bool:
        """The client's ``notifications/cancelled`` *message*: whether it withdrew a held
        call's question (then it is not forwarded)."""
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not valid_id(request_id):
            return False
        key = id_key(request_id)
        held = self.held.get(key)
        if held is not None:
            held.withdrawn_by_client = True
            held.signal.abort("the MCP client cancelled the call")
            return True
        self.ledger.withdrawn(key)
        return False

    async def hold(self, message: dict[str, Any]) -> None:
        """Hold the client's ``tools/call`` request *message* and start its question (or
        refuse it at once: bad id or params, id in use, too many waiting, closing).

        Cancellation: the call is not held (the reader was cancelled: the connection ends).
        """
        request_id = message["id"]
        method: str = message["method"]
        if not valid_id(request_id):
            await self._reply(
                error_response(
                    None, INVALID_REQUEST, "a tools/call id must be a string or an integer"
                )
            )
            return
        if method != "tools/call":
            await self._reply(
                error_response(
                    request_id,
                    METHOD_NOT_FOUND,
                    f"method {printable(method)!r} is not forwarded: spell it tools/call",
                )
            )
            return
        key = id_key(request_id)
        if key in self.held or key in self.ledger.upstream_pending:
            await self._reply(
                error_response(
                    request_id,
                    INVALID_REQUEST,
                    f"id {key} is in use by a request still waiting: use a new id",
                )
            )
            return
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(name, str) or not name.strip():
            await self._reply(
                error_response(
                    request_id, INVALID_PARAMS, "tools/call params.name must be a non-empty string"
                )
            )
            return
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            await self._reply(
                error_response(
                    request_id, INVALID_PARAMS, "tools/call params.arguments must be an object"
                )
            )
            return
        state = params.get("requestState")
        if isinstance(state, str) and state.startswith(GATE_ID_PREFIX):
            await self._retried(key, message, name, arguments, state)
            return
        if isinstance(state, str) and not self.ledger.full():
            line, shown = canonical(message, arguments)
            if self.ledger.continues(state, (name, shown)):
                # The retry the server asked for, of a call allowed once: the same call going
                # on, not a new one (its question was asked); forwarded as sent, re-encoded.
                log.info("forwarded call %s: it continues an allowed call (requestState)", key)
                self.ledger.forward(key, request_id, (name, shown))
                await self.pump.to_upstream.send(line)
                return
        if (
            len(self.held) + len(self.retries) >= MAX_HELD
            or self.pump.closing
            or self._calls is None
        ):
            log.warning("refused tool call %s at once: %d calls are waiting", key, len(self.held))
            await self._reply(
                refusal(request_id, name, Outcome.UNAVAILABLE, stateless=is_stateless(params))
            )
            return
        line, shown = canonical(message, arguments)
        held = Held(
            key=key,
            request_id=request_id,
            message=message,
            name=name,
            arguments=shown,
            line=line,
            stateless=is_stateless(params),
            elicits=stateless_elicits(params),
        )
        self.held[key] = held
        self._calls.start_soon(self._decide, held)
        await trio.lowlevel.checkpoint()

    async def _retried(
        self, key: str, message: dict[str, Any], name: str, arguments: object, state: str
    ) -> None:
        """A 2026-07-28 client retries a call the gate answered with input-required: the
        retry takes the held call's place (its id gets the outcome); it must repeat the very
        call asked about, and is never forwarded as sent (the server did not ask for input)."""
        request_id = message["id"]
        held = self.retries.get(state)
        if held is None:
            await self._reply(
                error_response(
                    request_id,
                    INVALID_PARAMS,
                    "requestState names no question waiting for an answer: call the tool "
                    "again without it",
                )
            )
            return
        _, shown = canonical(message, arguments)
        if name != held.name or shown != held.arguments:
            await self._reply(
                error_response(
                    request_id,
                    INVALID_PARAMS,
                    "a retried tools/call must repeat the call asked about (same name and "
                    "arguments): retry it unchanged, or call the tool again without requestState",
                )
            )
            return
        params = message["params"]
        del self.retries[state]
        held.key, held.request_id = key, request_id
        held.line, _ = canonical({**held.message, "id": request_id}, arguments)
        held.responses = params.get("inputResponses")
        self.held[key] = held
        held.retried.set()
        await trio.lowlevel.checkpoint()

    def park(self, held: Held, token: str) -> None:
        """*held* was answered with an input-required result carrying *token*: it waits for
        the client's retry (:meth:`hold`) instead of under its own id."""
        held.token = token
        del self.held[held.key]
        self.retries[token] = held

    async def _decide(self, held: Held) -> None:
        arguments = held.arguments
        cut = (
            arguments if len(arguments) <= REASON_ARGUMENTS else arguments[:REASON_ARGUMENTS] + "…"
        )
        request_id = held.request_id
        CURRENT.set(held)  # this task's context: its answerers (and their tasks) see it
        decision: Decision | None = None
        try:
            req = ApprovalRequest(
                agent=self.session.agent,
                tool_name=held.name,
                call_id=request_id if isinstance(request_id, str) else str(request_id),
                reason=f"MCP tool call: {held.name} {cut}",
                display_reason=f"MCP tool call: {held.name}, arguments: {arguments}",
                signal=held.signal,
                arguments=_arguments_of(held.line),
            )
            decision = await self.broker.request_decision(req)
            outcome = decision.outcome
        except (BrokerError, TypeError, ValueError):
            # Containment: a question that could not be put (or arguments JSON cannot hold,
            # such as NaN) fails closed.
            log.warning("tool call %s could not be asked; refused", held.key, exc_info=True)
            outcome = Outcome.UNAVAILABLE
        if held.token is not None and not held.retried.is_set():
            # Its id was answered with input-required: only its retry can take the outcome.
            if not self.pump.closing:
                with trio.move_on_after(self.deadline):
                    await held.retried.wait()
            if not held.retried.is_set():
                del self.retries[held.token]
                log.info("call %s was decided %s; its retry never came", held.key, outcome)
                await trio.lowlevel.checkpoint()
                return
        # Invariant: leaving ``held`` and entering ``upstream_pending`` with no checkpoint
        # between, so a response or a reused id is never judged against a stale state.
        key, request_id = held.key, held.request_id
        del self.held[key]
        if outcome is Outcome.ALLOWED_ONCE and not (
            decision is not None and decision.covers(_arguments_of(held.line))
        ):
            # Bound to the arguments: the line to forward must carry what was decided.
            log.warning("call %s: its arguments changed after the approval; refused", held.key)
            outcome = Outcome.REJECTED
        if outcome is Outcome.ALLOWED_ONCE:
            self.ledger.forward(key, request_id, (held.name, held.arguments))
            await self.pump.send(self.pump.to_upstream, held.line)
        elif not held.withdrawn_by_client:
            answer = refusal(request_id, held.name, outcome, stateless=held.stateless)
            await self.pump.send(self.pump.to_client, answer)
        else:
            await trio.lowlevel.checkpoint()


def _arguments_of(line: bytes) -> dict[str, Any]:
    """The arguments a forwarded line carries (what the server will run with)."""
    params = json.loads(line)["params"]
    arguments = params.get("arguments", {})
    assert isinstance(arguments, dict)  # checked when the call was held
    return arguments
