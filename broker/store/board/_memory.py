"""The answer board of one process (:class:`MemoryBoard`): for the in-memory store and tests.

Everything is synchronous under the hood (a dict per question and a :class:`trio.Event` per
waiter), so an answer given with :meth:`MemoryBoard.answer` wakes the waiting answerer at once.
"""

from __future__ import annotations

import collections
import time

import attrs
import trio

from ..._vocabulary import Outcome
from ._board import (
    AnswerGiven,
    AnswerRefusedError,
    GrantRevocation,
    PendingQuestion,
    QuestionStatus,
    RemoteAnswer,
    UnknownQuestionError,
    check_always,
    check_answer,
    check_by,
    check_grant_id,
    check_message,
    remember_terms,
)
from ._people import PeopleExistsError, Person, token_hash

__all__ = ["MemoryBoard", "refusal", "shown_id"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def shown_id(question_id: str) -> str:
    """*question_id* as a message repeats it: at most 40 characters, then its length (an id
    comes from whoever answers, and may be anything)."""
    if len(question_id) <= 40:
        return repr(question_id)
    return f"{question_id[:40]!r}… ({len(question_id)} characters)"


def refusal(question_id: str, status: QuestionStatus | None) -> AnswerRefusedError | None:
    """Why an answer to *question_id* in *status* is refused, or None when it may be given.

    Every board refuses with these words (tests pin them): an unknown id by name, a settled
    question naming what it was settled as, an answered one naming the answer and who gave it.
    """
    if status is None:
        return UnknownQuestionError(
            f"unknown question id {shown_id(question_id)}: broker pending STORE lists the "
            "questions waiting for an answer"
        )
    if status.settled is not None:
        return AnswerRefusedError(
            f"question {question_id!r} is no longer pending: it was settled as "
            f"{status.settled.value}",
            recorded=status.settled,
            answered_by=status.answer.by if status.answer is not None else None,
        )
    if status.answer is not None:
        by = f" by {status.answer.by}" if status.answer.by else ""
        return AnswerRefusedError(
            f"question {question_id!r} was already answered: {status.answer.outcome.value}{by}",
            recorded=status.answer.outcome,
            answered_by=status.answer.by,
        )
    return None


@attrs.define(eq=False)
class _Entry:
    question: PendingQuestion
    answer: RemoteAnswer | None = None
    settled: Outcome | None = None
    answered: trio.Event = attrs.field(factory=trio.Event)
    given: list[AnswerGiven] = attrs.field(factory=list)

    def status(self) -> QuestionStatus:
        return QuestionStatus(question=self.question, answer=self.answer, settled=self.settled)


@attrs.define(eq=False)
class MemoryBoard:
    """An :class:`~broker.store._board.AnswerBoard` held in this process's memory.

    Settled questions are kept (their outcome refuses late answers) up to ``keep_settled``,
    the oldest forgotten first, so the board stays bounded.
    """

    keep_settled: int = 10_000
    _entries: dict[str, _Entry] = attrs.field(factory=dict, init=False)
    _settled_order: collections.deque[str] = attrs.field(factory=collections.deque, init=False)
    _revoked: dict[str, GrantRevocation] = attrs.field(factory=dict, init=False)
    _people: dict[str, Person] = attrs.field(factory=dict, init=False)

    async def add_person(self, person: Person) -> None:
        """Register *person*. Cancellation: a plain checkpoint, before anything changes."""
        await trio.lowlevel.checkpoint()
        if person.name in self._people or any(
            p.token_hash == person.token_hash for p in self._people.values()
        ):
            raise PeopleExistsError(
                f"{person.name!r} is registered already: broker people remove {person.name} "
                "first, to give them a new token"
            )
        self._people[person.name] = person

    async def remove_person(self, name: str) -> bool:
        """Remove *name*. Cancellation: a plain checkpoint, before anything changes."""
        await trio.lowlevel.checkpoint()
        return self._people.pop(name, None) is not None

    async def people(self) -> list[Person]:
        """Everyone registered, by name. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        return [self._people[name] for name in sorted(self._people)]

    async def identify(self, token: str) -> Person | None:
        """The person whose token *token* is. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        digest = token_hash(token)
        return next((p for p in self._people.values() if p.token_hash == digest), None)

    async def revoke_grant(self, grant_id: str, by: str | None) -> GrantRevocation:
        """Record the revocation (the first stands). Cancellation: a plain checkpoint, before
        anything changes."""
        check_grant_id(grant_id)
        check_by(by)
        await trio.lowlevel.checkpoint()
        return self._revoked.setdefault(
            grant_id, GrantRevocation(grant_id=grant_id, by=by, revoked_at_ms=_now_ms())
        )

    async def grant_revocation(self, grant_id: str) -> GrantRevocation | None:
        """The recorded revocation. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        return self._revoked.get(grant_id)

    async def publish(self, question: PendingQuestion, *, after_seq: int | None = None) -> None:
        """Put *question* up (module doc of :mod:`._board`); *after_seq* is not needed here (the
        board is told every settlement). Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        if question.id in self._entries:
            raise ValueError(
                f"question {question.id!r} is on the board already: publish each question once"
            )
        self._entries[question.id] = _Entry(question=question)

    async def wait_answer(self, question_id: str) -> RemoteAnswer:
        """Wait for the first answer. Cancellation: stops waiting."""
        entry = self._entries.get(question_id)
        if entry is None:
            raise UnknownQuestionError(
                f"unknown question id {question_id!r}: publish it before waiting for its answer"
            )
        await entry.answered.wait()
        assert entry.answer is not None
        return entry.answer

    async def retire(self, question_id: str, outcome: Outcome) -> None:
        """Record the settled outcome (the first stays). Cancellation: a plain checkpoint,
        after the record."""
        self.retire_nowait(question_id, outcome)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def retire_nowait(self, question_id: str, outcome: Outcome) -> None:
        """:meth:`retire` without a checkpoint."""
        entry = self._entries.get(question_id)
        if entry is None or entry.settled is not None:
            return
        entry.settled = outcome
        self._settled_order.append(question_id)
        while len(self._settled_order) > self.keep_settled:
            self._entries.pop(self._settled_order.popleft(), None)

    async def answer(
        self,
        question_id: str,
        outcome: Outcome,
        by: str | None,
        *,
        always: bool = False,
        always_for: float | None = None,
        project: bool = False,
        message: str | None = None,
    ) -> RemoteAnswer:
        """Give the first answer. Cancellation: a plain checkpoint, before anything changes."""
        value = check_answer(outcome, by)
        lasts_ms = remember_terms(always, always_for, project)
        check_message(message)
        await trio.lowlevel.checkpoint()
        entry = self._entries.get(question_id)
        refused = refusal(question_id, entry.status() if entry is not None else None)
        if refused is not None:
            raise refused
        assert entry is not None
        check_always(entry.question, value, always, project)
        entry.answer = RemoteAnswer(
            question_id=question_id,
            outcome=value,
            by=by,
            answered_at_ms=_now_ms(),
            always=always,
            always_for_ms=lasts_ms,
            project=project,
            message=message,
        )
        entry.answered.set()
        return entry.answer

    async def give(self, given: AnswerGiven) -> None:
        """Record an answer given. Cancellation: a plain checkpoint, before anything changes."""
        await trio.lowlevel.checkpoint()
        entry = self._entries.get(given.question_id)
        if entry is None:
            raise refusal(given.question_id, None) or AssertionError("unreachable")
        entry.given.append(given)

    async def given(self, question_id: str) -> list[AnswerGiven]:
        """The answers given, oldest first. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        entry = self._entries.get(question_id)
        return list(entry.given) if entry is not None else []

    async def aclose(self) -> None:
        """Nothing to close: the board holds no connection. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()

    async def status(self, question_id: str) -> QuestionStatus | None:
        """Where the question stands. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        entry = self._entries.get(question_id)
        return entry.status() if entry is not None else None

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        """The questions not settled, oldest first. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()
        found = [
            e.question
            for e in self._entries.values()
            if e.settled is None and (session_id is None or e.question.session_id == session_id)
        ]
        return sorted(found, key=lambda q: (q.asked_at_ms, q.id))
