"""The answer board: questions waiting for an answer from another task, process or host.

Synopsis::

    board = store.answer_board()                 # beside the store's logs, same file/database
    await board.publish(question)                # a remote-answer answerer puts its question up
    answer = await board.wait_answer(question.id)    # ... and waits for the first answer
    await board.retire(question.id, outcome)     # the question settled: later answers refused

    # anywhere else (the CLI's ``broker answer``, an inbox, another broker):
    await board.answer(question_id, Outcome.ALLOWED_ONCE, by="alice")
    await board.pending()                        # what waits, oldest first

The board only carries answers to the asking broker; the asking broker still decides the
question's flight exactly as for a local answerer (the first answer wins, a withdrawn question
drops a late one) and records ``approval/decided`` with ``answeredBy``. What the board
promises:

- **One answer per question.** :meth:`answer` stores the first answer atomically; a second is
  refused with :class:`AnswerRefusedError` naming what was recorded.
- **Settled is final.** After :meth:`retire` (the asker settled the question, whatever decided
  it) an answer is refused naming that outcome; an id never published is refused by name
  (:class:`UnknownQuestionError`).
- **Nothing is lost silently.** A question whose owner died is retired by the recovery that
  closes its crash tail (outcome ``cancelled``), so an answer for it is refused, not stored for
  nobody.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, runtime_checkable

import attrs

from ..._codec import utf8_encodable
from ..._decision import check_message
from ..._errors import BrokerError
from ..._vocabulary import Outcome
from ._people import Person

__all__ = [
    "ANSWERABLE",
    "HOW_AUTHENTICATED",
    "AnswerBoard",
    "AnswerGiven",
    "AnswerRefusedError",
    "GrantRevocation",
    "HasAnswerBoard",
    "NotAnApproverError",
    "PendingQuestion",
    "QuestionStatus",
    "RemoteAnswer",
    "UnknownQuestionError",
    "answer_terms",
    "check_always",
    "check_answer",
    "check_by",
    "check_grant_id",
    "check_message",
    "remember_terms",
]

#: A name shown as it is in the record of answers given; any other is quoted.
_PLAIN_NAME = re.compile(r"(?:uid:)?[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

#: The outcomes a person can give from elsewhere; ``cancelled``/``unavailable`` are the asker's.
ANSWERABLE = frozenset({Outcome.ALLOWED_ONCE, Outcome.REJECTED})
#: The largest arguments (as JSON) a question on the board shows; larger ones are left out
#: (the log keeps their digest, the display reason names the command).
SHOWN_ARGUMENTS = 16_384
#: The longest ``by`` a board stores (as :class:`broker.Answer` allows).
MAX_BY = 200


class AnswerRefusedError(BrokerError):
    """An answer was not taken: the question was answered already or is settled.

    ``recorded`` is what the question has: the first answer's outcome, or the outcome it was
    settled as; ``answered_by`` who gave that answer, when known.
    """

    def __init__(
        self, message: str, *, recorded: Outcome | None = None, answered_by: str | None = None
    ) -> None:
        super().__init__(message)
        self.recorded = recorded
        self.answered_by = answered_by


class UnknownQuestionError(AnswerRefusedError):
    """No question with that id was ever put up on this board."""


class NotAnApproverError(AnswerRefusedError):
    """The question names its approvers and whoever answered is not one of them (or gave an
    approval they had given already); the attempt is recorded, nothing is decided."""


#: How an answer's giver was authenticated, as recorded: a personal token (``broker answer
#: --token-file``), a signed-in inbox session (cookie bound to a token), the OS user on a
#: local store file, the shared inbox token, a name given in code (``Broker.answer``), or a
#: name typed with ``broker answer --by`` on a store with no people (not authenticated).
HOW_AUTHENTICATED = ("token", "inbox-session", "os-user", "shared-token", "in-process", "typed")


@attrs.frozen(kw_only=True)
class AnswerGiven:
    """One answer someone gave to a question on the board, whether it decided, counted towards
    a quorum, or was refused (``refused`` says why): the audit of who said what, and how they
    were authenticated (``how``, one of :data:`HOW_AUTHENTICATED`, or None when unknown)."""

    question_id: str
    outcome: Outcome
    by: str | None = None
    how: str | None = None
    at_ms: int
    refused: str | None = None

    @classmethod
    def rows(
        cls, question_id: str, rows: list[tuple[int, str, str | None, str | None, str | None]]
    ) -> list[AnswerGiven]:
        """Stored rows ``(at_ms, outcome, by, how, refused)`` of *question_id*, in order."""
        return [
            cls(
                question_id=question_id,
                at_ms=at_ms,
                outcome=Outcome(outcome),
                by=by,
                how=how,
                refused=refused,
            )
            for at_ms, outcome, by, how, refused in rows
        ]

    def row(self) -> tuple[str, int, str, str | None, str | None, str | None]:
        """What a board stores: ``(question_id, at_ms, outcome, by, how, refused)``."""
        return (self.question_id, self.at_ms, self.outcome.value, self.by, self.how, self.refused)

    def describe(self) -> str:
        """``allowed-once by alice (token)``, ``refused: rejected by mallory (token): …``.

        A name that is not a plain one (a person's, ``uid:NAME``) is quoted as JSON, so a typed
        ``--by "x (token); allowed-once by bob"`` cannot pass for a second answer."""
        if self.by is None:
            who = "someone"
        else:
            who = self.by if _PLAIN_NAME.fullmatch(self.by) else json.dumps(self.by)
        text = f"{self.outcome.value} by {who}" + (f" ({self.how})" if self.how else "")
        return text if self.refused is None else f"refused: {text}: {self.refused}"


@attrs.frozen(kw_only=True)
class PendingQuestion:
    """A question waiting for an answer, as any answerer anywhere sees it.

    ``display_reason`` is presentation only: the board keeps it so a person elsewhere sees it,
    but it is never written to the session log. ``owner`` names the asking process
    (``pid@host``); ``asked_at_ms`` and ``deadline_ms`` are Unix milliseconds.
    """

    id: str
    session_id: str
    agent: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None
    display_reason: str | None = None
    asked_at_ms: int
    owner: str
    deadline_ms: int | None = None
    #: The asker can honour "always allow" (a grant on the session of ``always_rule``).
    offers_always: bool = False
    #: What "always allow" remembers, shown before it is chosen: ``bash: git status`` (a
    #: command's prefix) or the tool's name (the whole tool).
    always_rule: str | None = None
    #: The project rules file "always, for the project" appends ``always_rule`` to (None: only
    #: the session's scope is offered).
    project_rules: str | None = None
    #: The exact arguments the call will run with, when the request carries them and they are
    #: small enough to show (:data:`SHOWN_ARGUMENTS` bytes of JSON); presentation only.
    arguments: dict[str, Any] | None = None
    #: Who alone may answer it (a rule's ``approvers``: names, ``group:NAME``, ``uid:NAME``);
    #: empty: anyone who may answer at all.
    approvers: tuple[str, ...] = ()
    #: How many different approvers must allow it before it is allowed (a rule's ``quorum``);
    #: one reject rejects it at once. 1: the first answer decides.
    quorum: int = 1
    #: Who has allowed it so far, for a question with a quorum, where the reader looked
    #: (the inbox's and ``broker pending``'s lists); the board itself keeps them as answers
    #: given (:meth:`AnswerBoard.given`).
    approvals: tuple[str, ...] = ()

    def may_be_answered_by(self, who: str | None, groups: tuple[str, ...] = ()) -> bool:
        """Whether *who* (a person's name or ``uid:NAME``, with their *groups*) may answer."""
        if not self.approvers:
            return True
        if who is None:
            return False
        return who in self.approvers or any(f"group:{g}" in self.approvers for g in groups)


@attrs.frozen(kw_only=True)
class RemoteAnswer:
    """The first answer given to a question on the board; ``always`` asks the asker to
    remember the tool for the session too (only where the question offers it)."""

    question_id: str
    outcome: Outcome
    by: str | None = None
    answered_at_ms: int
    always: bool = False
    #: With ``always``: how long the grant lasts (ms; None: the asker's default).
    always_for_ms: int | None = None
    #: With ``always``: remember the rule in the project rules file too.
    project: bool = False
    #: What the person said with the answer (it reaches the agent with the outcome).
    message: str | None = None

    def how(self) -> str | None:
        """The remembering terms as one stored text (None: none beyond ``always``):
        ``project`` or ``for:MS``; :func:`answer_terms` reads it back."""
        if self.project:
            return "project"
        return None if self.always_for_ms is None else f"for:{self.always_for_ms}"


def answer_terms(how: str | None) -> dict[str, Any]:
    """The :class:`RemoteAnswer` fields a stored :meth:`RemoteAnswer.how` gives back
    (unknown text: none, so an answer from a newer broker is read as a plain always)."""
    if how == "project":
        return {"project": True}
    if how is not None and how.startswith("for:") and how[4:].isdigit():
        return {"always_for_ms": int(how[4:])}
    return {}


def remember_terms(always: bool, always_for: float | None, project: bool) -> int | None:
    """*always_for* (seconds) as ms after checking the terms of an "always" answer;
    ValueError naming the parameter."""
    if always_for is not None:
        if isinstance(always_for, bool) or not isinstance(always_for, int | float):
            raise ValueError(
                f"always_for must be a number of seconds, got {always_for!r}: e.g. 1800"
            )
        if not 0 < always_for < 10**9:
            raise ValueError(
                f"always_for must be a positive number of seconds, got {always_for!r}: e.g. "
                "1800 for 30 minutes"
            )
    if (always_for is not None or project) and not always:
        raise ValueError(
            "always_for and project only qualify an always answer: give always=True too"
        )
    if always_for is not None and project:
        raise ValueError(
            "always_for cannot be given with project: a rule in the project file has no "
            "end; remember for the session to give one"
        )
    return None if always_for is None else int(always_for * 1000)


@attrs.frozen(kw_only=True)
class GrantRevocation:
    """A grant revoked from elsewhere (``broker grants revoke``, another process or host):
    the asking process records it in the session's log (``approval/revoke``) at the first
    question the grant would have covered, which it then does not."""

    grant_id: str
    by: str | None = None
    revoked_at_ms: int


def check_grant_id(grant_id: object) -> str:
    """*grant_id* if it is a grant's id (``g-`` and 16 hex digits), else :class:`ValueError`."""
    if (
        not isinstance(grant_id, str)
        or len(grant_id) != 18
        or not grant_id.startswith("g-")
        or not all(c in "0123456789abcdef" for c in grant_id[2:])
    ):
        shown = grant_id if not isinstance(grant_id, str) else grant_id[:40]
        raise ValueError(
            f"grant_id must be a grant's id (g- and 16 hex digits), got {shown!r}: "
            "broker grants list STORE shows them"
        )
    return grant_id


@attrs.frozen(kw_only=True)
class QuestionStatus:
    """Where a question stands: its answer (if any) and its settled outcome (once retired)."""

    question: PendingQuestion
    answer: RemoteAnswer | None = None
    settled: Outcome | None = None


def settled_from_log(
    question_id: str, outcome: str, by: str | None, at_ms: int | None
) -> QuestionStatus:
    """The status of a question the board no longer holds (pruned once decided, or decided
    without being put up here), read from its ``approval/decided`` event: settled as
    *outcome*, and answered by *by* (its ``answeredBy``) when an answerer named them, so a
    reader that comes after the pruning still learns who decided it."""
    stub = PendingQuestion(
        id=question_id, session_id="", agent="", tool_name="?", asked_at_ms=0, owner=""
    )
    settled = Outcome(outcome)
    answer = (
        None
        if by is None
        else RemoteAnswer(
            question_id=question_id, outcome=settled, by=by, answered_at_ms=at_ms or 0
        )
    )
    return QuestionStatus(question=stub, answer=answer, settled=settled)


def check_always(
    question: PendingQuestion, outcome: Outcome, always: bool, project: bool = False
) -> None:
    """ValueError unless *always* is off, or on with ``allowed-once`` for a question that
    offers it (and, with *project*, offers the project's scope)."""
    if always and outcome is not Outcome.ALLOWED_ONCE:
        raise ValueError(
            "always must only be given with allowed-once: always-allow remembers an allow"
        )
    if always and not question.offers_always:
        raise ValueError(
            f"question {question.id!r} does not offer always-allow (its asker cannot remember "
            "a grant): answer allowed-once or rejected"
        )
    if project and question.project_rules is None:
        raise ValueError(
            f"question {question.id!r} does not offer always-allow for the project (its asker "
            "has no project rules file): answer always for the session instead"
        )


def check_answer(outcome: object, by: object) -> Outcome:
    """*outcome* as an :class:`Outcome` a person may give, after checking *by*; else ValueError."""
    try:
        value = Outcome(outcome) if isinstance(outcome, str) else None
    except ValueError:
        value = None
    if value not in ANSWERABLE:
        raise ValueError(
            f"outcome must be 'allowed-once' or 'rejected', got {outcome!r}: an answer from "
            "elsewhere allows once or rejects"
        )
    check_by(by)
    assert value is not None
    return value


def check_by(by: object) -> None:
    """ValueError unless *by* is None or a name a store can keep (who answered or revoked)."""
    if by is not None and (type(by) is not str or not by.strip() or len(by) > MAX_BY):
        shown = by if not isinstance(by, str) or len(by) <= 40 else f"{by[:40]}… ({len(by)})"
        raise ValueError(
            f"by must be a non-empty name of at most {MAX_BY} characters (got {shown!r}): "
            "pass who answers, e.g. by='alice'"
        )
    if by is not None and not utf8_encodable(by):
        raise ValueError(
            "by must be text a store can write: it holds a lone surrogate (e.g. from "
            "'\\ud800' in JSON); pass the name without it"
        )


class AnswerBoard(Protocol):
    """Questions put up for answers from elsewhere, and their first answers (module doc)."""

    async def publish(self, question: PendingQuestion, *, after_seq: int | None = None) -> None:
        """Put *question* up; durable (visible to every reader of the board) on return.

        *after_seq*: the seq its session's log had reached when it was put up — its
        ``approval/decided``, when it comes, follows it — so a board that reads the log looks
        only at the events after it. None: unknown (the whole log may be read).

        Cancellation: the question may or may not have been put up; retire it either way.
        """
        ...

    async def wait_answer(self, question_id: str) -> RemoteAnswer:
        """Wait for the first answer to *question_id* and return it.

        Cancellation: just stops waiting (the flight that asked was withdrawn or settled).
        """
        ...

    async def retire(self, question_id: str, outcome: Outcome) -> None:
        """Record that *question_id* settled as *outcome*: it leaves :meth:`pending`, and any
        later answer is refused naming *outcome*. Idempotent; the first outcome stays.

        Cancellation: the record may or may not have been written (call it shielded).
        """
        ...

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
        """Give the first answer to *question_id*; return it once durable. *always* (with
        ``allowed-once``, where the question offers it) asks the asker to remember the rule the
        question shows: for *always_for* seconds (None: the asker's default), or in the
        project's rules file with *project* (where the question offers it). *message* is what
        the person says with it (:func:`broker.check_message`): the agent is told it.

        Raises :class:`AnswerRefusedError` (naming what was recorded) when the question was
        answered already or is settled, :class:`UnknownQuestionError` for an id never put up,
        ``ValueError`` for an outcome other than allowed-once/rejected, a bad *by*, or
        *always* where it is not offered.
        Cancellation: the answer may or may not have been stored; :meth:`status` tells.
        """
        ...

    async def give(self, given: AnswerGiven) -> None:
        """Record *given*, one answer someone gave (deciding, counted towards a quorum, or
        refused), for every process on this board; durable on return. It decides nothing
        (:meth:`answer` does). Cancellation: it may or may not have been stored.
        """
        ...

    async def given(self, question_id: str) -> list[AnswerGiven]:
        """Every answer given to *question_id* (:meth:`give`), oldest first (empty once the
        question's rows are pruned). Cancellation: nothing changes."""
        ...

    async def status(self, question_id: str) -> QuestionStatus | None:
        """Where *question_id* stands, or None when it was never put up here.

        Cancellation: nothing changes.
        """
        ...

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        """The questions put up and not settled (of *session_id*, if given), oldest first.

        Cancellation: nothing changes.
        """
        ...

    async def revoke_grant(self, grant_id: str, by: str | None) -> GrantRevocation:
        """Record that grant *grant_id* is revoked, for every process on this board; the
        first revocation stands (a second returns it). Durable on return.

        Cancellation: the revocation may or may not have been stored.
        """
        ...

    async def grant_revocation(self, grant_id: str) -> GrantRevocation | None:
        """The revocation recorded for *grant_id*, if any. Cancellation: nothing changes."""
        ...

    async def add_person(self, person: Person) -> None:
        """Register *person* (:mod:`broker.store._people`), known to every process on the
        store; :class:`PeopleExistsError` if the name is taken. Cancellation: the person may
        or may not have been stored."""
        ...

    async def remove_person(self, name: str) -> bool:
        """Remove *name*: their token stops working at once, everywhere. Whether someone was
        removed. Cancellation: it may or may not have happened."""
        ...

    async def people(self) -> list[Person]:
        """Everyone registered, by name. Cancellation: nothing changes."""
        ...

    async def identify(self, token: str) -> Person | None:
        """The person whose token *token* is (read from the store each time: no cache), or
        None. Cancellation: nothing changes."""
        ...

    async def aclose(self) -> None:
        """Close the board's own connections (a board that has none does nothing); the board
        may be used again afterwards (it reconnects). Cancellation: the close may be cut short;
        the server drops the connections when the process ends.
        """
        ...


@runtime_checkable
class HasAnswerBoard(Protocol):
    """A store whose processes share an answer board (SQLite: the same file; PostgreSQL: the
    same database). A broker on another store keeps a board of its own process."""

    def answer_board(self) -> AnswerBoard | None:
        """The board beside this store's logs, or None when it has none."""
        ...
