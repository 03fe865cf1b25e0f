"""The approval service behind ``broker serve``: an outside agent's sessions mapped onto broker
sessions, one question per hook call.

Synopsis::

    async with open_broker(store=..., rules=...) as broker, trio.open_nursery() as nursery:
        service = ApprovalService(broker=broker, nursery=nursery)
        reply = await service.decide(question, signal)   # a broker.serve.Reply

Each agent session (Claude Code's ``session_id``, Codex's thread id) is one broker session,
whose id is ``uuid5`` of the agent and its session id: the first call of that session resumes
it from the store when the store holds it (after the service restarted), else opens it with
that id. The service's *nursery* owns one task per attached session that holds the session's
turn open while the service runs; cancelling the nursery ends the turns before the broker
closes the sessions. Calls of one session in flight at once (an agent running tools in
parallel) are each one question of that turn.
"""

from __future__ import annotations

import uuid

import attrs
import trio

from .._broker import Broker
from .._errors import SessionNotStoredError
from .._questions import Decision
from .._request import ApprovalRequest
from .._session import Session
from .._signal import Signal
from .._vocabulary import Outcome, Source
from ._wire import Question, Reply

__all__ = ["SESSION_NAMESPACE", "ApprovalService", "explain", "session_id_for"]

#: The namespace of the broker session ids made from agents' session ids.
SESSION_NAMESPACE = uuid.UUID("6b1f3f0e-5a0c-4f55-9d4e-0b7c2d1a9e51")
#: The longest command or argument text put in the question people read (the log and the
#: board keep the exact arguments).
_SHOWN = 2000


def session_id_for(agent: str, agent_session: str) -> str:
    """The broker session id of *agent*'s session *agent_session* (the same on every run)."""
    return str(uuid.uuid5(SESSION_NAMESPACE, f"{agent}\x00{agent_session}"))


def explain(decision: Decision) -> str:
    """What the model reads about *decision* (the tool's result when it is refused), with what
    the person who answered said."""
    text = _explained(decision)
    return f"{text}; they said: {decision.message}" if decision.message else text


def _explained(decision: Decision) -> str:
    source, by = decision.source, decision.answered_by
    rule = decision.rule
    if source is Source.RULE and rule is not None:
        verb = "allowed" if decision.outcome is Outcome.ALLOWED_ONCE else "denied"
        why = f": {rule.reason}" if rule.reason else ""
        return f"{verb} by the {rule.origin.describe()}{why}"
    if decision.outcome is Outcome.ALLOWED_ONCE:
        if source is Source.GRANT:
            return "allowed by a grant this session holds"
        return f"allowed by {by}" if by else "allowed by the approver"
    if decision.outcome is Outcome.REJECTED:
        if source is Source.POLICY:
            return "rejected: the approval policy is never; nothing may run that asks"
        who = by or "the approver"
        return f"rejected by {who}: do not run this call; ask the user what to do instead"
    if source is Source.DEADLINE:
        return "no one answered in time: the call was not approved; ask the user"
    if decision.outcome is Outcome.CANCELLED:
        return "the question was withdrawn before anyone answered: the call was not approved"
    return "no one is answering approvals for this agent: the call was not approved"


def _display(question: Question, session: str) -> str:
    command = question.arguments.get("command")
    shown = command if isinstance(command, str) else question.tool
    if len(shown) > _SHOWN:
        shown = shown[:_SHOWN] + "…"
    where = f" in {question.cwd}" if question.cwd else ""
    who = f"{question.agent_name} (session {session[:12]}){where}"
    return f"{who} asks to run {question.tool}: {shown}"


@attrs.define(eq=False)
class ApprovalService:
    """Decides hook questions on *broker*; *nursery* owns the sessions' turn tasks."""

    broker: Broker
    nursery: trio.Nursery
    _sessions: dict[str, Session] = attrs.field(factory=dict, init=False)
    _opening: dict[str, trio.Event] = attrs.field(factory=dict, init=False)

    async def decide(self, question: Question, signal: Signal | None = None) -> Reply:
        """Ask *question* as one approval of its agent session; *signal* aborts it (the hook
        went away). Cancellation: the question settles ``cancelled`` and this raises."""
        session = await self._session(question)
        description = question.arguments.get("description")
        reason = description if isinstance(description, str) and description else None
        request = ApprovalRequest(
            agent=session.agent,
            tool_name=question.tool,
            call_id=question.call_id,
            reason=reason[:_SHOWN] if reason else None,
            display_reason=_display(question, question.session),
            arguments=question.arguments,
            signal=signal,
        )
        decision = await self.broker.request_decision(request)
        source = decision.source.value if decision.source is not None else None
        return Reply(
            outcome=decision.outcome,
            message=explain(decision),
            source=source,
            question=decision.id,
        )

    async def _session(self, question: Question) -> Session:
        sid = session_id_for(question.agent, question.session)
        while (session := self._sessions.get(sid)) is None:
            opening = self._opening.get(sid)
            if opening is not None:
                await opening.wait()  # another call of this session is opening it
                continue
            self._opening[sid] = trio.Event()
            try:
                label = f"{question.agent_name} session {question.session}"
                self._sessions[sid] = await self.nursery.start(self._hold, sid, label)
            finally:
                self._opening.pop(sid).set()
        await trio.lowlevel.checkpoint()
        return session

    async def _hold(self, sid: str, label: str, task_status: trio.TaskStatus[Session]) -> None:
        """Open (or resume) the session, hold its turn open until cancelled, then close it."""
        try:
            session = await self.broker.start_session(resume=sid)
        except SessionNotStoredError:
            # New to the store. (Held but not resumable as it is raises: never fork a log.)
            session = await self.broker.start_session(session_id=sid)
        session.agent.label = label  # what people see where they answer
        try:
            async with session.turn():
                task_status.started(session)
                await trio.sleep_forever()
        finally:
            self._sessions.pop(sid, None)
            with trio.CancelScope(shield=True):
                await session.aclose()
