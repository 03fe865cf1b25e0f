"""Several answerers asked at once; the first real answer wins (:func:`first_answer`).

Synopsis::

    # The editor and a person at another terminal both see the question; whoever answers
    # first decides, and the other is withdrawn (the editor gets $/cancel_request).
    await session.start_answerer(first_answer(acp_answerer, broker.remote_answerer()))

The waterfall (contract §4) consults answerers one after another; this combinator puts several in
one step and runs them concurrently in a nursery of the asking task. Each gets a ``next`` of
its own: a participant that delegates, or answers ``unavailable`` (its channel is gone), drops
out of the race — it cannot answer, so it must not decide for the others. The first
participant to return any other outcome (or an :class:`~broker.Answer`) wins and the rest are
cancelled. When every participant dropped out, the step delegates to the rest of the chain
(``next()``), which ends in ``unavailable``: nothing is allowed that no one allowed.

Containment: a participant that raises an :class:`Exception` drops out (logged), like one that
answers ``unavailable``. Cancellation: cancels every participant; propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ._decision import Answer
from ._request import may_answer
from ._vocabulary import Outcome

if TYPE_CHECKING:
    from ._answerers import AnswerFn, AnswerNext
    from ._request import ApprovalRequest

__all__ = ["first_answer"]

log = logging.getLogger("broker.answerers")


def first_answer(*answerers: AnswerFn) -> AnswerFn:
    """One answerer that asks all *answerers* concurrently; the first real answer wins."""
    if not answerers:
        raise ValueError("first_answer needs at least one answerer: pass the answerers to race")
    participants: Sequence[AnswerFn] = tuple(answerers)

    async def answer(req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        won: list[Outcome | Answer] = []
        dropped = 0
        everyone_dropped = trio.Event()

        def drop() -> None:
            nonlocal dropped
            dropped += 1
            if dropped == len(participants):
                everyone_dropped.set()

        async def delegate() -> Outcome:
            drop()
            await trio.sleep_forever()
            raise AssertionError("unreachable")  # pragma: no cover

        async def run(fn: AnswerFn, nursery: trio.Nursery) -> None:
            # A participant that answers without yielding still lets the others start.
            await trio.lowlevel.checkpoint()
            if not may_answer(fn):
                await delegate()  # it cannot tell who answers: out of this question's race
            try:
                result = await fn(req, delegate)
            except Exception:
                log.warning("answerer %r failed; it drops out of the race", fn, exc_info=True)
                drop()
                return
            outcome = result.outcome if isinstance(result, Answer) else result
            if outcome == Outcome.UNAVAILABLE or outcome not in set(Outcome):
                drop()
                return
            won.append(result)
            nursery.cancel_scope.cancel(reason="another answerer answered first")

        async with trio.open_nursery() as nursery:
            for fn in participants:
                nursery.start_soon(run, fn, nursery)
            await everyone_dropped.wait()
            nursery.cancel_scope.cancel(reason="every answerer dropped out")
        if won:
            return won[0]
        return await next_()

    # It can tell who answers if one of its participants can (only those take part, then).
    answer.identifies_people = any(  # type: ignore[attr-defined]
        getattr(fn, "identifies_people", False) for fn in participants
    )
    return answer
