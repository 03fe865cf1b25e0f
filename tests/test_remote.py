"""Answers from elsewhere, in one process: the remote answerer, the memory board, and
``broker.answer`` / ``broker.pending`` (issue 23 steps 2-3; the cross-process stores reuse these
rules, see ``test_remote_processes.py``)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker import (
    AbortSignal,
    AnswerRefusedError,
    ApprovalDecided,
    ApprovalRequest,
    Broker,
    Outcome,
    Session,
    UnknownQuestionError,
)

from .conftest import lines_of, log_of


def ask(session: Session, **kwargs: object) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name="bash", call_id="c1", **kwargs)  # type: ignore[arg-type]


async def wait_pending(broker: Broker) -> list[str]:
    """The ids waiting once every task is blocked (the asker waits on the board)."""
    await trio.testing.wait_all_tasks_blocked()
    return [q.id for q in await broker.pending()]


async def test_a_question_waits_on_the_board_and_the_answer_decides_it(
    approval_broker: Broker, approval_session: Session
) -> None:
    decisions = []
    async with approval_broker.answerer(approval_broker.remote_answerer()):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:

                async def asker() -> None:
                    req = ask(approval_session, reason="rm -rf build", display_reason="shown")
                    decisions.append(await approval_broker.request_decision(req))

                nursery.start_soon(asker)
                (qid,) = await wait_pending(approval_broker)
                (pending,) = await approval_broker.pending(approval_session.id)
                assert (pending.tool_name, pending.call_id, pending.reason) == (
                    "bash",
                    "c1",
                    "rm -rf build",
                )
                assert pending.display_reason == "shown"
                assert pending.session_id == approval_session.id
                answer = (await approval_broker.answer(qid, "allowed-once", by="alice")).decided
                assert answer is not None
                assert answer.outcome is Outcome.ALLOWED_ONCE
    (decision,) = decisions
    assert decision.id == qid
    assert decision.outcome is Outcome.ALLOWED_ONCE
    assert decision.answered_by == "alice"
    assert lines_of(approval_broker, approval_session)[2] == (
        f'{{"type":"approval/decided","data":{{"id":"{qid}","outcome":"allowed-once",'
        '"answeredBy":"alice","source":"answerer","answerer":"board",'
        '"answers":"allowed-once by alice (in-process)"}}'
    )
    # Settled: it left the list, and a late answer is refused naming the outcome.
    assert await approval_broker.pending() == []
    with pytest.raises(AnswerRefusedError) as info:
        await approval_broker.answer(qid, "rejected", by="bob")
    assert str(info.value) == (
        f"question {qid!r} is no longer pending: it was settled as allowed-once"
    )
    assert info.value.recorded is Outcome.ALLOWED_ONCE


async def test_two_answers_race_one_wins_the_other_is_told_what_was_recorded(
    approval_broker: Broker, approval_session: Session
) -> None:
    outcomes = []
    async with approval_broker.answerer(approval_broker.remote_answerer()):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:

                async def asker() -> None:
                    outcomes.append(await approval_broker.request(ask(approval_session)))

                nursery.start_soon(asker)
                (qid,) = await wait_pending(approval_broker)
                await approval_broker.answer(qid, Outcome.REJECTED, by="bob")
                with pytest.raises(AnswerRefusedError) as info:
                    await approval_broker.answer(qid, Outcome.ALLOWED_ONCE, by="alice")
    assert outcomes == [Outcome.REJECTED]
    assert str(info.value) in (
        f"question {qid!r} was already answered: rejected by bob",
        f"question {qid!r} is no longer pending: it was settled as rejected",
    )
    assert info.value.recorded is Outcome.REJECTED


async def test_an_aborted_question_refuses_answers_naming_cancelled(
    approval_broker: Broker, approval_session: Session
) -> None:
    signal = AbortSignal()
    outcomes = []
    async with approval_broker.answerer(approval_broker.remote_answerer()):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:

                async def asker() -> None:
                    outcomes.append(
                        await approval_broker.request(ask(approval_session, signal=signal))
                    )

                nursery.start_soon(asker)
                (qid,) = await wait_pending(approval_broker)
                signal.abort("the user moved on")
    assert outcomes == [Outcome.CANCELLED]
    with pytest.raises(AnswerRefusedError, match=r"it was settled as cancelled$"):
        await approval_broker.answer(qid, "allowed-once")
    assert await approval_broker.pending() == []


async def test_a_deadline_fails_closed_and_an_unknown_id_is_refused_by_name(
    approval_broker: Broker, approval_session: Session, autojump_clock: trio.testing.MockClock
) -> None:
    async with approval_broker.answerer(approval_broker.remote_answerer(deadline=30)):
        async with approval_session.turn():
            assert await approval_broker.request(ask(approval_session)) is Outcome.UNAVAILABLE
    decided = log_of(approval_broker, approval_session)[2]
    assert isinstance(decided, ApprovalDecided)
    with pytest.raises(AnswerRefusedError, match=r"settled as unavailable$"):
        await approval_broker.answer(decided.id, "rejected")
    with pytest.raises(UnknownQuestionError) as info:
        await approval_broker.answer("nope", "rejected")
    assert str(info.value) == (
        "unknown question id 'nope': broker pending STORE lists the questions waiting for an answer"
    )


@pytest.mark.parametrize(
    ("outcome", "by", "message"),
    [
        ("cancelled", None, r"^outcome must be 'allowed-once' or 'rejected', got 'cancelled'"),
        ("allow", None, r"^outcome must be 'allowed-once' or 'rejected', got 'allow'"),
        ("rejected", "", r"^by must be a non-empty name of at most 200 characters \(got ''\)"),
        ("rejected", "x" * 201, r"^by must be a non-empty name of at most 200 characters"),
    ],
)
async def test_bad_answers_are_refused_before_anything_is_stored(
    approval_broker: Broker, outcome: str, by: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await approval_broker.answer("any", outcome, by=by)


async def test_the_caller_cancelled_retires_the_question_cancelled(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_broker.answerer(approval_broker.remote_answerer()):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def asker() -> None:
                    with scope:
                        await approval_broker.request(ask(approval_session))

                nursery.start_soon(asker)
                (qid,) = await wait_pending(approval_broker)
                scope.cancel()
    status = await approval_broker.board.status(qid)
    assert status is not None
    assert status.settled is Outcome.CANCELLED


async def test_always_allow_remembers_the_tool_where_the_asker_offers_it(
    approval_broker: Broker, approval_session: Session
) -> None:
    decisions = []
    async with approval_broker.answerer(approval_broker.remote_answerer(allow_always=True)):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:

                async def asker() -> None:
                    decisions.append(await approval_broker.request_decision(ask(approval_session)))

                nursery.start_soon(asker)
                (qid,) = await wait_pending(approval_broker)
                (question,) = await approval_broker.pending()
                assert question.offers_always
                with pytest.raises(ValueError, match=r"^always must only be given with allowed"):
                    await approval_broker.answer(qid, "rejected", always=True)
                await approval_broker.answer(qid, "allowed-once", by="alice", always=True)
            # Remembered: the next ask of that tool is allowed without a question on the board.
            async with approval_session.turn():
                again = await approval_broker.request_decision(ask(approval_session))
    assert decisions[0].outcome is Outcome.ALLOWED_ONCE
    assert decisions[0].answered_by == "alice"
    assert again.outcome is Outcome.ALLOWED_ONCE
    assert again.remembered
    types = [e.TYPE for e in log_of(approval_broker, approval_session)]
    assert types[:5] == [
        "turn/start",
        "approval/asked",
        "approval/grant",
        "approval/decided",
        "turn/end",
    ]


async def test_always_allow_is_refused_where_the_asker_cannot_honour_it(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_broker.answerer(approval_broker.remote_answerer()):
        with trio.fail_after(5):
            async with approval_session.turn(), trio.open_nursery() as nursery:
                nursery.start_soon(approval_broker.request, ask(approval_session))
                (qid,) = await wait_pending(approval_broker)
                with pytest.raises(ValueError, match=r"does not offer always-allow") as info:
                    await approval_broker.answer(qid, "allowed-once", always=True)
                await approval_broker.answer(qid, "rejected")
    assert str(info.value) == (
        f"question {qid!r} does not offer always-allow (its asker cannot remember a grant): "
        "answer allowed-once or rejected"
    )
    assert not any(e.TYPE == "approval/grant" for e in log_of(approval_broker, approval_session))


async def test_an_unknown_over_long_id_is_shortened_in_the_refusal(
    approval_broker: Broker,
) -> None:
    with pytest.raises(UnknownQuestionError) as info:
        await approval_broker.answer("x" * 10_000, "rejected")
    assert str(info.value) == (
        f"unknown question id {'x' * 40!r}… (10000 characters): broker pending STORE lists "
        "the questions waiting for an answer"
    )
