"""Remembered grants (spec 6): the remembered path, idempotence, the ancestor walk, never first."""

from __future__ import annotations

import re

import pytest
import trio

from broker import AnswerNext, ApprovalRequest, Broker, Outcome, Session, open_broker

from .conftest import lines_of, types_of


def req(session: Session, tool: str = "bash") -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name=tool)


async def refuse(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
    await trio.lowlevel.checkpoint()
    return Outcome.REJECTED


async def test_granted_tool_is_allowed_remembered_without_an_answerer(
    approval_broker: Broker, approval_session: Session
) -> None:
    calls: list[str] = []

    async def answer(r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        calls.append(r.tool_name)
        return Outcome.REJECTED

    assert await approval_broker.grant(approval_session, "bash") is True
    async with approval_broker.answerer(answer), approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.ALLOWED_ONCE
        assert await approval_broker.request(req(approval_session, "edit")) is Outcome.REJECTED
    assert calls == ["edit"]
    lines = lines_of(approval_broker, approval_session)
    assert lines[0] == '{"type":"approval/grant","data":{"toolName":"bash"}}'
    assert re.fullmatch(
        r'\{"type":"approval/decided","data":\{"id":"[0-9a-f-]{36}","outcome":"allowed-once",'
        r'"remembered":true,"source":"grant","grant":"bash"\}\}',
        lines[3],
    )


async def test_grant_is_idempotent_per_tool_and_allowed_outside_a_turn(
    approval_broker: Broker, approval_session: Session
) -> None:
    assert await approval_broker.grant(approval_session, "bash") is True
    assert await approval_broker.grant(approval_session, "bash") is False
    assert await approval_broker.grant(approval_session, "edit") is True
    assert types_of(approval_broker, approval_session) == ["approval/grant"] * 2
    assert approval_broker.is_granted(approval_session.agent, "bash")
    assert not approval_broker.is_granted(approval_session.agent, "read")


async def test_concurrent_grants_append_once(
    approval_broker: Broker, approval_session: Session
) -> None:
    results: list[bool] = []
    async with trio.open_nursery() as nursery:
        for _ in range(10):

            async def one() -> None:
                results.append(await approval_broker.grant(approval_session, "bash"))

            nursery.start_soon(one)
    assert sorted(results) == [False] * 9 + [True]
    assert types_of(approval_broker, approval_session) == ["approval/grant"]


async def test_grant_covers_live_descendants_not_closed_ancestors() -> None:
    async with open_broker(delegation="inherit") as broker:
        root = await broker.start_session()
        middle = await broker.delegate(root.agent)
        leaf = await broker.delegate(middle.agent)
        await broker.grant(root, "bash")
        assert broker.is_granted(leaf.agent, "bash")
        assert broker.is_granted(middle.agent, "bash")
        assert not broker.is_granted(root.agent, "edit")
        async with leaf.turn():
            assert await broker.request(req(leaf)) is Outcome.ALLOWED_ONCE
        await root.aclose()
        assert not broker.is_granted(leaf.agent, "bash")
        async with broker.answerer(refuse), leaf.turn():
            assert await broker.request(req(leaf)) is Outcome.REJECTED
        # A grant held by a descendant does not flow upwards.
        await broker.grant(leaf, "edit")
        assert not broker.is_granted(middle.agent, "edit")


async def test_never_beats_a_grant(approval_broker: Broker, approval_session: Session) -> None:
    await approval_broker.grant(approval_session, "bash")
    await approval_broker.set_policy(approval_session.agent, "never")
    async with approval_session.turn():
        assert await approval_broker.request(req(approval_session)) is Outcome.REJECTED
    assert '"remembered"' not in lines_of(approval_broker, approval_session)[-2]


@pytest.mark.parametrize("tool", ["", "  ", None])
async def test_grant_with_an_empty_tool_name_is_refused_before_appending(
    approval_broker: Broker, approval_session: Session, tool: object
) -> None:
    with pytest.raises(
        ValueError,
        match=r"^tool_name must be a non-empty string, got .*: name the tool the grant covers$",
    ):
        await approval_broker.grant(approval_session, tool)  # type: ignore[arg-type]
    assert types_of(approval_broker, approval_session) == []


async def test_grant_on_a_closed_session_is_refused(approval_broker: Broker) -> None:
    session = await approval_broker.start_session()
    await session.aclose()
    with pytest.raises(Exception, match=r"^session belongs to session .*, which is closed"):
        await approval_broker.grant(session, "bash")
