"""The request algorithm of spec section 3, path by path, with the audit pair checked each time."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from broker import (
    AbortSignal,
    AnswerNext,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRequest,
    AuditAppendError,
    Broker,
    MemoryStore,
    Outcome,
    Session,
    SessionClosedError,
    TurnError,
    open_broker,
)
from broker._texts import OUTSIDE_TURN

from .conftest import lines_of, log_of, types_of

EXACT_OUTSIDE_TURN = (
    "approval.request() outside an open turn: the approval/asked + approval/decided audit pair "
    "must be turn-enclosed (a bare event between turns is crash-tail garbage on reload). Ask from "
    "inside the turn that needs the decision."
)


def req(session: Session, tool: str = "bash", **kw: object) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name=tool, **kw)  # type: ignore[arg-type]


def answering(outcome: object) -> Callable[[ApprovalRequest, AnswerNext], Awaitable[Outcome]]:
    async def answer(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return outcome  # type: ignore[return-value]

    return answer


def pairs(broker: Broker, session: Session) -> list[tuple[ApprovalAsked, ApprovalDecided]]:
    """Every asked with its decided; asserts each asked has exactly one decided, after it."""
    events = log_of(broker, session)
    asked = [e for e in events if isinstance(e, ApprovalAsked)]
    result = []
    for a in asked:
        decided = [e for e in events if isinstance(e, ApprovalDecided) and e.id == a.id]
        assert len(decided) == 1, f"asked {a.id} has {len(decided)} decided events"
        assert events.index(decided[0]) > events.index(a)
        result.append((a, decided[0]))
    assert len([e for e in events if isinstance(e, ApprovalDecided)]) == len(asked)
    return result


# -- 3.1 the turn check -------------------------------------------------------------------


def test_outside_turn_text_is_the_spec_text() -> None:
    assert OUTSIDE_TURN == EXACT_OUTSIDE_TURN


async def test_idle_ask_raises_exact_text_and_appends_nothing(
    approval_broker: Broker, approval_session: Session
) -> None:
    with pytest.raises(TurnError, match=rf"^{re.escape(EXACT_OUTSIDE_TURN)}$"):
        await approval_broker.request(req(approval_session))
    assert log_of(approval_broker, approval_session) == []
    assert approval_session.pending == 0


async def test_between_turns_ask_raises_and_appends_nothing(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_session.turn():
        pass
    before = lines_of(approval_broker, approval_session)
    with pytest.raises(TurnError, match=rf"^{re.escape(EXACT_OUTSIDE_TURN)}$"):
        await approval_broker.request(req(approval_session))
    assert lines_of(approval_broker, approval_session) == before
    assert types_of(approval_broker, approval_session) == ["turn/start", "turn/end"]


# -- the audit pair -------------------------------------------------------------------------


async def test_no_answerer_is_unavailable_with_a_matching_pair(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_session.turn():
        outcome = await approval_broker.request(
            req(approval_session, call_id="call_00_1", reason="write escalated.txt")
        )
    assert outcome is Outcome.UNAVAILABLE
    assert types_of(approval_broker, approval_session) == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]
    [(asked, decided)] = pairs(approval_broker, approval_session)
    assert asked.id == decided.id
    assert uuid.UUID(asked.id).version == 4
    line_asked, line_decided = lines_of(approval_broker, approval_session)[1:3]
    assert line_asked == (
        f'{{"type":"approval/asked","data":{{"id":"{asked.id}","toolName":"bash",'
        '"callId":"call_00_1","reason":"write escalated.txt"}}'
    )
    assert line_decided == (
        f'{{"type":"approval/decided","data":{{"id":"{asked.id}","outcome":"unavailable",'
        '"source":"no-answerer"}}'
    )


async def test_optional_fields_are_omitted_and_display_reason_never_logged(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_session.turn():
        await approval_broker.request(req(approval_session, display_reason="Shown only"))
    line = lines_of(approval_broker, approval_session)[1]
    data = line.split('"data":', 1)[1]
    assert "callId" not in data
    assert "reason" not in data
    assert "Shown only" not in "".join(lines_of(approval_broker, approval_session))
    assert "null" not in "".join(lines_of(approval_broker, approval_session))


async def test_fresh_id_per_request(approval_broker: Broker, approval_session: Session) -> None:
    async with approval_session.turn():
        for _ in range(5):
            await approval_broker.request(req(approval_session))
    ids = [a.id for a, _ in pairs(approval_broker, approval_session)]
    assert len(ids) == len(set(ids)) == 5


async def test_parallel_requests_each_get_their_pair(
    approval_broker: Broker, approval_session: Session
) -> None:
    outcomes: list[Outcome] = []
    async with approval_broker.answerer(answering(Outcome.REJECTED)):
        async with approval_session.turn():
            async with trio.open_nursery() as nursery:
                for _ in range(20):

                    async def one() -> None:
                        outcomes.append(await approval_broker.request(req(approval_session)))

                    nursery.start_soon(one)
    assert outcomes == [Outcome.REJECTED] * 20
    assert len(pairs(approval_broker, approval_session)) == 20


# -- the waterfall --------------------------------------------------------------------------


async def test_answerer_receives_the_request_object_itself(
    approval_broker: Broker, approval_session: Session
) -> None:
    seen: list[ApprovalRequest] = []

    async def answer(r: ApprovalRequest, _next: AnswerNext) -> Outcome:
        seen.append(r)
        return Outcome.ALLOWED_ONCE

    question = req(approval_session, display_reason="Allow bash?")
    async with approval_broker.answerer(answer), approval_session.turn():
        assert await approval_broker.request(question) is Outcome.ALLOWED_ONCE
    assert len(seen) == 1
    assert seen[0] is question


async def test_first_answer_wins_the_second_is_never_called(
    approval_broker: Broker, approval_session: Session
) -> None:
    calls: list[str] = []

    async def first(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        calls.append("first")
        return Outcome.REJECTED

    async def second(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        calls.append("second")
        return Outcome.ALLOWED_ONCE

    async with approval_broker.answerer(first), approval_broker.answerer(second):
        async with approval_session.turn():
            assert await approval_broker.request(req(approval_session)) is Outcome.REJECTED
    assert calls == ["first"]
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.REJECTED


async def test_delegation_with_next_runs_down_to_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    calls: list[str] = []

    def delegating(name: str) -> Callable[[ApprovalRequest, AnswerNext], Awaitable[Outcome]]:
        async def answer(_r: ApprovalRequest, next_: AnswerNext) -> Outcome:
            calls.append(name)
            return await next_()

        return answer

    async with (
        approval_broker.answerer(delegating("a")),
        approval_broker.answerer(delegating("b")),
        approval_session.turn(),
    ):
        assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE
    assert calls == ["a", "b"]


async def test_next_called_twice_consults_the_rest_once(
    approval_broker: Broker, approval_session: Session
) -> None:
    behind: list[int] = []

    async def gate(_r: ApprovalRequest, next_: AnswerNext) -> Outcome:
        await next_()
        return await next_()

    async def terminal(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        behind.append(1)
        return Outcome.ALLOWED_ONCE

    async with approval_broker.answerer(gate), approval_broker.answerer(terminal):
        async with approval_session.turn():
            assert await approval_broker.request(req(approval_session)) is Outcome.ALLOWED_ONCE
    assert behind == [1]


async def test_dispatch_order_unscoped_scoped_and_prepend_foreign_never_called(
    approval_broker: Broker,
) -> None:
    order: list[str] = []

    def recorder(name: str) -> Callable[[ApprovalRequest, AnswerNext], Awaitable[Outcome]]:
        async def answer(_r: ApprovalRequest, next_: AnswerNext) -> Outcome:
            order.append(name)
            return await next_()

        return answer

    async with approval_broker.open_session() as mine, approval_broker.open_session() as other:
        async with (
            approval_broker.answerer(recorder("unscoped-1")),
            approval_broker.answerer(recorder("scoped-mine"), scope=mine.agent),
            approval_broker.answerer(recorder("foreign"), scope=other.agent),
            approval_broker.answerer(recorder("unscoped-2")),
            approval_broker.answerer(recorder("gate"), prepend=True),
            approval_broker.answerer(recorder("gate-2"), scope=mine.agent, prepend=True),
            mine.turn(),
        ):
            assert await approval_broker.request(req(mine)) is Outcome.UNAVAILABLE
    assert order == ["gate-2", "gate", "unscoped-1", "scoped-mine", "unscoped-2"]


async def test_scope_is_by_agent_identity(approval_broker: Broker) -> None:
    """Two sessions' agents are never confused, whatever their ids look like."""
    calls: list[str] = []

    async def mine_only(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        calls.append("mine")
        return Outcome.ALLOWED_ONCE

    async with approval_broker.open_session() as a, approval_broker.open_session() as b:
        async with approval_broker.answerer(mine_only, scope=a.agent), b.turn():
            assert await approval_broker.request(req(b)) is Outcome.UNAVAILABLE
    assert calls == []


# -- containment ------------------------------------------------------------------------------


async def test_raising_async_answerer_is_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def boom(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("answerer bug")

    async with approval_broker.answerer(boom), approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE
    assert len(pairs(approval_broker, approval_session)) == 1


async def test_raising_sync_answerer_is_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    def boom(_r: ApprovalRequest, _n: AnswerNext) -> Awaitable[Outcome]:
        raise RuntimeError("raised before returning an awaitable")

    async with approval_broker.answerer(boom), approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE


async def test_sync_answerer_returning_a_plain_value_is_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    def not_async(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        return Outcome.ALLOWED_ONCE

    async with approval_broker.answerer(not_async), approval_session.turn():  # type: ignore[arg-type]
        assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE


@pytest.mark.parametrize("garbage", [None, True, "allow", "ALLOWED-ONCE", 1, object()])
async def test_garbage_answer_is_unavailable(
    approval_broker: Broker, approval_session: Session, garbage: object
) -> None:
    async with approval_broker.answerer(answering(garbage)), approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.UNAVAILABLE


async def test_vocabulary_string_answer_is_accepted(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_broker.answerer(answering("rejected")), approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.REJECTED


# -- abort and cancellation -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["abort-signal", "trio-event"])
async def test_already_aborted_is_cancelled_without_asking(
    approval_broker: Broker, approval_session: Session, kind: str
) -> None:
    signal: AbortSignal | trio.Event
    if kind == "abort-signal":
        signal = AbortSignal()
        signal.abort("gone")
    else:
        signal = trio.Event()
        signal.set()
    called: list[int] = []

    async def answer(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        called.append(1)
        return Outcome.ALLOWED_ONCE

    async with approval_broker.answerer(answer), approval_session.turn():
        outcome = await approval_broker.request(req(approval_session, signal=signal))
    assert outcome is Outcome.CANCELLED
    assert called == []
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.CANCELLED


@pytest.mark.parametrize("kind", ["abort-signal", "trio-event"])
@pytest.mark.parametrize("late", ["answer", "error"])
async def test_abort_mid_question_drops_the_late_answer(
    approval_broker: Broker, approval_session: Session, kind: str, late: str
) -> None:
    release = trio.Event()
    answered: list[str] = []

    async def stubborn(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        # Shielded: this answerer answers after the question was withdrawn.
        with trio.CancelScope(shield=True):
            await release.wait()
        answered.append(late)
        if late == "error":
            raise RuntimeError("late failure")
        return Outcome.ALLOWED_ONCE

    signal: AbortSignal | trio.Event = AbortSignal() if kind == "abort-signal" else trio.Event()
    result: list[Outcome] = []
    async with approval_broker.answerer(stubborn), approval_session.turn():
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                result.append(await approval_broker.request(req(approval_session, signal=signal)))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            if isinstance(signal, AbortSignal):
                signal.abort()
            else:
                signal.set()
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert result == [Outcome.CANCELLED]
    assert answered == [late]
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.CANCELLED


async def test_caller_cancellation_appends_decided_then_propagates(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def hang(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    reached: list[str] = []
    async with approval_broker.answerer(hang), approval_session.turn():
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_soon() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()

                nursery.start_soon(cancel_soon)
                try:
                    await approval_broker.request(req(approval_session))
                except trio.Cancelled:
                    reached.append("cancelled")
                    raise
        assert scope.cancelled_caught
    assert reached == ["cancelled"]
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.CANCELLED
    assert approval_session.pending == 0


async def test_caller_cancelled_while_asked_is_queued_still_pairs(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_session.turn():
        with trio.CancelScope() as scope:
            scope.cancel()
            await approval_broker.request(req(approval_session))
    assert scope.cancelled_caught
    # Either nothing landed or a complete pair did: never a dangling asked.
    assert all(d.outcome is Outcome.CANCELLED for _, d in pairs(approval_broker, approval_session))


# -- answerer lifetimes -----------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["returns", "cancelled", "crashes"])
async def test_answerer_task_end_makes_the_next_ask_unavailable(
    approval_broker: Broker, approval_session: Session, ending: str
) -> None:
    class Crash(Exception):
        pass

    async with approval_session.turn():
        with trio.fail_after(5):
            try:
                async with trio.open_nursery() as nursery:
                    handle = await nursery.start(
                        approval_broker.serve_answerer, answering(Outcome.ALLOWED_ONCE)
                    )
                    assert await approval_broker.request(req(approval_session)) is (
                        Outcome.ALLOWED_ONCE
                    )
                    if ending == "returns":
                        handle.close()
                    elif ending == "cancelled":
                        nursery.cancel_scope.cancel()
                    else:
                        raise Crash
            except* Crash:
                pass
            assert await approval_broker.request(req(approval_session)) is Outcome.UNAVAILABLE
    outcomes = [d.outcome for _, d in pairs(approval_broker, approval_session)]
    assert outcomes == [Outcome.ALLOWED_ONCE, Outcome.UNAVAILABLE]


async def test_answerer_block_exit_mid_question_fails_closed(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def hang(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    result: list[Outcome] = []
    async with approval_session.turn(), trio.open_nursery() as nursery:
        holder = trio.CancelScope()

        async def hold() -> None:
            with holder:
                async with approval_broker.answerer(hang):
                    await trio.sleep_forever()

        async def ask() -> None:
            result.append(await approval_broker.request(req(approval_session)))

        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        holder.cancel()
    assert result == [Outcome.UNAVAILABLE]


# -- append failures ---------------------------------------------------------------------


async def test_asked_append_failure_raises_and_decides_nothing() -> None:
    store = MemoryStore()
    called: list[int] = []

    async def answer(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        called.append(1)
        return Outcome.ALLOWED_ONCE

    async with open_broker(store=store) as broker, broker.open_session() as session:
        async with broker.answerer(answer), session.turn():
            store.fail_appends = "database or disk is full"
            with pytest.raises(
                AuditAppendError,
                match=rf"^could not append approval/asked to session {session.id}: "
                r"database or disk is full$",
            ):
                await broker.request(req(session))
            store.fail_appends = None
            # The service stays usable after the failure.
            assert await broker.request(req(session)) is Outcome.ALLOWED_ONCE
    assert called == [1]
    events = store.read_nowait(session.id)
    assert [e.TYPE for e in events] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]


async def test_decided_append_failure_raises_leaving_the_asked_unmatched() -> None:
    store = MemoryStore()

    async def answer(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        store.fail_appends = "disk full"
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    async with open_broker(store=store) as broker, broker.open_session() as session:
        async with broker.answerer(answer):
            async with session.turn():
                with pytest.raises(AuditAppendError, match=r"^could not append approval/decided"):
                    await broker.request(req(session))
                store.fail_appends = None
    events = store.read_nowait(session.id)
    assert [e.TYPE for e in events] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]
    # The failed decision has no task left to pair it: leaving the turn closes it inside the
    # turn as recovery would after a crash — never as the answer that could not be recorded.
    asked, decided = events[1], events[2]
    assert isinstance(asked, ApprovalAsked)
    assert decided == ApprovalDecided(id=asked.id, outcome=Outcome.CANCELLED, recovered=True)


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["", "   ", None, 3])
async def test_empty_tool_name_is_refused_at_construction(
    approval_session: Session, tool: object
) -> None:
    with pytest.raises(
        ValueError,
        match=r"^tool_name must be a non-empty string, got .*: name the tool that needs approval$",
    ):
        ApprovalRequest(agent=approval_session.agent, tool_name=tool)  # type: ignore[arg-type]


async def test_request_for_an_agent_of_a_closed_session_is_refused(
    approval_broker: Broker,
) -> None:
    session = await approval_broker.start_session()
    question = req(session)
    await session.aclose()
    with pytest.raises(
        SessionClosedError,
        match=rf"^req\.agent belongs to session {session.id}, which is closed: cannot use it; "
        r"use an open session$",
    ):
        await approval_broker.request(question)
    assert log_of(approval_broker, session) == []


async def test_request_refuses_other_types(approval_broker: Broker) -> None:
    with pytest.raises(TypeError, match=r"^req must be an ApprovalRequest, got dict: "):
        await approval_broker.request({"tool_name": "bash"})  # type: ignore[arg-type]


async def test_signal_of_the_wrong_type_is_refused(approval_session: Session) -> None:
    with pytest.raises(TypeError, match=r"^signal must be an AbortSignal, a trio.Event or None"):
        req(approval_session, signal=object())


async def test_a_gate_cannot_turn_a_lost_answerer_into_an_allow(
    approval_broker: Broker, approval_session: Session
) -> None:
    gate_saw: list[Outcome] = []

    async def generous_gate(_r: ApprovalRequest, next_: AnswerNext) -> Outcome:
        try:
            gate_saw.append(await next_())
        finally:
            # Whatever the terminal answerer did, this gate would allow.
            return Outcome.ALLOWED_ONCE  # noqa: B012

    result: list[Outcome] = []
    async with approval_session.turn(), trio.open_nursery() as nursery:
        holder = trio.CancelScope()

        async def hold_terminal() -> None:
            with holder:
                async with approval_broker.answerer(hang_forever):
                    await trio.sleep_forever()

        nursery.start_soon(hold_terminal)
        await trio.testing.wait_all_tasks_blocked()
        async with approval_broker.answerer(generous_gate, prepend=True):

            async def ask() -> None:
                result.append(await approval_broker.request(req(approval_session)))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()
            await trio.testing.wait_all_tasks_blocked()
    assert result == [Outcome.UNAVAILABLE]
    assert gate_saw == []
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.UNAVAILABLE


async def hang_forever(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def test_a_decision_made_is_recorded_even_if_the_caller_is_cancelled_right_after(
    approval_broker: Broker, approval_session: Session
) -> None:
    """The answer and the caller's cancellation land in the same pass: the log records the
    answer (here: unavailable because the answerer's channel died), not ``cancelled``."""
    results: list[str] = []
    async with approval_session.turn():
        with trio.CancelScope() as scope:

            async def channel_dies(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
                await trio.lowlevel.checkpoint()
                scope.cancel()  # the caller is cancelled while this answer is being returned
                return Outcome.UNAVAILABLE

            async with approval_broker.answerer(channel_dies):
                try:
                    results.append(await approval_broker.request(req(approval_session)))
                    await trio.lowlevel.checkpoint()
                except trio.Cancelled:
                    results.append("cancelled at the next checkpoint")
                    raise
    assert results == [Outcome.UNAVAILABLE, "cancelled at the next checkpoint"]
    [(_, decided)] = pairs(approval_broker, approval_session)
    assert decided.outcome is Outcome.UNAVAILABLE


async def test_an_error_inside_the_open_broker_block_propagates() -> None:
    """Closing the broker must not swallow the exception the block is leaving with (it did:
    a checkpoint after cancelling the root nursery raised Cancelled in its place), nor wrap
    it in a group (the root nursery is a detail; see tests/test_propagation.py)."""
    with trio.fail_after(5):
        with pytest.raises(LookupError, match=r"^from the block$"):
            async with open_broker() as broker, broker.open_session():
                raise LookupError("from the block")
