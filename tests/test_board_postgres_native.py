"""The PostgreSQL board's answer runs on the trio thread over libpq's non-blocking calls
(``broker/store/postgres/_native.py``): prepared once per connection, prepared again on a new
one after the old was lost, a lost connection is a one-line StoreError and the next answer
reconnects, and text libpq cannot carry (a NUL) is refused before anything is sent."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import trio

from broker import (
    AnswerRefusedError,
    ApprovalRequest,
    Broker,
    Outcome,
    answer_board,
    open_broker,
)
from broker.store import StoreError
from broker.store.board import UnknownQuestionError


async def _pending_id(broker: Broker, count: int = 1) -> list[str]:
    with trio.fail_after(10):
        # The board is another process's view: nothing to wait on but its answers.
        while len(pending := await broker.pending()) < count:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return [question.id for question in pending]


def _terminate(dsn: str, board: object) -> None:
    """End the server side of *board*'s query connection (made by its first answer)."""
    pid = board._conn.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_answers_survive_a_lost_board_connection_and_prepare_again(
    postgres_dsn: str,
) -> None:
    outcomes: list[Outcome] = []
    board = answer_board(postgres_dsn)
    try:
        await _run_answers(postgres_dsn, board, outcomes)
    finally:
        await board.aclose()
    assert outcomes == [Outcome.ALLOWED_ONCE] * 3


async def _run_answers(postgres_dsn: str, board: Any, outcomes: list[Outcome]) -> None:
    async with open_broker(store=postgres_dsn, policy="ask") as broker:
        async with broker.answerer(broker.remote_answerer()), broker.open_session() as session:
            for index in range(3):
                async with session.turn(), trio.open_nursery() as nursery:

                    async def ask(call_id: str = f"c{index}") -> None:
                        request = ApprovalRequest(
                            agent=session.agent, tool_name="bash", call_id=call_id
                        )
                        outcomes.append(await broker.request(request))

                    nursery.start_soon(ask)
                    (question_id,) = await _pending_id(broker)
                    if index == 1:
                        # The answering side's connection dies between two answers: the next
                        # answer says so in one line, nothing is stored, and the one after it
                        # connects again, prepares its statement there again, and is stored.
                        _terminate(postgres_dsn, board)
                        with pytest.raises(StoreError, match=r"lost its connection.*retry$"):
                            await board.answer(question_id, Outcome.REJECTED, "lost")
                    answer = await board.answer(question_id, Outcome.ALLOWED_ONCE, f"b{index}")
                    assert answer.outcome is Outcome.ALLOWED_ONCE
                # The same statement, second time on one connection: refused by what was recorded.
                with pytest.raises(AnswerRefusedError, match="settled as allowed-once"):
                    await board.answer(question_id, Outcome.REJECTED, "late")


async def test_text_libpq_cannot_carry_is_refused_before_it_is_sent(postgres_dsn: str) -> None:
    board = answer_board(postgres_dsn)
    try:
        await _refusals(postgres_dsn, board)
    finally:
        await board.aclose()


async def _refusals(postgres_dsn: str, board: Any) -> None:
    async with open_broker(store=postgres_dsn, policy="ask") as broker:
        async with broker.answerer(broker.remote_answerer()), broker.open_session() as session:
            async with session.turn(), trio.open_nursery() as nursery:
                outcomes: list[Outcome] = []

                async def ask() -> None:
                    request = ApprovalRequest(agent=session.agent, tool_name="bash")
                    outcomes.append(await broker.request(request))

                nursery.start_soon(ask)
                (question_id,) = await _pending_id(broker)
                # A NUL would cut a libpq text parameter short: "<id>\0x" must never be read as
                # "<id>", nor a name as its prefix.
                with pytest.raises(UnknownQuestionError, match="unknown question id"):
                    await board.answer(question_id + "\x00x", Outcome.ALLOWED_ONCE, "mallory")
                with pytest.raises(ValueError, match="by must not contain a NUL"):
                    await board.answer(question_id, Outcome.ALLOWED_ONCE, "ali\x00ce")
                # Nor can it carry a lone surrogate (json.loads makes one of "\ud800").
                with pytest.raises(UnknownQuestionError, match="unknown question id"):
                    await board.answer(question_id + "\ud800", Outcome.ALLOWED_ONCE, "mallory")
                with pytest.raises(ValueError, match="by must be text a store can write"):
                    await board.answer(question_id, Outcome.ALLOWED_ONCE, "ali\udc80ce")
                assert [q.id for q in await broker.pending()] == [question_id]
                await board.answer(question_id, Outcome.REJECTED, "ali\x01ce")
            assert outcomes == [Outcome.REJECTED]
