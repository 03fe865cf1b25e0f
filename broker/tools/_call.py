"""One tool call, the context it runs in, and what it produces."""

from __future__ import annotations

from typing import Any

import attrs

from .._agent import Agent
from .._broker import Broker
from .._signal import Signal, is_aborted

__all__ = ["CallContext", "ToolCall", "ToolResult", "ToolSpec"]


@attrs.frozen(kw_only=True)
class ToolCall:
    """The model's request to run ``name`` with ``arguments`` (already JSON-decoded)."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ToolResult:
    """What the model is told. Denials are errors shown as ``Error: <text>``.

    ``failed`` marks a call that ran but did not succeed (a command's non-zero exit, a time
    limit); its output is shown as is. A front end shows either as a failed call.
    """

    output: str
    is_error: bool = False
    failed: bool = False

    @classmethod
    def error(cls, text: str) -> ToolResult:
        """A failed call: the model sees ``Error: <text>``."""
        return cls(output=f"Error: {text}", is_error=True)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """How a tool is advertised to the model: name, description, JSON Schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]


@attrs.frozen(kw_only=True)
class CallContext:
    """Who is calling and through what. ``approval`` is the service looked up for this call."""

    agent: Agent | None
    approval: Broker | None
    signal: Signal | None = None

    @property
    def aborted(self) -> bool:
        """Whether the caller has aborted this call."""
        return is_aborted(self.signal)
