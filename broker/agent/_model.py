"""The model protocol: what a model step receives and returns.

A real model client (an HTTP API) implements :class:`Model`; the scripted model replays a
scenario. The loop owns the conversation; a model step gets all of it, plus what changed in
the runtime context and the notices queued for this step.
"""

from __future__ import annotations

from typing import Literal, Protocol

import attrs

from .._agent import Notice
from ..tools import ToolCall, ToolSpec

__all__ = ["ContextEntry", "Message", "Model", "ModelRequest", "ModelResponse"]


@attrs.frozen(kw_only=True)
class ContextEntry:
    """One runtime-context contribution, e.g. ``approval:policy`` or ``sandbox:mode``."""

    key: str
    text: str


@attrs.frozen(kw_only=True)
class Message:
    """One conversation entry.

    ``role`` is ``user`` (a prompt, or a sourced notice with ``source``), ``assistant`` (text and
    tool calls), ``tool`` (a result for ``call_id``) or ``context`` (a runtime-context entry,
    ``source`` is its key).
    """

    role: Literal["user", "assistant", "tool", "context"]
    text: str = ""
    source: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str | None = None
    is_error: bool = False


@attrs.frozen(kw_only=True)
class ModelRequest:
    """The input of one model step."""

    messages: tuple[Message, ...]
    context: tuple[ContextEntry, ...]
    notices: tuple[Notice, ...]
    tools: tuple[ToolSpec, ...]


@attrs.frozen(kw_only=True)
class ModelResponse:
    """The output of one model step; no tool calls ends the turn."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class Model(Protocol):
    """A model: one step at a time."""

    async def step(self, request: ModelRequest) -> ModelResponse:
        """Produce the next message. Cancellation: the step is abandoned."""
        ...
