"""The MCP gate's elicitation answerer: the MCP client's own user asked about a held call, the
way the connection's revision has it, and the gate's waterfall of answerers.

Synopsis::

    elicitor = Elicitor(pump=pump, calls=calls, deadline=300.0)
    answer = waterfall(elicitor, rules, remote)      # rules, then elicitation racing remote
    elicitor.answered(key, message)                  # the client's response to the gate's ask

On the handshake revisions the client gets a server-to-client ``elicitation/create`` request
(when its ``initialize`` advertised form elicitation); on the stateless 2026-07-28 revision the
held call is answered with an input-required result and the client's retry carries the answer
(when the call's envelope advertises elicitation). accept → allowed-once, decline → rejected,
cancel → cancelled; an error or no answer within the deadline → unavailable.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import trio

from .._decision import Answer
from .._first_answer import first_answer
from ._calls import CURRENT
from ._frames import encode, id_key
from ._ledger import GATE_ID_PREFIX
from ._messages import INPUT_KEY, elicitation_message, elicited

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._answerers import AnswerFn, AnswerNext
    from .._request import ApprovalRequest
    from .._vocabulary import Outcome
    from ._calls import CallGate, Held
    from ._pump import Pump

__all__ = ["Elicitor", "waterfall"]

log = logging.getLogger("broker.mcp")


@attrs.define(eq=False)
class _Ask:
    """One of the gate's own requests to the client, waiting for its response."""

    done: trio.Event = attrs.field(factory=trio.Event)
    response: dict[str, Any] | None = None


@attrs.define(eq=False)
class Elicitor:
    """The client's user as an answerer of one connection's questions."""

    pump: Pump
    calls: CallGate
    deadline: float
    #: Whether the client's ``initialize`` advertised form elicitation.
    client_elicits: bool = attrs.field(init=False, default=False)
    #: id key -> the gate's own requests to the client.
    asks: dict[str, _Ask] = attrs.field(init=False, factory=dict)
    _ask_ids: Iterator[int] = attrs.field(init=False, factory=itertools.count)
    _id_prefix: str = attrs.field(init=False, factory=lambda: GATE_ID_PREFIX + secrets.token_hex(8))

    def answered(self, key: str, message: dict[str, Any]) -> bool:
        """Whether the client's response *message* (id *key*) answers one of the gate's own
        requests (then it is taken, and never reaches the server)."""
        ask = self.asks.get(key)
        if ask is None:
            return False
        ask.response = message
        ask.done.set()
        return True

    #: What the log calls it (``answerer`` of ``approval/decided``).
    answerer_name: ClassVar[str] = "elicitation"

    async def elicit(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        """Ask the client's user with ``elicitation/create`` (when the client advertised form
        elicitation; else delegate): accept → allowed-once, decline → rejected, cancel →
        cancelled; an error or no answer within the deadline → unavailable.

        Cancellation: the client is sent ``notifications/cancelled`` for the request (when
        its outbox has room: cleanup never waits on the client) and the wait ends.
        """
        held = CURRENT.get()
        if held is not None and held.stateless:
            if not held.elicits or held.token is not None or self.pump.closing:
                return await next_()
            return await self._elicit_by_input_required(held, req)
        if not self.client_elicits or self.pump.closing:
            return await next_()
        request_id = f"{self._id_prefix}-{next(self._ask_ids)}"
        key = id_key(request_id)
        ask = _Ask()
        self.asks[key] = ask
        try:
            await self.pump.to_client.send(
                encode(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "elicitation/create",
                        "params": {
                            "message": elicitation_message(req),
                            "requestedSchema": {"type": "object", "properties": {}},
                        },
                    }
                )
            )
            with trio.move_on_after(self.deadline):
                await ask.done.wait()
        finally:
            del self.asks[key]
            if ask.response is None:
                self._cancel_nowait(request_id)
        return elicited(ask.response)

    async def _elicit_by_input_required(self, held: Held, req: ApprovalRequest) -> Outcome | Answer:
        """The 2026-07-28 way: answer the held call with an input-required result asking the
        question, and take the answer from the client's retry of the call (bounded by the
        deadline). The retry takes the call's place whoever answers (``CallGate``)."""
        token = f"{self._id_prefix}-state-{next(self._ask_ids)}"
        self.calls.park(held, token)
        question = {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": elicitation_message(req),
                "requestedSchema": {"type": "object", "properties": {}},
            },
        }
        result = {
            "resultType": "input_required",
            "inputRequests": {INPUT_KEY: question},
            "requestState": token,
        }
        await self.pump.to_client.send(
            encode({"jsonrpc": "2.0", "id": held.request_id, "result": result})
        )
        with trio.move_on_after(self.deadline):
            await held.retried.wait()
        responses = held.responses
        answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
        return elicited({"result": answer} if held.retried.is_set() else None)

    def _cancel_nowait(self, request_id: str) -> None:
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the approval question was settled"},
        }
        try:
            self.pump.to_client.send_nowait(encode(notice))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.info("could not tell the client that elicitation %s is over", request_id)


def waterfall(elicitor: Elicitor, remote: AnswerFn | None) -> AnswerFn:
    """Elicitation racing *remote* (if any), then the chain's end. (The rules decided before
    any answerer: they are the session's.)"""
    return first_answer(elicitor.elicit, remote) if remote else elicitor.elicit
