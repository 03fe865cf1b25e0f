"""Resume: a stored session reopens with its id, parent link, policy, grants and delegation pin."""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import trio

from broker import (
    ApprovalDecided,
    ApprovalRequest,
    Broker,
    MemoryStore,
    Outcome,
    Policy,
    ResumeError,
    Source,
    TurnEnd,
    TurnEndReason,
    open_broker,
    serve_broker,
)
from broker.store import open_sqlite_store
from broker.store._logtools import verify_store


def ask(session: Any, tool: str = "bash") -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name=tool)


async def test_a_resumed_session_keeps_its_policy_grants_pin_and_chain(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "log.sqlite"
    with trio.fail_after(20):
        async with open_broker(store=path) as broker:
            parent = await broker.start_session()
            await broker.set_approval_policy(parent, "never")
            await broker.grant(parent, "edit")
            child = await broker.delegate(parent.agent)
            await broker.grant(child, "read")
            parent_id, child_id = parent.id, child.id
        async with open_broker(store=path) as broker:
            parent = await broker.start_session(resume=parent_id)
            child = await broker.start_session(resume=child_id)
            assert (parent.id, child.id) == (parent_id, child_id)
            assert parent.parent is None
            assert parent.parent_id is None
            # The parent was resumed first, so the child links to its live object.
            assert child.parent is parent
            assert child.parent_id == parent_id
            assert broker.effective_policy(parent) is Policy.NEVER
            assert broker.effective_policy(child) is Policy.NEVER  # the delegation pin
            assert child.delegated
            assert not parent.delegated
            assert parent.state.grants == frozenset({"edit"})
            assert broker.is_granted(child.agent, "edit")  # through its live parent
            assert not parent.state.turn_open
            async with child.turn():
                assert await broker.request(ask(child)) is Outcome.REJECTED
            await broker.set_approval_policy(parent, "ask")
            async with parent.turn():
                assert await broker.request(ask(parent, "edit")) is Outcome.ALLOWED_ONCE
        async with open_sqlite_store(path) as store:
            events = await store.read(child_id)
            assert store.session_ids() == [parent_id, child_id]  # nothing new was minted
    assert events[-2] == ApprovalDecided(
        id=events[-3].id,  # type: ignore[attr-defined]
        outcome=Outcome.REJECTED,
        policy=Policy.NEVER,
        source=Source.POLICY,
    )
    verify_store(path)  # raises on a violation: the hash chains continue across the resume


async def test_resume_on_the_memory_store(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    await approval_broker.grant(session, "bash")
    await session.aclose()
    again = await approval_broker.start_session(resume=session.id)
    assert again is not session
    assert again.id == session.id
    assert again.state.grants == frozenset({"bash"})
    async with again.turn():
        assert await approval_broker.request(ask(again)) is Outcome.ALLOWED_ONCE


async def test_an_unknown_id_is_refused_naming_it_and_the_store(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_broker(store=path) as broker:
        await broker.start_session()
        with pytest.raises(
            ResumeError,
            match=rf"^session 'nope' is not in store file '{re.escape(str(path))}': pass the id "
            r"of a session it holds \(broker log show STORE lists them\)$",
        ):
            async with broker.open_session(resume="nope"):
                raise AssertionError("must not open")
        assert len(broker.sessions) == 1
    async with open_sqlite_store(path) as store:
        assert len(store.session_ids()) == 1
        assert await store.read("nope") == []


async def test_a_session_open_in_this_broker_is_refused(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    with pytest.raises(
        ResumeError,
        match=rf"^session '{session.id}' is already open in this broker: use its Session "
        r"object, or close it before resuming it$",
    ):
        await approval_broker.start_session(resume=session.id)


async def test_bad_resume_arguments(approval_broker: Broker) -> None:
    parent = await approval_broker.start_session()
    with pytest.raises(ValueError, match=r"^parent must not be given with resume"):
        await approval_broker.start_session(parent, resume=parent.id)
    with pytest.raises(TypeError, match=r"^resume must be a session id string, got 42"):
        await approval_broker.start_session(resume=42)  # type: ignore[arg-type]


async def test_a_session_left_with_an_open_turn_is_refused_until_recovered() -> None:
    store = MemoryStore()
    from broker import ApprovalAsked, TurnStart

    await store.create_session("s", None)
    await store.append("s", [TurnStart(turn=1), ApprovalAsked(id="q", tool_name="bash")])
    async with open_broker(store=store) as broker:
        with pytest.raises(ResumeError, match=r"^session 's' in the store .* has an open turn"):
            await broker.start_session(resume="s")
    assert len(store.read_nowait("s")) == 2  # nothing appended


async def test_a_checkpoint_that_disagrees_with_the_events_is_rebuilt(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.sqlite"
    session_id = await _session_with_a_grant_checkpoint(path)
    # The checkpoint no longer fits the log (it claims 99 events).
    _rewrite_checkpoint(path, session_id, "?", ('{"events": 99}',))
    with caplog.at_level(logging.WARNING, logger="broker.store"):
        async with open_broker(store=path) as broker:
            session = await broker.start_session(resume=session_id)
            assert session.state.grants == frozenset({"bash"})  # from the events
    assert "rebuilding the session's projection from its events" in caplog.text


@pytest.mark.slow
def test_resume_after_kill_9_mid_question(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log.sqlite"
    script = textwrap.dedent(
        """
        import sys, trio
        from broker import ApprovalRequest, open_broker

        async def hang(req, next_):
            await trio.sleep_forever()

        async def main(path):
            async with open_broker(store=path) as broker:
                session = await broker.start_session()
                await broker.grant(session, "edit")
                await broker.set_approval_policy(session, "ask")
                async with broker.answerer(hang), session.turn():
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            broker.request, ApprovalRequest(agent=session.agent, tool_name="bash")
                        )
                        # The projection changes only after a durable commit: asked is on disk.
                        while not session.state.pending:
                            await trio.sleep(0.01)
                        print(session.id, flush=True)
                        await trio.sleep_forever()

        trio.run(main, sys.argv[1])
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        session_id = proc.stdout.readline().strip()
        assert session_id
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    trio.run(_resume_after_kill, path, session_id)


async def _resume_after_kill(path: pathlib.Path, session_id: str) -> None:
    with trio.fail_after(20):
        async with open_broker(store=path) as broker:
            session = await broker.start_session(resume=session_id)
            assert not session.state.turn_open
            assert not session.state.pending
            assert session.state.grants == frozenset({"edit"})
            async with session.turn() as number:
                assert number == 2
                assert await broker.request(ask(session, "edit")) is Outcome.ALLOWED_ONCE
        async with open_sqlite_store(path) as store:
            events = await store.read(session_id)
    recovered = [e for e in events if isinstance(e, ApprovalDecided) and e.recovered]
    assert [d.outcome for d in recovered] == [Outcome.CANCELLED]
    assert TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")) in events
    verify_store(path)


async def test_two_concurrent_resumes_of_one_id_open_it_once(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_broker(store=path) as broker:
        session_id = (await broker.start_session()).id
    results: list[object] = []

    async def resume(broker: Broker) -> None:
        try:
            results.append(await broker.start_session(resume=session_id))
        except ResumeError as exc:
            results.append(exc)

    with trio.fail_after(20):
        async with open_broker(store=path) as broker, trio.open_nursery() as nursery:
            nursery.start_soon(resume, broker)
            nursery.start_soon(resume, broker)
    assert sorted(type(r).__name__ for r in results) == ["ResumeError", "Session"]


async def test_a_session_started_while_the_broker_shuts_down_is_closed_not_leaked() -> None:
    started = trio.Event()
    outcome: list[object] = []

    class SlowCreate(MemoryStore):
        async def create_session(self, session_id: str, parent_id: str | None) -> None:
            started.set()
            with trio.CancelScope(shield=True):
                await trio.sleep(0.5)
            await super().create_session(session_id, parent_id)

    async def open_one(broker: Broker) -> None:
        try:
            outcome.append(await broker.start_session())
        except Exception as exc:
            outcome.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as other:  # the opener lives outside the broker's scope
            async with trio.open_nursery() as outer:
                broker: Broker = await outer.start(
                    functools.partial(serve_broker, store=SlowCreate())
                )
                other.start_soon(open_one, broker)
                await started.wait()
                outer.cancel_scope.cancel()  # the broker shuts down mid-start
    assert [type(o).__name__ for o in outcome] == ["BrokerClosedError"]
    assert broker.sessions == ()


async def test_a_checkpoint_whose_content_was_altered_is_not_trusted(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.sqlite"
    session_id = await _session_with_a_grant_checkpoint(path)
    # The event count still fits: only the content is wrong (a grant nobody made).
    _rewrite_checkpoint(path, session_id, "replace(state, ?, ?)", ('"bash"', '"bash","rm"'))
    with caplog.at_level(logging.WARNING, logger="broker"):
        async with open_broker(store=path) as broker:
            session = await broker.start_session(resume=session_id)
            assert session.state.grants == frozenset({"bash"})
            assert not broker.is_granted(session.agent, "rm")
    assert "disagrees with its events; resuming from the events" in caplog.text


async def _session_with_a_grant_checkpoint(path: pathlib.Path) -> str:
    """A session granted ``bash``, closed (so its checkpoint is written); its id."""
    async with open_broker(store=path) as broker:
        session = await broker.start_session()
        await broker.grant(session, "bash")
        return session.id


def _rewrite_checkpoint(
    path: pathlib.Path, session_id: str, expression: str, values: tuple[str, ...]
) -> None:
    """Set the session's checkpoint ``state`` to an SQL *expression* (the events stay)."""
    conn = sqlite3.connect(path)
    with conn:
        changed = conn.execute(
            f"UPDATE checkpoints SET state = {expression} WHERE session_id = ?",
            (*values, session_id),
        ).rowcount
    conn.close()
    assert changed == 1
