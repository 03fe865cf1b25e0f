"""broker pending STORE / broker answer STORE QUESTION_ID allow|reject: answer from elsewhere.

examples:
  broker pending logs/sessions.sqlite                 the questions waiting for an answer
  broker pending logs/sessions.sqlite --session ID --json
  broker answer logs/sessions.sqlite 7f3c… allow --by alice
  broker answer logs/sessions.sqlite 7f3c… reject --by alice
  broker answer logs/sessions.sqlite 7f3c… always --by alice   (where the question offers it)
  broker answer logs/sessions.sqlite 7f3c… always --for 30m     (the grant ends in 30 minutes)
  broker answer logs/sessions.sqlite 7f3c… always --project     (also a rule in the project file)

A question waits here when the asking broker has a remote answerer in its waterfall
(broker.remote_answerer() in the library). The first answer wins; the asking broker decides,
records answeredBy and settles the question. broker answer then waits (--wait seconds) to
report what was recorded.

Who answers: with a personal token (broker people add), read from --token-file FILE (yours,
closed to others) or $BROKER_TOKEN, the person it belongs to (never from the command line,
where ps shows it). Without one, on a store that is a local file you can write, your OS user
(uid:NAME). --by NAME is a free name only on a store with no people registered.

Exit status: 0 the answer was taken (and, if it settled within --wait, decided the question);
1 it was refused (answered already, settled — named — or an unknown id) or the question settled
otherwise before the answer was read; 2 the command could not run (usage, the store).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import pwd
import sys
from typing import TYPE_CHECKING

import attrs
import trio

from .._codec import utf8_safe
from .._display import printable
from .._private_files import check_secret_file
from .._vocabulary import Outcome
from ..store import Answered, answer_question, approvals_of, board_for
from ._errors import EXIT_CHECK_FAILED, EXIT_OK, CliError
from ._numbers import duration

if TYPE_CHECKING:
    from ..store import AnswerBoard, PendingQuestion, QuestionStatus

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

_VERBS = {"allow": Outcome.ALLOWED_ONCE, "reject": Outcome.REJECTED, "always": Outcome.ALLOWED_ONCE}
#: How often ``broker answer`` looks whether its answer settled the question.
_SETTLE_POLL = 0.05


def register(sub: _Sub) -> None:
    """Add the ``pending`` and ``answer`` commands to the top-level sub-parsers *sub*."""
    pending = sub.add_parser(
        "pending",
        help="list the questions waiting for an answer from elsewhere",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pending.add_argument("store", help="the store: a file path, sqlite:///PATH or postgresql://…")
    pending.add_argument("--session", help="only the questions of this session id")
    pending.add_argument("--json", action="store_true", help="one JSON array on stdout")
    pending.add_argument(
        "--token-file",
        metavar="FILE",
        help="your personal token (or BROKER_TOKEN): questions a rule gives to named approvers "
        "are listed only to them",
    )
    pending.set_defaults(func=run_pending)
    answer = sub.add_parser(
        "answer",
        help="answer a waiting question: allow (once) or reject",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    answer.add_argument("store", help="the store: a file path, sqlite:///PATH or postgresql://…")
    answer.add_argument("question_id", help="the question's id (broker pending lists them)")
    answer.add_argument(
        "verb",
        choices=sorted(_VERBS),
        help="allow (once), reject, or always (allow, and remember for the session the rule "
        "the question shows, e.g. 'bash: git status', where it offers it)",
    )
    answer.add_argument(
        "--by",
        help="who answers, as a free name (only on a store with no people registered; "
        "otherwise your token says who you are)",
    )
    answer.add_argument(
        "--token-file",
        metavar="FILE",
        help="your personal token (broker people add), in a file only you can read; or set "
        "BROKER_TOKEN",
    )
    answer.add_argument("--token", help=argparse.SUPPRESS)  # refused: ps shows argv
    answer.add_argument(
        "--message",
        help="what you say with the answer: recorded, and given to the agent (a refused "
        "call's result tells the model why)",
    )
    scope = answer.add_mutually_exclusive_group()
    scope.add_argument(
        "--for",
        dest="always_for",
        type=duration,
        metavar="DURATION",
        help="with always: the grant ends after DURATION (30m, 90s, 2h, 1d; default: the "
        "asker's, usually as long as the session)",
    )
    scope.add_argument(
        "--project",
        action="store_true",
        help="with always: also remember the rule in the project rules file the question "
        "names (broker pending shows it), for every later session",
    )
    answer.add_argument(
        "--wait",
        type=float,
        default=10.0,
        help="seconds to wait for the question to settle (default 10; 0: do not wait)",
    )
    answer.set_defaults(func=run_answer)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def _row(question: PendingQuestion) -> dict[str, object]:
    return {
        "id": question.id,
        "session": question.session_id,
        "agent": question.agent,
        "tool": question.tool_name,
        "callId": question.call_id,
        "reason": question.reason,
        "displayReason": question.display_reason,
        "askedAt": _when(question.asked_at_ms),
        "deadline": _when(question.deadline_ms) if question.deadline_ms is not None else None,
        "owner": question.owner,
        # What "always" would remember for the session (None: it is not offered).
        "always": question.always_rule if question.offers_always else None,
        # The exact arguments the call runs with (when the asker gave them and they are small).
        "arguments": question.arguments,
        # Where "always --project" would write it (None: not offered).
        "projectRules": question.project_rules if question.offers_always else None,
        # Two-person approval: "1 of 2 approvals, by alice" (None: the first answer decides).
        "approvals": (
            Answered(decided=None, approvals=question.approvals, quorum=question.quorum).progress()
            if question.quorum > 1
            else None
        ),
    }


def run_pending(args: argparse.Namespace) -> int:
    """Run ``broker pending``; returns the exit status."""
    board = board_for(args.store)
    identity = _Identity(token=_token(args.token_file), by=None, store=args.store)
    questions = trio.run(_pending, board, args.session, identity)
    rows = [_row(q) for q in questions]
    if args.json:
        # A lone surrogate (a model's "\\ud800") as its JSON escape: stdout cannot write it.
        print(utf8_safe(json.dumps(rows, ensure_ascii=False)))
        return EXIT_OK
    if not rows:
        print("no questions are waiting for an answer")
        return EXIT_OK
    for row in rows:
        print(printable(str(row["id"])))
        keys = ("session", "agent", "tool", "callId", "reason", "displayReason", "always")
        for key in (*keys, "projectRules", "approvals"):
            if row[key] is not None:
                print(f"  {key}: {printable(str(row[key]))}")
        if row["arguments"] is not None:
            shown = json.dumps(row["arguments"], ensure_ascii=False)
            print(f"  arguments: {printable(shown)}")
        print(f"  askedAt: {row['askedAt']}  owner: {printable(str(row['owner']))}")
        if row["deadline"] is not None:
            print(f"  deadline: {row['deadline']}")
    return EXIT_OK


def run_answer(args: argparse.Namespace) -> int:
    """Run ``broker answer``; returns the exit status."""
    if not (0 <= args.wait <= 3600):
        raise CliError(f"--wait must be between 0 and 3600 seconds, got {args.wait}")
    outcome = _VERBS[args.verb]
    always = args.verb == "always"
    if not always and (args.always_for is not None or args.project):
        raise CliError(
            f"--for and --project qualify an always answer, not {args.verb}: answer always "
            "(or drop the option)"
        )
    if args.token is not None:
        raise CliError(
            "--token: a token never goes on the command line, where ps and shell history show "
            "it: put it in a file only you can read and pass --token-file FILE, or set "
            "BROKER_TOKEN"
        )
    token = _token(args.token_file)
    board = board_for(args.store)
    terms = _Terms(always, args.always_for, args.project, args.message)
    identity = _Identity(token=token, by=args.by, store=args.store)
    try:
        settled = trio.run(_answer, board, args.question_id, outcome, identity, args.wait, terms)
    except _Refused as exc:
        print(f"broker answer: {exc}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    shown = printable(args.question_id)
    if isinstance(settled, Answered):
        print(
            f"question {shown}: your approval is recorded ({printable(settled.progress())}); "
            "it is allowed once another approver allows it too"
        )
        return EXIT_OK
    if settled is None:
        print(
            f"question {shown}: answer {outcome.value} stored; the asking process has not "
            "recorded a decision yet (it reads the answer while it runs)"
        )
        return EXIT_OK
    if settled.settled is outcome:
        who = settled.answer.by if settled.answer is not None else None
        by = f" by {printable(who)}" if who else ""
        print(f"question {shown}: {outcome.value}{by}")
        return EXIT_OK
    recorded = settled.settled.value if settled.settled is not None else "?"
    print(
        f"broker answer: question {shown} was settled as {recorded} before this answer was read",
        file=sys.stderr,
    )
    return EXIT_CHECK_FAILED


@attrs.frozen
class _Terms:
    always: bool
    always_for: float | None
    project: bool
    message: str | None


async def _pending(
    board: AnswerBoard, session_id: str | None, identity: _Identity
) -> list[PendingQuestion]:
    """What waits, less what a rule gives to approvers this caller is not one of."""
    try:
        questions = await board.pending(session_id)
        if not any(q.approvers for q in questions):
            return questions
        try:
            who, groups, authenticated = await identity.known(board)
        except _Refused:
            who, groups, authenticated = None, (), False
        return [
            attrs.evolve(q, approvals=approvals_of(await board.given(q.id))) if q.quorum > 1 else q
            for q in questions
            if not q.approvers or (authenticated and q.may_be_answered_by(who, groups))
        ]
    finally:
        await board.aclose()


def _token(path: str | None) -> str | None:
    """The personal token from *path* (checked private) or ``$BROKER_TOKEN``, or None."""
    if path is not None:
        try:
            check_secret_file(path, "--token-file")
            text = pathlib.Path(path).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise CliError(
                f"--token-file {path}: no such file: pass the file you saved it in"
            ) from None
        except PermissionError as exc:
            raise CliError(str(exc)) from None
        if not text:
            raise CliError(f"--token-file {path}: the file is empty: put your token in it")
        return text
    return os.environ.get("BROKER_TOKEN") or None


@attrs.frozen
class _Identity:
    token: str | None
    by: str | None
    store: str

    async def who(self, board: AnswerBoard) -> str | None:
        """Who answers (module doc), or :class:`_Refused` naming why no one may."""
        return (await self.known(board))[0]

    async def known(self, board: AnswerBoard) -> tuple[str | None, tuple[str, ...], bool]:
        """(who answers, their groups, whether that is authenticated: a token or the OS
        user, not a typed name); :class:`_Refused` naming why no one may."""
        if self.token is not None:
            person = await board.identify(self.token)
            if person is None:
                raise _Refused(
                    "the token is no one's on this store (removed, or from another store): "
                    "ask for a new one (broker people add)"
                )
            if self.by is not None and self.by != person.name:
                raise _Refused(f"--by {self.by!r}: your token says you are {person.name}")
            return person.name, person.groups, True
        registered = bool(await board.people())
        os_user = _os_user(self.store)
        if registered and self.by is not None:
            raise _Refused(
                "this store has registered people: --by names no one; identify yourself with "
                "--token-file FILE (or BROKER_TOKEN)"
            )
        if self.by is not None:
            return self.by, (), False
        if os_user is None and registered:
            raise _Refused(
                "this store has registered people: identify yourself with --token-file FILE "
                "(or BROKER_TOKEN)"
            )
        return os_user, (), os_user is not None


class _Refused(Exception):
    """No one may answer as things stand (exit 1, naming why)."""


def _os_user(store: str) -> str | None:
    """``uid:NAME`` of this process's user when *store* is a local file it can write (what
    that user could change anyway), else None."""
    path = store.removeprefix("sqlite://") if store.startswith("sqlite:///") else store
    if "://" in path or not os.path.isfile(path) or not os.access(path, os.W_OK):
        return None
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        name = str(os.geteuid())
    return f"uid:{name}"


async def _answer(
    board: AnswerBoard,
    question_id: str,
    outcome: Outcome,
    identity: _Identity,
    wait: float,
    terms: _Terms,
) -> QuestionStatus | Answered | None:
    """Give the answer (:func:`broker.store.answer_question`); the question's status once the
    asker settled it (None: not within *wait*), or what was recorded when the question needs
    more approvals."""
    try:
        try:
            by, _groups, authenticated = await identity.known(board)
            how = (
                "token"
                if identity.token is not None
                else "os-user"
                if authenticated
                else "typed"
                if by is not None
                else None
            )
            given = await answer_question(
                board,
                question_id,
                outcome,
                by,
                how=how,
                always=terms.always,
                always_for=terms.always_for,
                project=terms.project,
                message=terms.message,
            )
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        if given.decided is None:
            return given
        with trio.move_on_after(wait):
            while True:
                status = await board.status(question_id)
                if status is not None and status.settled is not None:
                    return status
                await trio.sleep(_SETTLE_POLL)
        return None
    finally:
        await board.aclose()
