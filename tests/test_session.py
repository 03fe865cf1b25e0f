"""The session actor: turns, the documented teardown order, crash containment, bounded close."""

from __future__ import annotations

import pathlib
import re

import pytest
import trio
import trio.testing

from broker import (
    AnswerNext,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRequest,
    Broker,
    BrokerClosedError,
    Outcome,
    Session,
    SessionClosedError,
    SessionCrashedError,
    TurnEnd,
    TurnError,
    open_broker,
    serve_broker,
)
from broker.store import open_sqlite_store

from .conftest import lines_of, log_of, types_of


def req(session: Session) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name="bash")


async def hang(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


# -- turns ----------------------------------------------------------------------------------


async def test_turns_are_numbered_and_end_with_a_reason(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with approval_session.turn() as first:
        assert approval_session.state.turn_open
    with pytest.raises(KeyError):
        async with approval_session.turn():
            raise KeyError("boom")
    with trio.CancelScope() as scope:
        async with approval_session.turn() as third:
            scope.cancel()
            await trio.sleep_forever()
    assert (first, third) == (1, 3)
    assert lines_of(approval_broker, approval_session) == [
        '{"type":"turn/start","data":{"turn":1}}',
        '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}',
        '{"type":"turn/start","data":{"turn":2}}',
        '{"type":"turn/end","data":{"turn":2,"reason":{"kind":"error"}}}',
        '{"type":"turn/start","data":{"turn":3}}',
        '{"type":"turn/end","data":{"turn":3,"reason":{"kind":"cancelled"}}}',
    ]


async def test_turns_do_not_nest(approval_broker: Broker, approval_session: Session) -> None:
    async with approval_session.turn():
        with pytest.raises(
            TurnError,
            match=r"^session\.turn\(\) while turn 1 is open: turns do not nest; "
            r"end the current turn before starting another$",
        ):
            async with approval_session.turn():
                raise AssertionError("unreachable")
    assert types_of(approval_broker, approval_session) == ["turn/start", "turn/end"]


# -- teardown order ---------------------------------------------------------------------------


async def test_close_settles_pending_asks_then_ends_the_turn_then_cancels_the_nursery(
    approval_broker: Broker,
) -> None:
    session = await approval_broker.start_session()
    seen_at_nursery_cancel: list[list[str]] = []

    async def session_task(*, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            seen_at_nursery_cancel.append(types_of(approval_broker, session))

    await session.start(session_task)
    handle = await session.start_answerer(hang)
    results: list[Outcome] = []
    turn_entered = trio.Event()
    keep_turn_open = trio.Event()

    async def asker() -> None:
        async with session.turn():
            turn_entered.set()
            async with trio.open_nursery() as nursery:
                for _ in range(3):

                    async def one() -> None:
                        results.append(await approval_broker.request(req(session)))

                    nursery.start_soon(one)
            await keep_turn_open.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(asker)
        await turn_entered.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert session.pending == 3
        await session.aclose()
        keep_turn_open.set()

    assert results == [Outcome.CANCELLED] * 3
    assert handle.closed
    types = types_of(approval_broker, session)
    assert types == ["turn/start"] + ["approval/asked"] * 3 + ["approval/decided"] * 3 + [
        "turn/end"
    ]
    end = log_of(approval_broker, session)[-1]
    assert isinstance(end, TurnEnd)
    assert end.reason.kind == "closed"
    # Step 5 (cancel the nursery) ran after steps 2 and 3 had landed in the log.
    assert seen_at_nursery_cancel == [types]
    assert session not in approval_broker.sessions


async def test_close_stops_intake_first(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    release = trio.Event()

    async def slow(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        with trio.CancelScope(shield=True):
            await release.wait()
        return Outcome.ALLOWED_ONCE

    refused: list[str] = []
    async with approval_broker.answerer(slow), trio.open_nursery() as nursery:

        async def ask_then_close() -> None:
            async with session.turn():
                await approval_broker.request(req(session))

        nursery.start_soon(ask_then_close)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(session.aclose)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(SessionClosedError, match=r"which is closing"):
            await approval_broker.request(req(session))
        with pytest.raises(SessionClosedError, match=r"which is closing"):
            await approval_broker.grant(session, "bash")
        refused.append("yes")
        release.set()
    assert refused == ["yes"]
    decided = log_of(approval_broker, session)[2]
    assert getattr(decided, "outcome", None) is Outcome.CANCELLED


async def test_close_is_bounded_by_settle_grace(autojump_clock: trio.testing.MockClock) -> None:
    release = trio.Event()

    async def stuck(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        with trio.CancelScope(shield=True):
            await release.wait()
        return Outcome.ALLOWED_ONCE

    async with open_broker(settle_grace=2.0) as broker:
        session = await broker.start_session()
        async with broker.answerer(stuck), trio.open_nursery() as nursery:

            async def ask() -> None:
                async with session.turn():
                    with pytest.raises(SessionClosedError):
                        await broker.request(req(session))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            with trio.fail_after(10):
                await session.aclose()
            assert trio.current_time() - start == pytest.approx(2.0)
            release.set()
        # The unsettled question is left unmatched for recovery; nothing was allowed.
        assert "approval/decided" not in types_of(broker, session)


async def test_close_is_idempotent_and_later_use_is_refused(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    await session.aclose()
    await session.aclose()
    assert not session.is_open
    with pytest.raises(SessionClosedError, match=r"which is closed: cannot start a task in it"):
        await session.start_answerer(hang)
    with pytest.raises(SessionClosedError):
        async with session.turn():
            raise AssertionError("unreachable")


# -- crash containment ------------------------------------------------------------------------


async def test_a_crashing_session_leaves_the_others_answering(approval_broker: Broker) -> None:
    doomed = await approval_broker.start_session()
    healthy = await approval_broker.start_session()

    async def allow(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    await doomed.start_answerer(allow)
    await healthy.start_answerer(allow)

    async def crash() -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("channel reader failed")

    doomed.start_soon(crash)
    with trio.fail_after(5):
        await doomed.wait_closed()
    # The session nursery is a detail: the crash cause is the task's own error, unwrapped.
    assert isinstance(doomed.crash_cause, RuntimeError)
    assert str(doomed.crash_cause) == "channel reader failed"
    with pytest.raises(
        SessionCrashedError,
        match=re.escape(f"req.agent belongs to session {doomed.id}, which crashed"),
    ):
        await approval_broker.request(req(doomed))
    async with healthy.turn():
        assert await approval_broker.request(req(healthy)) is Outcome.ALLOWED_ONCE
    assert doomed not in approval_broker.sessions
    assert healthy in approval_broker.sessions


async def test_crash_mid_question_fails_the_question_and_leaves_it_for_recovery(
    approval_broker: Broker,
) -> None:
    session = await approval_broker.start_session()
    errors: list[BaseException] = []

    async def ask() -> None:
        async with session.turn():
            try:
                await approval_broker.request(req(session))
            except SessionCrashedError as exc:
                errors.append(exc)

    async def crash() -> None:
        raise RuntimeError("boom")

    # The answerer lives outside the crashing session, so only the crash withdraws the question.
    async with approval_broker.answerer(hang), trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        session.start_soon(crash)
    assert len(errors) == 1
    assert types_of(approval_broker, session) == ["turn/start", "approval/asked"]


async def test_crash_that_takes_the_answerer_with_it_never_allows(
    approval_broker: Broker,
) -> None:
    """The answerer's task dies in the crash: whichever withdrawal lands first, the question
    either settles ``unavailable`` with its pair or raises and is left for recovery."""
    session = await approval_broker.start_session()
    await session.start_answerer(hang)
    settled: list[object] = []

    async def ask() -> None:
        async with session.turn():
            try:
                settled.append(await approval_broker.request(req(session)))
            except SessionCrashedError as exc:
                settled.append(exc)

    async def crash() -> None:
        raise RuntimeError("boom")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        session.start_soon(crash)
    [result] = settled
    types = types_of(approval_broker, session)
    if isinstance(result, SessionCrashedError):
        assert types == ["turn/start", "approval/asked"]
    else:
        assert result is Outcome.UNAVAILABLE
        assert types == ["turn/start", "approval/asked", "approval/decided"]


# -- the broker's lifetime --------------------------------------------------------------------


async def test_broker_close_settles_every_session() -> None:
    results: list[Outcome] = []
    async with open_broker() as broker:
        sessions = [await broker.start_session() for _ in range(3)]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                await session.start_answerer(hang)

                async def ask(s: Session = session) -> None:
                    async with s.turn():
                        results.append(await broker.request(req(s)))

                nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            await broker.aclose()
        with pytest.raises(BrokerClosedError, match=r"^broker is shutting down"):
            await broker.start_session()
    assert results == [Outcome.CANCELLED] * 3
    for session in sessions:
        assert types_of(broker, session)[-2:] == ["approval/decided", "turn/end"]


async def test_serve_broker_runs_as_a_task() -> None:
    async with trio.open_nursery() as nursery:
        broker: Broker = await nursery.start(serve_broker)
        session = await broker.start_session()
        async with session.turn():
            assert await broker.request(req(session)) is Outcome.UNAVAILABLE
        nursery.cancel_scope.cancel()
    assert not session.is_open


async def test_parent_must_be_an_open_session(approval_broker: Broker) -> None:
    with pytest.raises(TypeError, match=r"^parent must be a Session or an Agent, got str: "):
        await approval_broker.start_session("root")  # type: ignore[arg-type]
    closed = await approval_broker.start_session()
    await closed.aclose()
    with pytest.raises(SessionClosedError, match=r"^parent belongs to session .*, which is closed"):
        await approval_broker.start_session(closed)


async def test_concurrent_asks_on_a_durable_store_keep_pairs_ordered_and_share_commits(
    tmp_path: pathlib.Path,
) -> None:
    async def allow(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    outcomes: list[Outcome] = []
    async with open_sqlite_store(tmp_path / "s.db") as store:
        async with open_broker(store=store) as broker, broker.open_session() as session:
            async with broker.answerer(allow), session.turn(), trio.open_nursery() as nursery:
                for _ in range(50):

                    async def one() -> None:
                        outcomes.append(await broker.request(req(session)))

                    nursery.start_soon(one)
        events = await store.read(session.id)
        transactions = store.transactions_committed
    assert outcomes == [Outcome.ALLOWED_ONCE] * 50
    asked = [e.id for e in events if isinstance(e, ApprovalAsked)]
    for question in asked:
        positions = [i for i, e in enumerate(events) if getattr(e, "id", None) == question]
        assert len(positions) == 2
        assert isinstance(events[positions[1]], ApprovalDecided)
    # 102 events (turn start/end + 50 pairs) in fewer transactions: group commit shared them.
    assert len(events) == 102
    assert transactions < 102


async def test_add_answerer_lives_as_long_as_the_session(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    other = await approval_broker.start_session()

    async def allow(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    handle = session.add_answerer(allow)
    async with session.turn():
        assert await approval_broker.request(req(session)) is Outcome.ALLOWED_ONCE
    async with other.turn():  # scoped: another session's agent never reaches it
        assert await approval_broker.request(req(other)) is Outcome.UNAVAILABLE
    await session.aclose()
    assert handle.closed
    with pytest.raises(SessionClosedError, match=r"which is closed: cannot add an answerer to"):
        session.add_answerer(allow)


async def test_a_task_failing_before_started_fails_its_start_not_the_session(
    approval_broker: Broker,
) -> None:
    session = await approval_broker.start_session()

    async def refuses(*, task_status: trio.TaskStatus[None]) -> None:  # noqa: ASYNC114, ASYNC128 (fails before started)
        await trio.lowlevel.checkpoint()
        raise OSError("could not start")

    with pytest.raises(OSError, match=r"^could not start$"):
        await session.start(refuses)
    assert session.is_open
    assert session.crash_cause is None
    async with session.turn():
        pass


async def test_a_turn_cancelled_while_entering_is_still_ended(tmp_path: pathlib.Path) -> None:
    async with open_broker(store=tmp_path / "log.sqlite") as broker:
        session = await broker.start_session()
        with trio.CancelScope() as scope:
            scope.cancel()  # pending before turn() even asks for its turn/start
            async with session.turn():
                raise AssertionError("the body must not run")
        assert not session.state.turn_open
        async with session.turn() as number:  # the session is not wedged
            assert number == 2  # turn 1 landed, and was ended as cancelled
