"""The PostgreSQL answer board reads the log only after where a question's session stood when it
was put up (``after_seq``), and still reads it by time for a row an older broker put up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg
import pytest
import trio
import trio.testing

from broker import (
    AbortSignal,
    AnswerRefusedError,
    ApprovalRequest,
    Broker,
    Outcome,
    Session,
    answer_board,
    open_broker,
)


def _after_seq(dsn: str, question_id: str) -> object:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT after_seq FROM broker.board_questions WHERE id = %s", (question_id,)
        ).fetchone()
    assert row is not None
    return row[0]


async def _pending_id(broker: Broker) -> str:
    with trio.fail_after(10):
        # The board is another process's view: nothing to wait on but its answers.
        while not (pending := await broker.pending()):  # noqa: ASYNC110
            await trio.sleep(0.01)
    (question,) = pending
    return question.id


Then = Callable[[Broker, str, AbortSignal, list[Outcome]], Awaitable[None]]


async def _asking(dsn: str, before: Callable[[str], None], then: Then) -> list[Outcome]:
    """Ask one question on a session that already holds a few decided ones; *before* runs on
    its id while it is pending, then *then* settles it (by an answer or its signal) and answers
    again once the request returned (its outcome in the list)."""
    outcomes: list[Outcome] = []
    signal = AbortSignal()
    async with open_broker(store=dsn, policy="ask") as broker:
        async with broker.answerer(broker.remote_answerer()), broker.open_session() as session:
            await _earlier_questions(broker, session)
            async with session.turn(), trio.open_nursery() as nursery:

                async def asker() -> None:
                    request = ApprovalRequest(
                        agent=session.agent, tool_name="bash", call_id="c9", signal=signal
                    )
                    outcomes.append(await broker.request(request))

                nursery.start_soon(asker)
                question_id = await _pending_id(broker)
                before(question_id)
                await then(broker, question_id, signal, outcomes)
    return outcomes


async def _earlier_questions(broker: Broker, session: Session) -> None:
    for index in range(3):
        async with session.turn(), trio.open_nursery() as nursery:
            nursery.start_soon(
                broker.request,
                ApprovalRequest(agent=session.agent, tool_name="bash", call_id=f"c{index}"),
            )
            question_id = await _pending_id(broker)
            await broker.answer(question_id, Outcome.REJECTED, by="earlier")


async def _returned(outcomes: list[Outcome]) -> None:
    with trio.fail_after(10):
        while not outcomes:  # noqa: ASYNC110 (the asker appends; a test helper polls)
            await trio.sleep(0.01)


async def test_a_question_records_where_its_session_stood_and_a_second_answer_is_refused(
    postgres_dsn: str,
) -> None:
    seen: list[object] = []

    async def answer_twice(
        broker: Broker, question_id: str, _signal: AbortSignal, outcomes: list[Outcome]
    ) -> None:
        await broker.answer(question_id, Outcome.ALLOWED_ONCE, by="alice")
        await _returned(outcomes)
        with pytest.raises(AnswerRefusedError, match=r"it was settled as allowed-once$"):
            await broker.answer(question_id, Outcome.REJECTED, by="bob")
        # Listing the pending questions prunes the decided one's rows: who answered it is
        # still known, from its approval/decided event.
        assert await broker.pending() == []
        with pytest.raises(AnswerRefusedError) as info:
            await broker.answer(question_id, Outcome.REJECTED, by="bob")
        assert info.value.answered_by == "alice"

    outcomes = await _asking(
        postgres_dsn, lambda qid: seen.append(_after_seq(postgres_dsn, qid)), answer_twice
    )
    assert outcomes == [Outcome.ALLOWED_ONCE]
    # Three earlier questions (turn start, asked, decided, turn end each), this turn's start and
    # this question's asked: its decided follows seq 14.
    assert seen == [14]


@pytest.mark.parametrize("after_seq", ["kept", "null, as an older broker leaves it"])
async def test_an_aborted_question_refuses_the_answer_naming_cancelled(
    postgres_dsn: str, after_seq: str
) -> None:
    def before(question_id: str) -> None:
        if after_seq != "kept":
            with psycopg.connect(postgres_dsn) as conn:
                conn.execute(
                    "UPDATE broker.board_questions SET after_seq = NULL WHERE id = %s",
                    (question_id,),
                )

    async def abort_then_answer(
        broker: Broker, question_id: str, signal: AbortSignal, outcomes: list[Outcome]
    ) -> None:
        signal.abort("the user moved on")
        await _returned(outcomes)
        with pytest.raises(AnswerRefusedError, match=r"it was settled as cancelled$"):
            await broker.answer(question_id, Outcome.ALLOWED_ONCE, by="late")

    assert await _asking(postgres_dsn, before, abort_then_answer) == [Outcome.CANCELLED]


async def test_a_board_an_older_broker_made_gains_the_column_when_first_answered(
    postgres_dsn: str,
) -> None:
    def older_board(question_id: str) -> None:
        with psycopg.connect(postgres_dsn) as conn:
            conn.execute("ALTER TABLE broker.board_questions DROP COLUMN after_seq")

    async def answer_from_a_new_process(
        broker: Broker, question_id: str, _signal: AbortSignal, outcomes: list[Outcome]
    ) -> None:
        board = answer_board(postgres_dsn)  # as `broker answer` in another process makes it
        try:
            await board.answer(question_id, Outcome.ALLOWED_ONCE, by="carol")
        finally:
            await board.aclose()
        await _returned(outcomes)

    assert await _asking(postgres_dsn, older_board, answer_from_a_new_process) == [
        Outcome.ALLOWED_ONCE
    ]
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'broker' "
            "AND table_name = 'board_questions' AND column_name = 'after_seq'"
        ).fetchone() == (1,)


async def test_a_board_made_before_answers_had_terms_gains_their_columns(
    postgres_dsn: str,
) -> None:
    """A board of the version before answers had terms and messages (and before people):
    the first answer from a new process brings it up to date, and the terms arrive."""

    def older_board(question_id: str) -> None:
        with psycopg.connect(postgres_dsn) as conn:
            conn.execute("ALTER TABLE broker.board_answers DROP COLUMN always_how")
            conn.execute("ALTER TABLE broker.board_answers DROP COLUMN message")
            conn.execute("DROP TABLE broker.board_people")

    async def answer_from_a_new_process(
        broker: Broker, question_id: str, _signal: AbortSignal, outcomes: list[Outcome]
    ) -> None:
        board = answer_board(postgres_dsn)
        try:
            await board.answer(question_id, Outcome.REJECTED, by="carol", message="not now")
        finally:
            await board.aclose()
        await _returned(outcomes)

    assert await _asking(postgres_dsn, older_board, answer_from_a_new_process) == [Outcome.REJECTED]
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(
            "SELECT message FROM broker.board_answers WHERE answered_by = 'carol'"
        ).fetchone() == ("not now",)
