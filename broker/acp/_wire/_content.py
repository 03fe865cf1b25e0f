"""ACP content: the blocks of a prompt or a message, and what a tool call shows and touches."""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ._converter import Int, Object, Str, wire, wire_union

__all__ = [
    "ContentBlock",
    "ResourceLink",
    "TextContent",
    "ToolCallContent",
    "ToolCallContentBlock",
    "ToolCallDiff",
    "ToolCallLocation",
    "ToolCallTerminal",
]


@wire(tag="text")
@attrs.frozen(kw_only=True)
class TextContent:
    """Content block ``{"type": "text", "text"}``. *annotations* is kept as opaque JSON."""

    text: Str
    annotations: Object | None = None


@wire(tag="resource_link")
@attrs.frozen(kw_only=True)
class ResourceLink:
    """Content block ``{"type": "resource_link", "uri", "name", ...}`` (every agent takes it)."""

    uri: Str
    name: Str
    title: Str | None = None
    description: Str | None = None
    mime_type: Str | None = None
    size: Int | None = None
    annotations: Object | None = None


ContentBlock: TypeAlias = TextContent | ResourceLink
wire_union(ContentBlock, "content block", "type")


@wire(tag="content")
@attrs.frozen(kw_only=True)
class ToolCallContentBlock:
    """Tool call content ``{"type": "content", "content": <content block>}``."""

    content: ContentBlock


@wire(tag="diff")
@attrs.frozen(kw_only=True)
class ToolCallDiff:
    """Tool call content ``{"type": "diff", "path", "oldText"?, "newText"}``."""

    path: Str
    new_text: Str
    old_text: Str | None = None


@wire(tag="terminal")
@attrs.frozen(kw_only=True)
class ToolCallTerminal:
    """Tool call content ``{"type": "terminal", "terminalId"}``."""

    terminal_id: Str


ToolCallContent: TypeAlias = ToolCallContentBlock | ToolCallDiff | ToolCallTerminal
wire_union(ToolCallContent, "tool call content", "type")


@wire()
@attrs.frozen(kw_only=True)
class ToolCallLocation:
    """A file (and line) a tool call touches."""

    path: Str
    line: Int | None = None
