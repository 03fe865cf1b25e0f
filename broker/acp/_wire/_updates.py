"""ACP ``session/update``: the notification and its variants (message chunks, tool calls)."""

from __future__ import annotations

import enum
from typing import Any, TypeAlias

import attrs

from ._content import ContentBlock, ToolCallContent, ToolCallLocation
from ._converter import Seq, Str, wire, wire_union

__all__ = [
    "AgentMessageChunk",
    "SessionNotification",
    "SessionUpdate",
    "ToolCall",
    "ToolCallStatus",
    "ToolCallUpdate",
    "ToolKind",
    "UserMessageChunk",
]


class ToolKind(enum.StrEnum):
    """What a tool call does, for the client's icons (schema ``ToolKind``)."""

    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    THINK = "think"
    FETCH = "fetch"
    SWITCH_MODE = "switch_mode"
    OTHER = "other"


class ToolCallStatus(enum.StrEnum):
    """Schema ``ToolCallStatus``."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


@wire(tag="user_message_chunk")
@attrs.frozen(kw_only=True)
class UserMessageChunk:
    """Update ``user_message_chunk``: a piece of the user's prompt (replayed by session/load)."""

    content: ContentBlock
    message_id: Str | None = None


@wire(tag="agent_message_chunk")
@attrs.frozen(kw_only=True)
class AgentMessageChunk:
    """Update ``agent_message_chunk``: a piece of the agent's reply."""

    content: ContentBlock
    message_id: Str | None = None


@wire(tag="tool_call")
@attrs.frozen(kw_only=True)
class ToolCall:
    """Update ``tool_call``: a new tool call. Unset fields are omitted on the wire."""

    tool_call_id: Str
    title: Str
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    content: Seq[ToolCallContent] = ()
    locations: Seq[ToolCallLocation] = ()
    raw_input: Any = None
    raw_output: Any = None


@wire(tag="tool_call_update")
@attrs.frozen(kw_only=True)
class ToolCallUpdate:
    """Update ``tool_call_update``, and the ``toolCall`` of a permission request.

    Only *tool_call_id* is required; a field left None is "unchanged" and omitted, while
    ``content=()`` sends an empty list (it clears the content).
    """

    tool_call_id: Str
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    title: Str | None = None
    content: Seq[ToolCallContent] | None = None
    locations: Seq[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


SessionUpdate: TypeAlias = UserMessageChunk | AgentMessageChunk | ToolCall | ToolCallUpdate
wire_union(SessionUpdate, "session update", "sessionUpdate")


@wire()
@attrs.frozen(kw_only=True)
class SessionNotification:
    """Params of the ``session/update`` notification."""

    session_id: Str
    update: SessionUpdate
