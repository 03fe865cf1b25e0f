"""The question put to the broker: :class:`ApprovalRequest` (contract §1)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from ._arguments import freeze_arguments
from ._signal import AbortSignal, Signal
from ._vocabulary import Outcome

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["ASKING", "ApprovalRequest", "Asking", "SettledHook", "current_question", "may_answer"]

log = logging.getLogger("broker.request")

#: The question whose answerers run in this context. Answerers run in the asking task
#: (decision 0001), so this is theirs to read.
#: The request algorithm sets it around the waterfall, in the asking task
#: (``token = ASKING.set(question)`` … ``ASKING.reset(token)``); nothing else writes it.
ASKING: ContextVar[Asking | None] = ContextVar("broker_asking", default=None)

SettledHook: TypeAlias = Callable[[Outcome], Awaitable[None]]


@attrs.define(eq=False)
class Asking:
    """One question while its waterfall runs: the request, the question's id, and what must
    run once its ``approval/decided`` is durable (``hooks``, e.g. a remote answerer retiring
    the question from its board)."""

    request: ApprovalRequest
    id: str
    hooks: list[SettledHook] = attrs.field(factory=list)
    #: Who alone may answer it (an ask rule's ``approvers``); empty: anyone. Answerers that
    #: cannot tell who answers (``identifies_people`` false) delegate such a question.
    approvers: tuple[str, ...] = ()
    #: How many different approvers must allow it (an ask rule's ``quorum``); 1: the first
    #: answer decides.
    quorum: int = 1

    async def settled(self, outcome: Outcome) -> None:
        """Run the hooks with the question's final *outcome*, each once, in order.

        A hook that raises is logged and skipped (the decision is already durable).
        Cancellation: the caller runs this shielded and bounded; an unfinished hook is
        abandoned.
        """
        await trio.lowlevel.checkpoint()
        hooks, self.hooks = self.hooks, []
        for hook in hooks:
            try:
                await hook(outcome)
            except Exception:
                log.warning("a settled hook of question %s failed", self.id, exc_info=True)


def may_answer(fn: object) -> bool:
    """Whether the answerer *fn* may answer the question being asked now: any may, unless the
    question names its approvers — then only answerers that can tell who answers
    (``identifies_people``, as the board's remote answerer) take part; the rest delegate."""
    question = ASKING.get()
    return question is None or not question.approvers or getattr(fn, "identifies_people", False)


def current_question() -> Asking | None:
    """The question whose answerers run in this task's context, if any."""
    return ASKING.get()


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

    ``arguments`` (Beyond; optional) are the exact input the tool will run with: rules on
    arguments read them, the decision carries their digest (``approval/asked`` records it as
    ``argumentsDigest``) and :meth:`Decision.covers` checks, right before running, that what
    runs is what was decided. The request keeps a read-only deep copy. ``reason`` is logged in
    ``approval/asked``;
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
    arguments: Mapping[str, Any] | None = attrs.field(default=None)
    #: ``sha256:<hex>`` of ``arguments`` (``None`` without them).
    arguments_digest: str | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.arguments is not None:
            frozen, digest = freeze_arguments(self.arguments)
            object.__setattr__(self, "arguments", frozen)
            object.__setattr__(self, "arguments_digest", digest)

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
        current = ASKING.get()
        return current.id if current is not None and current.request is self else None
