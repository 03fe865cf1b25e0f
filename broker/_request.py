"""The question put to the broker: :class:`ApprovalRequest` (spec section 1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._signal import AbortSignal, Signal

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["ApprovalRequest", "asking"]

#: The request whose answerers run in this context, and the id of the question it was put as.
#: Answerers run in the asking task (decision 0001), so this is theirs to read.
_ASKING: ContextVar[tuple[ApprovalRequest, str] | None] = ContextVar("broker_asking", default=None)


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

    @property
    def question_id(self) -> str | None:
        """The id of the question this request was put as — the ``id`` of its
        ``approval/asked`` and ``approval/decided`` — while its answerers are consulted.

        An answerer (local or remote) names the question it answers by it. It is read from
        the asking task's context: tasks the answerer starts in a nursery of its own inherit
        it; it is ``None`` before the question is put, after it settles, and in tasks that
        were started elsewhere (hand them the id). One request object asked twice at once,
        from two tasks, shows each answerer its own question's id.
        """
        current = _ASKING.get()
        return current[1] if current is not None and current[0] is self else None


@contextlib.contextmanager
def asking(req: ApprovalRequest, question_id: str) -> Iterator[None]:
    """While the block runs (the waterfall, in the asking task), ``req.question_id`` is
    *question_id*."""
    token = _ASKING.set((req, question_id))
    try:
        yield
    finally:
        _ASKING.reset(token)
