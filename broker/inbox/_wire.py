"""What the inbox sends and receives, in its camelCase JSON form (through the one converter).

Every string a model, a tool or a person produced goes out through :func:`shown`, which escapes
control characters, bidi overrides and invisible separators visibly (``\\x1b``, ``\\u202e``,
:func:`broker._display.printable`); the page then puts it in the DOM as text, never as markup.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .._codec import converter, register_wire_type, utf8_safe
from .._display import printable
from ..store import PendingQuestion

__all__ = [
    "AnswerBody",
    "AnswerReply",
    "Change",
    "Gone",
    "SessionView",
    "Snapshot",
    "TimelineRow",
    "dumps",
    "shown",
    "shown_name",
]


@attrs.frozen(kw_only=True)
class Gone:
    """A question that left the pending list: what it settled as and who answered, if known
    (``outcome`` is absent when the board no longer knows it, e.g. forgotten after long)."""

    id: str
    outcome: str | None = None
    by: str | None = None


@attrs.frozen(kw_only=True)
class Snapshot:
    """Every pending question, oldest first (at most ``limit`` of ``total``), at ``now_ms``."""

    questions: list[PendingQuestion]
    total: int
    now_ms: int


@attrs.frozen(kw_only=True)
class Change:
    """What changed since the last poll: questions put up, questions gone."""

    added: list[PendingQuestion] = attrs.field(factory=list)
    gone: list[Gone] = attrs.field(factory=list)
    total: int
    now_ms: int


@attrs.frozen(kw_only=True)
class TimelineRow:
    """One event of a session's log, described as ``broker log show`` does (escaped)."""

    seq: int
    ts_ms: int
    type: str
    text: str


@attrs.frozen(kw_only=True)
class SessionView:
    """A session's log for the page: its newest events (``rows``) of ``total``."""

    session_id: str
    parent_id: str | None = None
    total: int
    rows: list[TimelineRow]


@attrs.frozen(kw_only=True)
class AnswerBody:
    """The body of ``POST /api/answer``."""

    id: str
    outcome: str
    by: str
    #: Allow and remember the tool for the session (only where the question offers it).
    always: bool = False
    #: With ``always``: the grant ends after this many seconds (None: the asker's default).
    always_for: float | None = None
    #: With ``always``: also write the rule to the project rules file the question names.
    project: bool = False
    #: What the person says with the answer (given to the agent).
    message: str | None = None


@attrs.frozen(kw_only=True)
class AnswerReply:
    """The reply to ``POST /api/answer``: the answer taken, or why it was refused (``error``)
    with what the question has recorded (``recorded``, ``by``)."""

    id: str | None = None
    outcome: str | None = None
    by: str | None = None
    error: str | None = None
    recorded: str | None = None
    #: For a question that needs several approvers, answered with an approval that does not
    #: decide it yet (``outcome`` absent): who has allowed so far, of how many needed.
    approvals: list[str] | None = None
    quorum: int | None = None


@attrs.frozen(kw_only=True)
class GrantView:
    """A grant as the page shows it (escaped): ``status`` as ``broker grants list`` says it."""

    id: str
    session_id: str
    tool_name: str
    command: str | None = None
    by: str | None = None
    at_ms: int | None = None
    expires_at_ms: int | None = None
    status: str


@attrs.frozen(kw_only=True)
class GrantsView:
    """``GET /api/grants``: the grants of the store's sessions, newest last."""

    grants: list[GrantView]


@attrs.frozen(kw_only=True)
class RevokeBody:
    """The body of ``POST /api/revoke``."""

    id: str
    by: str


for _cls in (
    GrantView,
    GrantsView,
    RevokeBody,
    PendingQuestion,
    Gone,
    Snapshot,
    Change,
    TimelineRow,
    SessionView,
    AnswerBody,
    AnswerReply,
):
    register_wire_type(_cls)


def _text(value: str | None, *, keep_newlines: bool = False) -> str | None:
    return None if value is None else printable(value, keep_newlines=keep_newlines)


def shown(question: PendingQuestion) -> PendingQuestion:
    """*question* with every produced field escaped for a person (module doc)."""
    return attrs.evolve(
        question,
        session_id=printable(question.session_id),
        agent=printable(question.agent),
        tool_name=printable(question.tool_name),
        call_id=_text(question.call_id),
        reason=_text(question.reason, keep_newlines=True),
        display_reason=_text(question.display_reason, keep_newlines=True),
        owner=printable(question.owner),
        always_rule=_text(question.always_rule),
        project_rules=_text(question.project_rules),
        arguments=_escaped(question.arguments) if question.arguments is not None else None,
        approvals=tuple(printable(a) for a in question.approvals),
    )


def _escaped(value: Any) -> Any:
    """*value* (JSON) with every string, key or value, escaped for a person."""
    if isinstance(value, str):
        return printable(value, keep_newlines=True)
    if isinstance(value, dict):
        return {printable(str(k)): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def shown_name(by: str) -> str:
    """A person's name as the page shows it (escaped like every produced field)."""
    return printable(by)


def dumps(value: object) -> bytes:
    """*value* (a registered wire type) as compact UTF-8 JSON; a lone surrogate (an id a page
    sent as ``"\\ud800"``) is written as its JSON escape, since UTF-8 cannot hold it."""
    return utf8_safe(
        json.dumps(converter.unstructure(value), separators=(",", ":"), ensure_ascii=False)
    ).encode()
