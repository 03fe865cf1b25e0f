"""Who answered: an answerer may return ``Answer(outcome, by=...)``; the decided line records
``answeredBy`` only when that answer decided the question, and omits it otherwise."""

from __future__ import annotations

import pytest
import trio

from broker import Answer, AnswerNext, ApprovalRequest, Broker, Outcome, Session

from .conftest import lines_of


def req(session: Session) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name="bash")


async def test_a_named_answer_lands_as_answered_by(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def alice(_req: ApprovalRequest, _next: AnswerNext) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(outcome=Outcome.ALLOWED_ONCE, by="alice")

    approval_session.add_answerer(alice)
    async with approval_session.turn():
        decision = await approval_broker.request_decision(req(approval_session))
    assert decision.outcome is Outcome.ALLOWED_ONCE
    assert decision.answered_by == "alice"
    decided = lines_of(approval_broker, approval_session)[2]
    assert decided == (
        f'{{"type":"approval/decided","data":{{"id":"{decision.id}","outcome":"allowed-once",'
        '"answeredBy":"alice","source":"answerer",'
        '"answerer":"test_a_named_answer_lands_as_answered_by.<locals>.alice"}}'
    )


async def test_an_override_of_a_named_answer_drops_the_name(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def gate(_req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        await next_()
        return Outcome.REJECTED  # overrides what alice said

    async def alice(_req: ApprovalRequest, _next: AnswerNext) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(outcome=Outcome.ALLOWED_ONCE, by="alice")

    approval_session.add_answerer(gate)
    approval_session.add_answerer(alice)
    async with approval_session.turn():
        decision = await approval_broker.request_decision(req(approval_session))
    assert decision.outcome is Outcome.REJECTED
    assert decision.answered_by is None
    assert "answeredBy" not in "".join(lines_of(approval_broker, approval_session))


@pytest.mark.parametrize("by", ["", "   ", "x" * 201, 7])
def test_a_bad_name_is_refused(by: object) -> None:
    with pytest.raises(ValueError, match=r"^by must be a non-empty name"):
        Answer(outcome=Outcome.REJECTED, by=by)  # type: ignore[arg-type]
