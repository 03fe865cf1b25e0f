"""The conversation of a session, rebuilt from its log, so a loaded session's model goes on.

Synopsis::

    events = await broker.store.read(session.id)
    loop.restore(events)        # loop.messages == conversation_from_log(events)

The loop logs what the model was given and what it said (``user/message``, ``agent/message``,
``tool/call``, ``tool/result``); this module folds those events back into the loop's
:class:`Message` list, in log order:

- ``user/message`` → a ``user`` message (a sourced notice keeps its ``source``);
- ``agent/message`` → an ``assistant`` message; the ``tool/call`` events right after it belong to
  it (a step with tool calls logs its text first; a text-only step ends the turn);
- ``tool/call`` → a tool call of the current step's ``assistant`` message (``sameStep``), or of
  a new one with no text; ``tool/result`` → a ``tool`` message;
- a turn that ended (or a log that stops) with a call unanswered → that call gets a ``tool``
  message saying it did not finish (:func:`unfinished_text`), so every call the model made has
  a result and the model is told the truth rather than nothing.

What is not logged is not rebuilt: the runtime-context entries (``role="context"``) of earlier
turns. A loaded session's agent starts with an empty runtime context, so the loop offers the
current entries again at its first step; the model sees them once more, after the history.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._events import AgentMessage, Event, ToolCalled, ToolResulted, TurnEnd, UserMessage
from ..tools import ToolCall
from ._model import Message

__all__ = ["conversation_from_log", "unfinished_text"]


def unfinished_text(turn_end: str | None) -> str:
    """What a call that never produced a result is shown as, by how its turn ended.

    *turn_end* is the turn's ``turn/end`` reason kind, or ``None`` when the log stops inside
    the turn. ``interrupted`` is recovery's mark of a broker that stopped (a crash, kill -9).
    """
    if turn_end == "interrupted":
        return (
            "interrupted: the broker stopped before this tool call finished; "
            "it may or may not have run"
        )
    if turn_end is None:
        return "not finished: the session log ends before this tool call produced a result"
    return f"not finished: the turn ended ({turn_end}) before this tool call produced a result"


@attrs.define(eq=False)
class _Rebuild:
    """The fold's state: the messages so far and the calls of the open turn still unanswered."""

    messages: list[Message] = attrs.field(factory=list)
    #: Index in ``messages`` of the current step's assistant message (None: no step open).
    step: int | None = None
    #: Calls asked for and not answered yet, in log order.
    open_calls: dict[str, None] = attrs.field(factory=dict)

    def user(self, event: UserMessage) -> None:
        self.step = None
        self.messages.append(Message(role="user", text=event.text, source=event.source))

    def agent(self, event: AgentMessage) -> None:
        self.messages.append(Message(role="assistant", text=event.text))
        self.step = len(self.messages) - 1

    def call(self, event: ToolCalled) -> None:
        call = ToolCall(id=event.call_id, name=event.tool_name, arguments=event.input)
        current = self.messages[self.step] if self.step is not None else None
        joins = current is not None and (event.same_step or not current.tool_calls)
        if current is not None and joins and self.step is not None:
            self.messages[self.step] = attrs.evolve(current, tool_calls=(*current.tool_calls, call))
        else:
            self.messages.append(Message(role="assistant", tool_calls=(call,)))
            self.step = len(self.messages) - 1
        self.open_calls[event.call_id] = None

    def result(self, event: ToolResulted) -> None:
        self.open_calls.pop(event.call_id, None)
        self.messages.append(
            Message(role="tool", text=event.output, call_id=event.call_id, is_error=event.is_error)
        )

    def close_turn(self, turn_end: str | None) -> None:
        for call_id in self.open_calls:
            text = f"Error: {unfinished_text(turn_end)}"
            self.messages.append(Message(role="tool", text=text, call_id=call_id, is_error=True))
        self.open_calls.clear()
        self.step = None


def conversation_from_log(events: Iterable[Event]) -> list[Message]:
    """The loop's conversation as the log *events* of one session record it (see module doc)."""
    fold = _Rebuild()
    for event in events:
        if isinstance(event, UserMessage):
            fold.user(event)
        elif isinstance(event, AgentMessage):
            fold.agent(event)
        elif isinstance(event, ToolCalled):
            fold.call(event)
        elif isinstance(event, ToolResulted):
            fold.result(event)
        elif isinstance(event, TurnEnd):
            fold.close_turn(event.reason.kind)
    fold.close_turn(None)
    return fold.messages
