"""The question put to the broker: :class:`ApprovalRequest` (spec section 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._signal import AbortSignal, Signal

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["ApprovalRequest"]


def _check_tool_name(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"tool_name must be a non-empty string, got {value!r}: "
            "name the tool that needs approval"
        )


def _check_optional_str(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{attr.name} must be a string or None, got {type(value).__name__}")


def _check_signal(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and not isinstance(value, AbortSignal | trio.Event):
        raise TypeError(
            f"signal must be an AbortSignal, a trio.Event or None, got {type(value).__name__}: "
            "pass broker.AbortSignal() to be able to withdraw the question"
        )


@attrs.frozen(kw_only=True, eq=False)
class ApprovalRequest:
    """May *agent* run *tool_name* (this one call) now?

    The request carries no tool arguments. ``reason`` is logged in ``approval/asked``;
    ``display_reason`` is handed to answerers for presentation only and never logged. Firing
    ``signal`` withdraws the question: the request settles ``cancelled``. Answerers receive this
    very object and must not mutate it (it is frozen). Equality is identity.
    """

    agent: Agent
    tool_name: str = attrs.field(validator=_check_tool_name)
    call_id: str | None = attrs.field(default=None, validator=_check_optional_str)
    reason: str | None = attrs.field(default=None, validator=_check_optional_str)
    display_reason: str | None = attrs.field(default=None, validator=_check_optional_str)
    signal: Signal | None = attrs.field(default=None, validator=_check_signal)
