"""Every error leaves every context manager and serve function as itself (issue: no swallowing).

Each case raises a fresh exception object in the body and checks that the very same object comes
out — not a ``Cancelled`` that replaced it, not nothing, not an ``ExceptionGroup`` around it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from broker import (
    ApprovalRequest,
    AuditAppendError,
    Broker,
    MemoryStore,
    Outcome,
    TurnEnd,
    open_broker,
    serve_broker,
)
from broker._collapse import collapse_single, single_exception
from broker._composition import Composition
from broker.acp import JsonRpcConnection
from broker.acp._agent import serve_acp
from broker.agent import Scenario
from broker.scenarios import scenario_path
from broker.store import open_sqlite_store
from broker.tools import PlainExecutor

from .conftest import log_of

ERRORS: list[Callable[[], BaseException]] = [
    lambda: ValueError("boom"),
    lambda: AssertionError("an assertion inside the block"),
    lambda: KeyboardInterrupt(),
    lambda: AuditAppendError("could not append"),
]
IDS = ["ValueError", "AssertionError", "KeyboardInterrupt", "AuditAppendError"]


def raises_itself(error: BaseException) -> pytest.RaisesExc[BaseException]:
    """Match exactly *error* (the same object), never a group around it."""
    return pytest.raises(type(error), check=lambda exc: exc is error)


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_open_broker_lets_the_body_error_out(make: Callable[[], BaseException]) -> None:
    error = make()
    with trio.fail_after(10), raises_itself(error):
        async with open_broker():
            raise error


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_open_broker_with_sessions_and_a_pending_question_lets_the_error_out(
    make: Callable[[], BaseException],
) -> None:
    error = make()
    outcomes: list[Outcome] = []
    store = MemoryStore()

    async def ask(broker: Broker, session: Any) -> None:
        outcomes.append(
            await broker.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
        )

    async def never_answers(_req: ApprovalRequest, _next: Any) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(10), raises_itself(error):
        async with open_broker(store=store) as broker:
            session = await broker.start_session()
            async with broker.answerer(never_answers), session.turn():
                # The asking task lives in the session's nursery: the closing session settles
                # its question before it cancels that nursery.
                session.start_soon(ask, broker, session)
                await trio.testing.wait_all_tasks_blocked()
                assert session.pending == 1
                raise error
    assert outcomes == [Outcome.CANCELLED]
    types = [e.TYPE for e in store.read_nowait(session.id)]
    assert types == ["turn/start", "approval/asked", "approval/decided", "turn/end"]


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_open_broker_on_sqlite_lets_the_body_error_out(
    make: Callable[[], BaseException], tmp_path: pathlib.Path
) -> None:
    error = make()
    with trio.fail_after(10), raises_itself(error):
        async with open_broker(store=tmp_path / "log.sqlite") as broker:
            async with broker.open_session() as session, session.turn():
                raise error


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_open_session_lets_the_body_error_out(
    make: Callable[[], BaseException], approval_broker: Broker
) -> None:
    error = make()
    with trio.fail_after(10), raises_itself(error):
        async with approval_broker.open_session():
            raise error


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_turn_lets_the_body_error_out_and_ends_the_turn_as_error(
    make: Callable[[], BaseException], approval_broker: Broker
) -> None:
    error = make()
    async with approval_broker.open_session() as session:
        with trio.fail_after(10), raises_itself(error):
            async with session.turn():
                raise error
        ends = [e for e in log_of(approval_broker, session) if isinstance(e, TurnEnd)]
    assert [e.reason.kind for e in ends] == ["error"]


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_answerer_block_lets_the_body_error_out(
    make: Callable[[], BaseException], approval_broker: Broker
) -> None:
    error = make()

    async def allow(_req: ApprovalRequest, _next: Any) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    with trio.fail_after(10), raises_itself(error):
        async with approval_broker.answerer(allow):
            raise error


@pytest.mark.parametrize("make", ERRORS, ids=IDS)
async def test_open_sqlite_store_lets_the_body_error_out(
    make: Callable[[], BaseException], tmp_path: pathlib.Path
) -> None:
    error = make()
    with trio.fail_after(10), raises_itself(error):
        async with open_sqlite_store(tmp_path / "log.sqlite"):
            raise error


async def test_serve_broker_lets_a_session_task_keyboard_interrupt_out_unwrapped() -> None:
    async def interrupt(*, task_status: trio.TaskStatus[None]) -> None:  # noqa: ASYNC114
        task_status.started()
        await trio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    # The caller's own nursery wraps what its child raised, once; the child (serve_broker)
    # must not add a group of its own around the KeyboardInterrupt.
    with trio.fail_after(10), pytest.RaisesGroup(KeyboardInterrupt):
        async with trio.open_nursery() as nursery:
            broker: Broker = await nursery.start(serve_broker)
            session = await broker.start_session()
            await session.start(interrupt)
            await trio.sleep_forever()


async def test_serve_broker_cancelled_returns_quietly() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            broker: Broker = await nursery.start(serve_broker)
            await broker.start_session()
            nursery.cancel_scope.cancel()
    assert broker.sessions == ()


async def test_serve_acp_lets_the_connection_error_out_unwrapped() -> None:
    error = OSError(28, "No space left on device")

    def frame_hook(_frame: object) -> None:
        raise error

    agent_side, client_side = trio.testing.memory_stream_pair()
    connection = JsonRpcConnection(
        send_stream=agent_side, receive_stream=agent_side, on_frame=frame_hook
    )
    composition = Composition(scenario=Scenario.from_file(scenario_path("escalation")))
    # The frame is waiting before the agent serves, so serve_acp runs in the block's own task.
    await client_side.send_all(b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n')
    with trio.fail_after(10), raises_itself(error):
        async with open_broker() as broker:
            await serve_acp(connection, broker, composition, PlainExecutor())


def test_collapse_keeps_groups_of_several() -> None:
    group = ExceptionGroup("two", [ValueError("a"), KeyError("b")])
    with pytest.raises(ExceptionGroup) as info, collapse_single():  # noqa: ASYNC401 (identity)
        raise group
    assert info.value is group
    inner = BaseExceptionGroup("the body's own", [KeyboardInterrupt()])
    assert single_exception(BaseExceptionGroup("hidden nursery", [inner])) is inner


def test_collapse_keeps_the_leaf_s_own_context() -> None:
    leaf = ValueError("leaf")
    original = KeyError("earlier")
    leaf.__context__ = original
    with pytest.raises(ValueError, match=r"^leaf$") as info, collapse_single():
        raise ExceptionGroup("one", [leaf])
    assert info.value.__context__ is original


@pytest.mark.slow
def test_a_failing_assertion_inside_open_broker_fails_its_test(tmp_path: pathlib.Path) -> None:
    """The end-to-end form of the bug: an assertion in the block must fail the test."""
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            from broker import open_broker

            async def test_inverted() -> None:
                async with open_broker() as broker:
                    async with broker.open_session() as session:
                        assert session.is_open is False, "this assertion must fail the test"
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout
    assert "this assertion must fail the test" in done.stdout


# -- the body's error also survives a cancellation that is pending when it is raised ----------


@pytest.mark.parametrize("where", ["open_broker", "open_session", "turn", "sqlite"])
async def test_the_error_survives_a_pending_cancellation(
    where: str, tmp_path: pathlib.Path
) -> None:
    error = ValueError("boom")
    store: Any = tmp_path / "log.sqlite" if where == "sqlite" else None
    with trio.fail_after(10), trio.CancelScope() as outer:
        with raises_itself(error):
            async with open_broker(store=store) as broker:
                async with broker.open_session() as session:
                    if where == "turn":
                        async with session.turn():
                            outer.cancel()
                            raise error
                    outer.cancel()
                    raise error
    assert not outer.cancelled_caught


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_the_error_survives_a_pending_cancellation_with_session_tasks_running(
    store: str, tmp_path: pathlib.Path
) -> None:
    # A session task (here an answerer channel) raises Cancelled into the same nursery as the
    # body's error: the group [error, Cancelled] must still leave as the error itself.
    error = ValueError("body")

    async def allow(_req: ApprovalRequest, _next: Any) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    where: Any = tmp_path / "log.sqlite" if store == "sqlite" else None
    with trio.fail_after(10), trio.CancelScope() as outer:
        with raises_itself(error):
            async with open_broker(store=where) as broker:
                session = await broker.start_session()
                await session.start_answerer(allow)
                session.start_soon(trio.sleep_forever)
                outer.cancel()
                raise error


def test_collapse_drops_cancellations_beside_one_error() -> None:
    error = ValueError("only")
    group = BaseExceptionGroup("mixed", [error, trio.Cancelled._create()])
    assert single_exception(group) is error
    two = BaseExceptionGroup("two", [ValueError(), KeyError(), trio.Cancelled._create()])
    assert single_exception(two) is None
