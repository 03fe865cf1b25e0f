"""Giving an answer as a person: who may, how many must, and the record of every attempt.

Synopsis::

    given = await answer_question(board, question_id, Outcome.ALLOWED_ONCE, "alice",
                                  how="token")
    given.decided      # None: "1 of 2 approvals, by alice" (given.progress()); else the answer

Every way of answering from elsewhere (``broker answer``, the inbox, ``Broker.answer``) comes
here, so the rules hold the same everywhere:

- **Approvers.** A question that names its approvers (a rule's ``approvers``) is answered only
  by them, identified (:data:`IDENTIFYING`: a token, an inbox session, the OS user, the
  program itself; never a typed name): a person by name or by one of their groups (read from
  the board's people), an OS user as ``uid:NAME``. Anyone else is refused
  (:class:`NotAnApproverError`), and the attempt is recorded (:meth:`AnswerBoard.give`)
  without deciding anything.
- **Quorum.** A question whose rule says ``quorum = N`` is allowed once N different approvers
  have allowed it; each allow before that is recorded and counted; one reject rejects it at
  once. The same person allowing twice counts once (the second is refused and recorded).
  The answer that completes the quorum is given with :meth:`AnswerBoard.answer`, whose first
  answer wins atomically, so two approvers completing it at once decide it once.
- **The record.** Every answer given — the deciding one, each counted approval, each refused
  attempt — is recorded with who gave it and how they were authenticated; the asker puts them
  in ``approval/decided`` (``answers``), so ``broker log show`` tells the whole story.

Counting is safe across processes without a lock: each approver records their approval before
counting, so of two approvers who allow at once, the later count sees both.
"""

from __future__ import annotations

import time

import attrs
import trio

from ..._vocabulary import Outcome
from ._board import (
    HOW_AUTHENTICATED,
    AnswerBoard,
    AnswerGiven,
    NotAnApproverError,
    RemoteAnswer,
    check_answer,
    check_message,
    remember_terms,
)
from ._memory import refusal

__all__ = ["IDENTIFYING", "MAX_GIVEN", "Answered", "answer_question", "approvals_of"]

#: The ways of answering that say who answers (a typed name, the shared inbox token do not):
#: only these may answer a question that names its approvers. ``in-process`` is the program
#: itself (``Broker.answer(by=...)``), which holds the broker anyway.
IDENTIFYING = frozenset({"token", "inbox-session", "os-user", "in-process"})

#: The most answers recorded per question: refused attempts beyond it are refused unrecorded,
#: so no one can grow the board without bound.
MAX_GIVEN = 64


@attrs.frozen(kw_only=True)
class Answered:
    """What giving an answer did: ``decided`` is the question's answer once it is decided
    (by this answer or, for a quorum, the approval that completed it); otherwise the approval
    was recorded and counted: ``approvals`` of ``quorum`` so far."""

    decided: RemoteAnswer | None
    approvals: tuple[str, ...] = ()
    quorum: int = 1

    def progress(self) -> str:
        """``1 of 2 approvals, by alice``."""
        by = f", by {', '.join(self.approvals)}" if self.approvals else ""
        return f"{len(self.approvals)} of {self.quorum} approvals{by}"


def approvals_of(given: list[AnswerGiven]) -> tuple[str, ...]:
    """The different people who have allowed, in the order they did (refused ones left out)."""
    names = [
        g.by
        for g in given
        if g.refused is None and g.outcome is Outcome.ALLOWED_ONCE and g.by is not None
    ]
    return tuple(dict.fromkeys(names))


def _named(names: tuple[str, ...]) -> str:
    """Who decided a quorum, as ``answeredBy`` keeps it: ``alice, bob`` (within a name's
    200 characters: ``alice and 2 more``)."""
    joined = ", ".join(names)
    return joined if len(joined) <= 200 else f"{names[0][:150]} and {len(names) - 1} more"


async def _groups_of(board: AnswerBoard, by: str | None) -> tuple[str, ...]:
    if by is None or by.startswith("uid:"):
        await trio.lowlevel.checkpoint()
        return ()
    person = next((p for p in await board.people() if p.name == by), None)
    return person.groups if person is not None else ()


async def answer_question(
    board: AnswerBoard,
    question_id: str,
    outcome: Outcome,
    by: str | None,
    *,
    how: str | None,
    always: bool = False,
    always_for: float | None = None,
    project: bool = False,
    message: str | None = None,
) -> Answered:
    """Give *by*'s answer to *question_id* on *board* (module doc): refused with
    :class:`NotAnApproverError` when *by* may not answer it (recorded), counted when the
    question needs more approvals, else decided with :meth:`AnswerBoard.answer` (whose
    refusals, :class:`~broker.store.AnswerRefusedError`, pass through). *how* says how *by*
    was authenticated (:data:`HOW_AUTHENTICATED`).

    Cancellation: what was recorded stays recorded; :meth:`AnswerBoard.status` tells whether
    the question was decided.
    """
    value = check_answer(outcome, by)
    remember_terms(always, always_for, project)
    check_message(message)
    if how is not None and how not in HOW_AUTHENTICATED:
        raise ValueError(f"how must be one of {list(HOW_AUTHENTICATED)} or None, got {how!r}")
    status = await board.status(question_id)
    refused = refusal(question_id, status)
    if refused is not None:
        raise refused
    assert status is not None
    question = status.question

    def given(refused: str | None = None) -> AnswerGiven:
        return AnswerGiven(
            question_id=question_id,
            outcome=value,
            by=by,
            how=how,
            at_ms=time.time_ns() // 1_000_000,
            refused=refused,
        )

    async def refuse(why: str, message: str) -> NotAnApproverError:
        if len(await board.given(question_id)) < MAX_GIVEN:
            await board.give(given(why))
        return NotAnApproverError(message)

    identified = how in IDENTIFYING
    if question.approvers and not (
        identified and question.may_be_answered_by(by, await _groups_of(board, by))
    ):
        raise await refuse(
            "not an approver",
            f"question {question_id!r} may be answered only by {', '.join(question.approvers)} "
            f"(a rule names them): you are {by if identified and by else 'not identified'}; "
            "nothing was decided",
        )
    if question.quorum > 1 and value is Outcome.ALLOWED_ONCE:
        so_far = approvals_of(await board.given(question_id))
        if by in so_far:
            raise await refuse(
                "approved already",
                f"{by} has approved question {question_id!r} already "
                f"({len(so_far)} of {question.quorum} approvals): another approver must allow "
                "it",
            )
        await board.give(given())
        so_far = approvals_of(await board.given(question_id))
        if len(so_far) < question.quorum:
            return Answered(decided=None, approvals=so_far, quorum=question.quorum)
        decider = _named(so_far[: question.quorum])
        decided = await board.answer(
            question_id,
            value,
            decider,
            always=always,
            always_for=always_for,
            project=project,
            message=message,
        )
        return Answered(decided=decided, approvals=so_far, quorum=question.quorum)
    await board.give(given())
    decided = await board.answer(
        question_id,
        value,
        by,
        always=always,
        always_for=always_for,
        project=project,
        message=message,
    )
    approvals = approvals_of(await board.given(question_id)) if question.quorum > 1 else ()
    return Answered(decided=decided, approvals=approvals, quorum=question.quorum)
