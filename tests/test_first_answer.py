"""first_answer: several answerers asked at once, the first real answer wins."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker import (
    Answer,
    AnswerNext,
    ApprovalRequest,
    Broker,
    Outcome,
    Session,
    first_answer,
)


def req(session: Session) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name="bash", call_id="c1")


async def test_the_first_answer_wins_and_the_others_are_cancelled(
    approval_broker: Broker, approval_session: Session, autojump_clock: trio.testing.MockClock
) -> None:
    cancelled: list[str] = []

    async def slow(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            cancelled.append("slow")
            raise
        return Outcome.REJECTED

    async def quick(_req: ApprovalRequest, _next: AnswerNext) -> Answer:
        await trio.sleep(1)
        return Answer(outcome=Outcome.ALLOWED_ONCE, by="quick")

    approval_session.add_answerer(first_answer(slow, quick))
    async with approval_session.turn():
        decision = await approval_broker.request_decision(req(approval_session))
    assert decision.outcome is Outcome.ALLOWED_ONCE
    assert decision.answered_by == "quick"
    assert cancelled == ["slow"]
    assert trio.current_time() == 1


async def test_unavailable_delegating_and_failing_participants_drop_out(
    approval_broker: Broker, approval_session: Session, autojump_clock: trio.testing.MockClock
) -> None:
    async def gone(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.UNAVAILABLE

    async def delegates(_req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        return await next_()

    async def broken(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("boom")

    async def late(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.sleep(5)
        return Outcome.REJECTED

    approval_session.add_answerer(first_answer(gone, delegates, broken, late))
    async with approval_session.turn():
        outcome = await approval_broker.request(req(approval_session))
    assert outcome is Outcome.REJECTED  # the only one that could answer did


async def test_when_everyone_drops_out_the_chain_goes_on(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def gone(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.UNAVAILABLE

    async def delegates(_req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        return await next_()

    async def terminal(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.REJECTED

    approval_session.add_answerer(first_answer(gone, delegates))
    with trio.fail_after(5):
        async with approval_session.turn():
            assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE
        approval_session.add_answerer(terminal)
        async with approval_session.turn():
            assert await approval_broker.request(req(approval_session)) is Outcome.REJECTED


def test_it_needs_an_answerer() -> None:
    with pytest.raises(ValueError, match=r"^first_answer needs at least one answerer"):
        first_answer()
