"""A minimal agent loop: a prompt opens a turn; model steps and tool calls alternate until the
model stops, the caller aborts, or the step budget runs out.

Each model step receives the whole conversation, the runtime-context entries that changed since
the last step (``approval:policy``, ``sandbox:mode``, and for a delegated child
``approval:delegation``) and the notices queued for it (a policy switch). The session log gets
``user/message``, ``agent/message``, ``tool/call`` and ``tool/result`` around the approval pairs
(reference order: ``tool/call``, ``approval/asked``, ``approval/decided``, ``tool/result``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs
import trio

from .._broker import Broker
from .._context import APPROVAL_DELEGATION, APPROVAL_POLICY
from .._events import AgentMessage, Event, ToolCalled, ToolResulted, UserMessage
from .._session import Session
from .._signal import Signal, is_aborted
from ..tools import SANDBOX_MODE, BashTool, ToolCall, ToolResult, ToolRuntime, sandbox_context
from ._history import conversation_from_log
from ._model import ContextEntry, Message, Model, ModelRequest

__all__ = ["AgentLoop", "LoopObserver", "StopReason", "TurnResult"]


class StopReason(enum.StrEnum):
    """Why a prompt's turn ended (the ACP ``stopReason`` values we produce)."""

    END_TURN = "end_turn"
    CANCELLED = "cancelled"
    MAX_TURN_REQUESTS = "max_turn_requests"


@attrs.frozen(kw_only=True)
class TurnResult:
    """What one prompt produced."""

    turn: int
    stop_reason: StopReason
    steps: int


class LoopObserver:
    """Hooks for a front end (the ACP agent streams them as ``session/update``). No-ops here.

    Each is awaited in the loop's task; cancellation propagates into the loop.
    """

    async def on_agent_text(self, text: str) -> None:
        """The model produced *text*."""
        await trio.lowlevel.checkpoint()

    async def on_tool_call(self, call: ToolCall) -> None:
        """The model asked to run *call* (before any gate or approval)."""
        await trio.lowlevel.checkpoint()

    async def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """*call* finished with *result* (what the model will see)."""
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class AgentLoop:
    """Drives one session's agent: ``await loop.prompt("...")`` runs one turn.

    The tool runtime's approval service is looked up per call (``runtime.approval``), so a
    loop composed without one fails closed.
    """

    broker: Broker
    session: Session
    model: Model
    runtime: ToolRuntime
    max_steps: int = 32
    observer: LoopObserver = attrs.field(factory=LoopObserver)
    messages: list[Message] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(
                f"max_steps must be at least 1, got {self.max_steps}: allow at least one step"
            )

    def restore(self, events: Iterable[Event]) -> None:
        """Start the conversation from the session's log *events* (a loaded session).

        The model's next step then receives the earlier turns as they happened (see
        :func:`conversation_from_log`). Only a loop that has not prompted yet can be restored.
        """
        if self.messages:
            raise RuntimeError(
                "restore() needs a loop with an empty conversation: call it once, before the "
                "first prompt"
            )
        self.messages.extend(conversation_from_log(events))

    async def prompt(self, text: str, *, signal: Signal | None = None) -> TurnResult:
        """Run one turn for the user's *text*.

        Firing *signal* withdraws a pending approval question (it settles ``cancelled``) and
        stops the turn after the current tool call: the result's stop reason is ``cancelled``.

        Cancellation: the turn ends with reason kind ``cancelled`` (its ``turn/end`` and any
        pending question's ``approval/decided`` are still appended), then ``Cancelled``
        propagates.
        """
        agent = self.session.agent
        async with self.session.turn() as turn:
            await self.session.record(UserMessage(text=text))
            self.messages.append(Message(role="user", text=text))
            steps = 0
            stop = StopReason.MAX_TURN_REQUESTS
            while steps < self.max_steps:
                if is_aborted(signal):
                    stop = StopReason.CANCELLED
                    break
                request = await self._assemble()
                steps += 1
                response = await self.model.step(request)
                if response.text:
                    await self.session.record(AgentMessage(text=response.text))
                    await self.observer.on_agent_text(response.text)
                if response.text or response.tool_calls:
                    # Invariant: the conversation holds what the log can give back (an empty
                    # step logs nothing, so it is not a message: see restore()).
                    self.messages.append(
                        Message(
                            role="assistant",
                            text=response.text or "",
                            tool_calls=response.tool_calls,
                        )
                    )
                if not response.tool_calls:
                    stop = StopReason.END_TURN
                    break
                for index, call in enumerate(response.tool_calls):
                    await self.session.record(
                        ToolCalled(
                            call_id=call.id,
                            tool_name=call.name,
                            input=call.arguments,
                            same_step=index > 0,
                        )
                    )
                    await self.observer.on_tool_call(call)
                    result = await self.runtime.execute(call, agent=agent, signal=signal)
                    await self.session.record(
                        ToolResulted(
                            call_id=call.id,
                            output=result.output,
                            is_error=result.is_error,
                            failed=result.failed,
                        )
                    )
                    await self.observer.on_tool_result(call, result)
                    self.messages.append(
                        Message(
                            role="tool",
                            text=result.output,
                            call_id=call.id,
                            is_error=result.is_error,
                        )
                    )
                if is_aborted(signal):
                    stop = StopReason.CANCELLED
                    break
        return TurnResult(turn=turn, stop_reason=stop, steps=steps)

    async def _assemble(self) -> ModelRequest:
        """This step's input: context entries that changed, then queued notices."""
        agent = self.session.agent
        offers: list[tuple[str, str | None]] = [
            (APPROVAL_DELEGATION, self.broker.delegation_context_update(agent)),
            (APPROVAL_POLICY, self.broker.approval_context_update(agent)),
        ]
        bash = self.runtime.tool("bash")
        if isinstance(bash, BashTool):
            mode = bash.mode_for(self.session)
            offers.append((SANDBOX_MODE, agent.context.offer(SANDBOX_MODE, sandbox_context(mode))))
        entries = [ContextEntry(key=key, text=text) for key, text in offers if text is not None]
        for entry in entries:
            self.messages.append(Message(role="context", text=entry.text, source=entry.key))
        notices = agent.take_notices()
        for notice in notices:
            await self.session.record(UserMessage(text=notice.text, source=notice.source))
            self.messages.append(Message(role="user", text=notice.text, source=notice.source))
        await trio.lowlevel.checkpoint()
        return ModelRequest(
            messages=tuple(self.messages),
            context=tuple(entries),
            notices=tuple(notices),
            tools=tuple(self.runtime.specs()),
        )
