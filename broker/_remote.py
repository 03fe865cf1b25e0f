"""The remote-answer answerer: questions answered from another task, process or host.

Synopsis::

    async with open_broker(store="sqlite:///var/lib/agent/log.sqlite") as broker:
        async with broker.answerer(broker.remote_answerer()):
            ...   # questions wait on the store's answer board until someone answers:
                  #   $ broker answer /var/lib/agent/log.sqlite QUESTION_ID allow --by alice

It sits in the waterfall like any other answerer (usually last, as the terminal one). For
each question it is consulted on it puts the question on the board (:mod:`broker.store.board`) with
what a person needs to decide — tool, call id, reason, display reason, session, agent, owner —
and waits for the first answer given there, which it returns as ``Answer(outcome, by=...)``
(so ``approval/decided`` records ``answeredBy``). The question's flight decides as for any
answerer: the first answer wins, and a withdrawn question (abort, ``session/cancel``, the
caller's cancellation, this answerer's registration ending) drops a late one. Once the
question's ``approval/decided`` is durable, whatever decided it, the board records the outcome,
so a later answer is refused naming it.

A question asked with a ``deadline`` (seconds) that nobody answers in time resolves
``unavailable`` (fail closed) and is retired as such.

With a ``grant`` (``broker.remote_answerer(allow_always=True)``) the question offers "always
allow": such an answer first remembers the tool on the asking session (``approval/grant``,
contract §6), then answers ``allowed-once``. Without one, an always-allow answer is refused by the
board, so nothing promises what the asker cannot honour.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import attrs
import trio

from ._answerers import AnswerNext
from ._decision import Answer
from ._grants import always_offer
from ._request import ApprovalRequest, current_question
from ._vocabulary import Outcome
from .store import SHOWN_ARGUMENTS, AnswerBoard, PendingQuestion, RemoteAnswer, StoreError

__all__ = ["RemoteAnswerer", "process_owner"]

log = logging.getLogger("broker.answerers")


def shown_arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """*arguments* as the board shows them: a plain JSON object of at most
    :data:`~broker.store.SHOWN_ARGUMENTS` bytes, else None."""
    if arguments is None:
        return None
    try:
        text = json.dumps(arguments, ensure_ascii=False, default=_frozen)
    except (TypeError, ValueError):
        return None
    if len(text.encode("utf-8", "surrogatepass")) > SHOWN_ARGUMENTS:
        return None
    shown: dict[str, Any] = json.loads(text)
    return shown


def _frozen(value: object) -> object:
    # Frozen arguments (broker._arguments) hold tuples and mapping proxies: JSON's lists and
    # objects.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(type(value).__name__)


def process_owner() -> str:
    """This process as the board names an owner: ``pid@host``."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _check_deadline(_inst: object, _attr: object, value: float | None) -> None:
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not (0 < value < math.inf):
        raise ValueError(
            f"deadline must be a positive, finite number of seconds or None, got {value!r}: "
            "pass how long a question may wait for an answer from elsewhere"
        )


@attrs.define(eq=False)
class RemoteAnswerer:
    """An answerer that waits for an answer given on *board* (module doc).

    A request without a question id (not asked through a broker session) is delegated with
    ``next()``. Cancellation: the wait ends; the question is retired with the outcome the
    session records.
    """

    board: AnswerBoard
    owner: str = attrs.field(factory=process_owner)
    deadline: float | None = attrs.field(default=None, validator=_check_deadline)
    #: Remembers "always allow" for a request (given the answer: who, for how long, in which
    #: scope), when offered.
    grant: Callable[[ApprovalRequest, RemoteAnswer], Awaitable[object]] | None = None
    #: The project rules file "always, for the project" appends to (None: not offered).
    project_rules: str | None = None

    #: What the log calls it (``answerer`` of ``approval/decided``).
    answerer_name: ClassVar[str] = "board"
    #: It can tell who answers (a person's token, an OS user): it takes part in questions that
    #: name their approvers, and shows them only to those (:func:`broker._request.may_answer`).
    identifies_people: ClassVar[bool] = True

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        question = current_question()
        if question is None or question.request is not req:
            return await next_()
        now_ms = time.time_ns() // 1_000_000
        deadline_ms = now_ms + int(self.deadline * 1000) if self.deadline is not None else None
        session = req.agent.session
        offer = always_offer(req) if self.grant is not None else None
        pending = PendingQuestion(
            id=question.id,
            session_id=session.id,
            agent=req.agent.label or f"agent of session {session.id}",
            tool_name=req.tool_name,
            call_id=req.call_id,
            reason=req.reason,
            display_reason=req.display_reason,
            asked_at_ms=now_ms,
            owner=self.owner,
            deadline_ms=deadline_ms,
            offers_always=offer is not None,
            always_rule=offer,
            project_rules=self.project_rules if offer is not None else None,
            arguments=shown_arguments(req.arguments),
            approvers=question.approvers,
            quorum=question.quorum,
        )
        # Registered before publishing: whatever happens from here, the board learns the end.
        question.hooks.append(lambda outcome: self.board.retire(question.id, outcome))
        # Its decided is not sequenced yet: it will follow every event sequenced so far.
        await self.board.publish(pending, after_seq=session.state.events)
        with trio.move_on_after(self.deadline if self.deadline is not None else math.inf):
            answer = await self.board.wait_answer(question.id)
            if answer.always and self.grant is not None:
                await self.grant(req, answer)  # remembered before the allow is recorded
            return Answer(
                outcome=answer.outcome,
                by=answer.by,
                message=answer.message,
                answers=await self._answers(question.id),
            )
        # The deadline, not a "no" (approvals short of a quorum, refusals: recorded with it).
        return Answer(
            outcome=Outcome.UNAVAILABLE, expired=True, answers=await self._answers(question.id)
        )

    async def _answers(self, question_id: str) -> str | None:
        """Every answer given to the question on the board, as ``approval/decided`` records
        them (None: none, or the board cannot be read now). Cancellation: the read is
        abandoned; the decision is recorded without them."""
        try:
            given = await self.board.given(question_id)
        except StoreError:
            # The answer is in hand: record the decision without the list rather than lose it.
            log.warning("the answers given to question %s could not be read", question_id)
            await trio.lowlevel.checkpoint()
            return None
        return "; ".join(g.describe() for g in given) or None
