"""What ``session/load`` shows: a session's log replayed as ``session/update`` notifications.

Synopsis::

    for update in replay(await broker.store.read(session_id)):
        await connection.notify("session/update", ...)

The replay is a pure function of the log, so two loads of one session send the same bytes.
In log order:

- a user's prompt → ``user_message_chunk`` (sourced notices were for the model: not shown);
- the model's text → ``agent_message_chunk``;
- ``tool/call`` → ``tool_call`` (``pending``), as it was shown live;
- a permission question about a call, once decided → a ``tool_call_update`` of that call whose
  content says what was asked and how it was answered (ACP has no replayable permission
  request; the call's content is where a client shows it);
- ``tool/result`` → the call's final ``tool_call_update``: ``failed`` when the result was an
  error or the command failed, else ``completed``, with the output;
- a turn that ended (or a log that stops) with a call unanswered → that call's
  ``tool_call_update`` ``failed``, saying why it did not finish (recovery marks a crash
  ``interrupted``). So every replayed call ends in a terminal status.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import attrs

from .._events import (
    AgentMessage,
    ApprovalAsked,
    ApprovalDecided,
    Event,
    ToolCalled,
    ToolResulted,
    TurnEnd,
    UserMessage,
)
from .._vocabulary import Outcome
from ..agent import unfinished_text
from ..tools import ToolCall as RuntimeToolCall
from ._answerer import describe_tool_call
from ._wire import (
    AgentMessageChunk,
    SessionUpdate,
    TextContent,
    ToolCall,
    ToolCallContentBlock,
    ToolCallStatus,
    ToolCallUpdate,
    UserMessageChunk,
)

__all__ = ["replay", "tool_call_finished", "tool_call_started"]

_ANSWERS = {
    Outcome.ALLOWED_ONCE: "allowed once",
    Outcome.REJECTED: "rejected",
    Outcome.CANCELLED: "cancelled",
    Outcome.UNAVAILABLE: "unavailable (no answer)",
}


def tool_call_started(call: RuntimeToolCall) -> ToolCall:
    """The ``tool_call`` update announcing *call* (live and on replay)."""
    title, kind = describe_tool_call(call)
    return ToolCall(
        tool_call_id=call.id,
        title=title,
        kind=kind,
        status=ToolCallStatus.PENDING,
        raw_input=call.arguments,
    )


def tool_call_finished(call_id: str, output: str, failed: bool) -> ToolCallUpdate:
    """The final ``tool_call_update`` of a call: ``failed`` or ``completed``, with *output*."""
    return ToolCallUpdate(
        tool_call_id=call_id,
        status=ToolCallStatus.FAILED if failed else ToolCallStatus.COMPLETED,
        content=(_text(output),),
    )


def _text(text: str) -> ToolCallContentBlock:
    return ToolCallContentBlock(content=TextContent(text=text))


def _permission_text(asked: ApprovalAsked, decided: ApprovalDecided) -> str:
    answer = _ANSWERS[decided.outcome]
    how = []
    if decided.remembered:
        how.append("by a remembered grant")
    if decided.policy is not None:
        how.append(f"by the {decided.policy} policy")
    if decided.recovered:
        how.append("when the session was recovered")
    if decided.answered_by is not None:
        how.append(f"by {decided.answered_by}")
    reason = f": {asked.reason}" if asked.reason else ""
    suffix = f" ({', '.join(how)})" if how else ""
    return f"Permission asked{reason}\nAnswer: {answer}{suffix}"


@attrs.define(eq=False)
class _Replay:
    """The fold's state: the calls of the open turn not yet finished, the questions asked."""

    open_calls: dict[str, None] = attrs.field(factory=dict)
    asked: dict[str, ApprovalAsked] = attrs.field(factory=dict)

    def updates(self, event: Event) -> Iterator[SessionUpdate]:
        if isinstance(event, UserMessage):
            if event.source is None:
                yield UserMessageChunk(content=TextContent(text=event.text))
        elif isinstance(event, AgentMessage):
            yield AgentMessageChunk(content=TextContent(text=event.text))
        elif isinstance(event, ToolCalled):
            self.open_calls[event.call_id] = None
            call = RuntimeToolCall(id=event.call_id, name=event.tool_name, arguments=event.input)
            yield tool_call_started(call)
        elif isinstance(event, ApprovalAsked):
            if event.call_id is not None and event.call_id in self.open_calls:
                self.asked[event.id] = event
        elif isinstance(event, ApprovalDecided):
            asked = self.asked.pop(event.id, None)
            if asked is not None and asked.call_id is not None:
                content = (_text(_permission_text(asked, event)),)
                yield ToolCallUpdate(tool_call_id=asked.call_id, content=content)
        elif isinstance(event, ToolResulted):
            self.open_calls.pop(event.call_id, None)
            yield tool_call_finished(event.call_id, event.output, event.is_error or event.failed)
        elif isinstance(event, TurnEnd):
            yield from self.close_turn(event.reason.kind)

    def close_turn(self, turn_end: str | None) -> Iterator[SessionUpdate]:
        for call_id in self.open_calls:
            yield tool_call_finished(call_id, unfinished_text(turn_end), True)
        self.open_calls.clear()
        self.asked.clear()


def replay(events: Iterable[Event]) -> Iterator[SessionUpdate]:
    """The ``session/update`` payloads that show *events* again, in log order (module doc)."""
    fold = _Replay()
    for event in events:
        yield from fold.updates(event)
    yield from fold.close_turn(None)
