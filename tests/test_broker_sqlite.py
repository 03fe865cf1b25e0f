"""The broker on its durable default: a real SQLite file, recovery of a crash tail, verify."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest
import trio

from broker import (
    AnswerNext,
    ApprovalRequest,
    AuditAppendError,
    Outcome,
    open_broker,
)
from broker.store import StoreOpenError, open_sqlite_reader
from broker.store._logtools import verify_store
from broker.store.sqlite import SqliteStore


async def allow(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
    await trio.lowlevel.checkpoint()
    return Outcome.ALLOWED_ONCE


def lines(path: pathlib.Path, session_id: str) -> list[str]:
    with open_sqlite_reader(path) as reader:
        return [row.line for row in reader.rows(session_id)]


async def test_a_broker_on_a_path_logs_durably_and_verifies(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_broker(store=path) as broker, broker.open_session() as session:
        async with broker.answerer(allow), session.turn():
            assert (
                await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash", call_id="c1")
                )
                is Outcome.ALLOWED_ONCE
            )
        await broker.set_policy(session.agent, "never")
        async with session.turn():
            assert (
                await broker.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
                is Outcome.REJECTED
            )
        session_id = session.id
    logged = lines(path, session_id)
    assert [line.split('"', 4)[3] for line in logged] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
        "approval/policy",
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]
    assert '"outcome":"allowed-once"' in logged[2]
    assert '"policy":"never"' in logged[7]
    summary = verify_store(path)
    assert summary is not None


async def test_a_failed_decision_is_closed_cancelled_never_granted(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "log.sqlite"
    async with open_broker(store=path) as broker:
        assert isinstance(broker.store, SqliteStore)
        store: SqliteStore = broker.store
        session = await broker.start_session()

        async def fail_the_decision(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
            store.inject_commit_failure(sqlite3.OperationalError("database or disk is full"))
            await trio.lowlevel.checkpoint()
            return Outcome.ALLOWED_ONCE

        async with broker.answerer(fail_the_decision), session.turn():
            with pytest.raises(AuditAppendError, match=r"could not append approval/decided"):
                await broker.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
        session_id = session.id
    # Leaving the turn closed the unmatched asked inside it, as recovery would have: nothing
    # is left for the next open to recover.
    async with open_broker(store=path) as broker:
        assert isinstance(broker.store, SqliteStore)
        assert broker.store.recovery.cancelled_asks == 0
    logged = lines(path, session_id)
    assert logged[-2].endswith('"outcome":"cancelled","recovered":true}}')
    assert logged[-1].startswith('{"type":"turn/end"')
    assert not any('"allowed-once"' in line for line in logged)
    verify_store(path)


async def test_a_store_path_in_a_missing_directory_fails_at_open(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreOpenError, match=r"missing"):
        async with open_broker(store=tmp_path / "missing" / "log.sqlite"):
            raise AssertionError("must not start")


async def test_a_cancelled_scope_around_the_broker_still_pairs_its_questions(
    tmp_path: pathlib.Path,
) -> None:
    """What SIGINT does to the CLI: the broker's teardown must still reach the durable log."""
    path = tmp_path / "log.sqlite"

    async def hang(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(20), trio.CancelScope() as outer:
        async with open_broker(store=path) as broker:
            session = await broker.start_session()
            asked = trio.Event()

            async def hang_and_tell(r: ApprovalRequest, n: AnswerNext) -> Outcome:
                asked.set()  # the answerer runs only once the asked is durable
                return await hang(r, n)

            async with broker.answerer(hang_and_tell), session.turn():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        broker.request, ApprovalRequest(agent=session.agent, tool_name="bash")
                    )
                    await asked.wait()
                    outer.cancel(reason="as a signal would")
                    await trio.sleep_forever()
    assert outer.cancelled_caught
    logged = lines(path, session.id)
    assert logged[-2].endswith('"outcome":"cancelled","source":"caller"}}')
    assert logged[-1] == '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"cancelled"}}}'
    verify_store(path)
