"""Answerers and the waterfall that consults them (contract §4).

An answerer is ``async def answer(req, next) -> Outcome`` (or an :class:`Answer` naming who
answered): it claims the single decision by
returning an outcome, or delegates with ``return await next()``. The end of the chain is
``unavailable``, so zero answerers fail closed without configuration.

Containment (house rule 8): an answerer that raises an :class:`Exception` or returns a value
outside the vocabulary yields ``unavailable``; one whose registration ends while it is answering
withdraws the question, which then fails closed as ``unavailable``. ``trio.Cancelled`` and
other ``BaseException`` s propagate.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from ._decision import Answer
from ._flight import Flight, Withdrawal

# At run time, not only for the checker: the AnswerFn alias below names it, and the API
# reference (``make docs``) resolves the alias where it is used.
from ._request import ApprovalRequest, may_answer
from ._vocabulary import Outcome, Source
from ._waterfall import run_chain

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["AnswerFn", "AnswerNext", "AnswererHandle", "run_waterfall"]

log = logging.getLogger("broker.answerers")

AnswerNext: TypeAlias = Callable[[], Awaitable[Outcome]]
AnswerFn: TypeAlias = Callable[[ApprovalRequest, AnswerNext], Awaitable[Outcome | Answer]]

_VOCABULARY = frozenset(o.value for o in Outcome)


@attrs.define(eq=False, repr=False)
class AnswererHandle:
    """One registered answerer; it answers until :meth:`close` (its holder's lifetime ends).

    Closing is synchronous and final: the handle leaves the chain at once, so the *next* ask
    does not see it, and any question it is answering right now is cancelled and counts as
    ``unavailable`` for that request.
    """

    fn: AnswerFn
    scope: Agent | None
    order: int
    _registry: list[AnswererHandle]
    _inflight: set[Flight] = attrs.field(factory=set, init=False)
    _closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    # What the log calls it, worked out once (read by every question it answers).
    _name: str | None = attrs.field(default=None, init=False)

    @property
    def name(self) -> str:
        """What the log calls this answerer (``answerer`` of ``approval/decided``): the
        ``answerer_name`` attribute of the function (or of the object whose method it is)
        when it has one (``"acp"``, ``"board"``...), else its qualified name."""
        if self._name is None:
            self._name = _name_of(self.fn)
        return self._name

    def __repr__(self) -> str:
        name = self.name
        where = "unscoped" if self.scope is None else f"scoped to {self.scope!r}"
        state = "closed" if self.closed else "open"
        return f"<AnswererHandle {name} {where} {state}>"

    @property
    def closed(self) -> bool:
        """Whether this answerer has left the chain."""
        return self._closed.is_set()

    def close(self, reason: str = "answerer closed") -> None:
        """Leave the chain and withdraw the questions this answerer is working on. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        index = bisect.bisect_left(self._registry, self.order, key=_order)
        if index < len(self._registry) and self._registry[index] is self:
            del self._registry[index]
        for flight in list(self._inflight):
            flight.withdraw(Withdrawal.ANSWERER_LOST, reason)

    async def wait_closed(self) -> None:
        """Wait until :meth:`close` has been called. Cancellation: just stops waiting."""
        await self._closed.wait()

    # Checkpoints: request() always checkpoints on its audit appends; one more here would
    # cost a scheduling pass per question, so an answerer that never yields is not forced to.
    async def invoke(  # noqa: ASYNC910
        self, req: ApprovalRequest, next_: AnswerNext, flight: Flight
    ) -> Outcome:
        """Ask this answerer, containing its failures as ``unavailable``.

        While the answerer works, closing this handle withdraws *flight* (cause
        ``ANSWERER_LOST``), so the whole question fails closed — a gate that delegated to it
        cannot turn its loss into an allow. Cancellation: propagates. Does not checkpoint
        unless the answerer does.
        """
        if self._closed.is_set():  # self.closed, without the property's call
            await trio.lowlevel.checkpoint()
            return Outcome.UNAVAILABLE
        self._inflight.add(flight)
        before = flight.decider
        try:
            if may_answer(self.fn):
                result: object = await self.fn(req, next_)
            else:  # a question named approvers; this answerer cannot tell who answers
                result = await next_()
        except Exception:
            log.warning("answerer %r failed; the question fails closed", self, exc_info=True)
            flight.decider = (self.name, Outcome.UNAVAILABLE, Source.ANSWERER_FAILED)
            return Outcome.UNAVAILABLE  # noqa: ASYNC910 (see above)
        finally:
            self._inflight.discard(flight)
        source = Source.ANSWERER
        if isinstance(result, Answer):
            if result.by is not None or result.message is not None or result.answers is not None:
                flight.answered = (result.outcome, result.by, result.message, result.answers)
            if result.expired:
                source = Source.DEADLINE
            outcome = result.outcome
        else:
            outcome = _normalise(result, self)
            if not isinstance(result, Outcome) and not (
                type(result) is str and result in _VOCABULARY
            ):
                source = Source.ANSWERER_FAILED  # outside the vocabulary: contained
        decider = flight.decider
        # Invariant: the innermost answerer that produced this outcome is the decider; an
        # outer one that returns what next() handed it leaves it, one that overrides it
        # takes its place.
        if decider is before or decider is None or decider[1] is not outcome:
            flight.decider = (self.name, outcome, source)
        return outcome


def _name_of(fn: AnswerFn) -> str:
    # On the function, or on the object whose bound method it is.
    for holder in (fn, getattr(fn, "__self__", None)):
        named = getattr(holder, "answerer_name", None)
        if isinstance(named, str):
            return named
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _order(handle: AnswererHandle) -> int:
    return handle.order


def _normalise(result: object, handle: AnswererHandle) -> Outcome:
    if isinstance(result, Outcome):
        return result
    if type(result) is str and result in _VOCABULARY:
        return Outcome(result)
    log.warning("answerer %r returned %r, outside the vocabulary; failing closed", handle, result)
    return Outcome.UNAVAILABLE


def insert_handle(registry: list[AnswererHandle], handle: AnswererHandle) -> None:
    """Insert *handle* into *registry*, kept sorted by ``order``."""
    bisect.insort(registry, handle, key=_order)


def run_waterfall(
    req: ApprovalRequest, chain: Sequence[AnswererHandle], flight: Flight
) -> Awaitable[Outcome]:
    """Consult *chain* in order; the first answer wins, the end of the chain is ``unavailable``.

    The shared waterfall (:func:`broker._waterfall.run_chain`): ``next()`` may be awaited more
    than once, the rest of the chain is consulted only the first time. Cancellation: propagates
    (the request's cancel scope decides what it means).
    """

    def end() -> Outcome:
        flight.decider = _END_OF_CHAIN
        return Outcome.UNAVAILABLE

    return run_chain(chain, lambda handle, next_: handle.invoke(req, next_, flight), end)


_END_OF_CHAIN = (None, Outcome.UNAVAILABLE, Source.NO_ANSWERER)
