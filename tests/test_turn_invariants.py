"""Invariants before commit: the session refuses what ``broker log verify`` would reject.

Leaving a turn with questions pending first withdraws them (each settles ``cancelled``, its pair
inside the turn), then ends the turn; a randomized run over many sessions on a real SQLite file is
checked afterwards by ``broker log verify``'s own code.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRequest,
    AuditInvariantError,
    Broker,
    Outcome,
    Session,
    TurnEnd,
    TurnEndReason,
    TurnError,
    open_broker,
)
from broker._texts import OUTSIDE_TURN
from broker.store._logtools import verify_store

from .conftest import log_of


async def _hang(_req: ApprovalRequest, _next: Any) -> Outcome:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def _allow(_req: ApprovalRequest, _next: Any) -> Outcome:
    await trio.lowlevel.checkpoint()
    return Outcome.ALLOWED_ONCE


async def test_leaving_a_turn_settles_its_pending_questions_first(
    approval_broker: Broker, approval_session: Session
) -> None:
    outcomes: list[Outcome] = []

    async def ask() -> None:
        outcomes.append(
            await approval_broker.request(
                ApprovalRequest(agent=approval_session.agent, tool_name="bash")
            )
        )

    with trio.fail_after(10):
        async with approval_broker.answerer(_hang), trio.open_nursery() as nursery:
            async with approval_session.turn():
                nursery.start_soon(ask)
                nursery.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked()
                assert approval_session.pending == 2
            # The turn's exit waited for both pairs, then ended the turn.
            assert approval_session.pending == 0
    assert outcomes == [Outcome.CANCELLED, Outcome.CANCELLED]
    types = [e.TYPE for e in log_of(approval_broker, approval_session)]
    assert types == [
        "turn/start",
        "approval/asked",
        "approval/asked",
        "approval/decided",
        "approval/decided",
        "turn/end",
    ]
    end = log_of(approval_broker, approval_session)[-1]
    assert end == TurnEnd(turn=1, reason=TurnEndReason(kind="completed"))


async def test_a_question_asked_while_its_turn_is_ending_is_refused_out_of_turn(
    approval_broker: Broker, approval_session: Session
) -> None:
    refused: list[str] = []

    async def hang_then_ask(req: ApprovalRequest, _next: Any) -> Outcome:
        try:
            await trio.sleep_forever()
        finally:
            # The turn is ending (its questions are being withdrawn): a new ask is refused.
            late = ApprovalRequest(agent=req.agent, tool_name="edit")
            try:
                # Refused before any checkpoint, so the cancelled context does not matter.
                await approval_broker.request(late)  # noqa: ASYNC102
            except TurnError as exc:
                refused.append(str(exc))
        raise AssertionError("unreachable")

    with trio.fail_after(10):
        async with approval_broker.answerer(hang_then_ask), trio.open_nursery() as nursery:
            async with approval_session.turn():
                nursery.start_soon(
                    approval_broker.request,
                    ApprovalRequest(agent=approval_session.agent, tool_name="bash"),
                )
                await trio.testing.wait_all_tasks_blocked()
    assert refused == [OUTSIDE_TURN]
    asked = [e for e in log_of(approval_broker, approval_session) if isinstance(e, ApprovalAsked)]
    assert [a.tool_name for a in asked] == ["bash"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda state: ApprovalDecided(id="nope", outcome=Outcome.ALLOWED_ONCE),
            "rule pairing: approval/decided id 'nope' answers no pending approval/asked "
            "(every asked has exactly one decided, after it)",
        ),
        (
            lambda state: TurnEnd(turn=state.turn, reason=TurnEndReason(kind="completed")),
            "rule turn-enclosure: turn/end 1 while 1 of its questions are pending "
            "(each question's approval/decided comes before its turn ends)",
        ),
    ],
)
async def test_the_session_refuses_to_commit_what_verify_would_reject(
    approval_broker: Broker, approval_session: Session, make: Any, message: str
) -> None:
    with trio.fail_after(10):
        async with approval_broker.answerer(_hang), trio.open_nursery() as nursery:
            async with approval_session.turn():
                nursery.start_soon(
                    approval_broker.request,
                    ApprovalRequest(agent=approval_session.agent, tool_name="bash"),
                )
                await trio.testing.wait_all_tasks_blocked()
                before = log_of(approval_broker, approval_session)
                with pytest.raises(
                    AuditInvariantError,
                    match=rf"^session {approval_session.id} refused \S+: {re.escape(message)}$",
                ):
                    await approval_session.log.append(make, internal=True)
                assert log_of(approval_broker, approval_session) == before


async def test_a_second_decided_is_refused(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_broker.answerer(_allow), approval_session.turn():
        decision = await approval_broker.request_decision(
            ApprovalRequest(agent=approval_session.agent, tool_name="bash")
        )
        again = ApprovalDecided(id=decision.id, outcome=Outcome.ALLOWED_ONCE)
        with pytest.raises(AuditInvariantError, match=r"rule pairing"):
            await approval_session.log.append(again, internal=True)
    decided = [
        e for e in log_of(approval_broker, approval_session) if isinstance(e, ApprovalDecided)
    ]
    assert len(decided) == 1


# -- randomized: turns open and close while questions are pending, on many sessions ----------

_step = st.tuples(
    st.integers(min_value=0, max_value=3),  # which session
    st.sampled_from(["ask", "end-turn", "start-turn", "answer"]),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=5, max_size=40))
def test_random_turns_and_questions_keep_the_log_verifiable(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, str]]
) -> None:
    path: pathlib.Path = tmp_path_factory.mktemp("random") / "log.sqlite"
    # No mock clock: the store's worker thread is invisible to an autojump clock. The steps are
    # interleaved by scheduling passes, not by time.
    trio.run(_random_run, path, steps)
    verify_store(path)  # raises VerifyError naming the first broken rule


_SET = trio.Event()
_SET.set()


async def _random_run(path: pathlib.Path, steps: list[tuple[int, str]]) -> None:
    gates: dict[str, trio.Event] = {}

    async def wait_for_gate(req: ApprovalRequest, _next: Any) -> Outcome:
        gate = gates.setdefault(req.agent.session.id, trio.Event())
        await gate.wait()
        return Outcome.ALLOWED_ONCE

    async def ask(broker: Broker, session: Session) -> None:
        with contextlib.suppress(TurnError):
            await broker.request(ApprovalRequest(agent=session.agent, tool_name="bash"))

    async def hold(session: Session, stop: trio.Event, left: trio.Event) -> None:
        try:
            async with session.turn():
                await stop.wait()
        finally:
            left.set()

    with trio.fail_after(60):
        async with open_broker(store=path) as broker:
            async with broker.answerer(wait_for_gate), trio.open_nursery() as nursery:
                sessions = [await broker.start_session() for _ in range(4)]
                stops: dict[int, trio.Event] = {}
                left: dict[int, trio.Event] = {}
                for index, action in steps:
                    session = sessions[index]
                    if action == "ask":
                        nursery.start_soon(ask, broker, session)
                    elif action == "start-turn" and index not in stops:
                        # Turns do not nest: the previous one must have ended first.
                        await left.get(index, _SET).wait()
                        stops[index], left[index] = trio.Event(), trio.Event()
                        nursery.start_soon(hold, session, stops[index], left[index])
                    elif action == "end-turn" and index in stops:
                        stops.pop(index).set()
                    elif action == "answer":
                        gates.pop(session.id, trio.Event()).set()
                    for _ in range(3):
                        await trio.lowlevel.checkpoint()
                for stop in stops.values():
                    stop.set()
                for gate in gates.values():
                    gate.set()
