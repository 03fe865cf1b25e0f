"""The policy tier (spec 5) and delegation seeding (spec 8.5): decisions, events, notices, texts."""

from __future__ import annotations

import re

import pytest
import trio

from broker import (
    AbortSignal,
    AnswerNext,
    ApprovalDecided,
    ApprovalPolicy,
    ApprovalRequest,
    Broker,
    MemoryStore,
    Notice,
    Outcome,
    Policy,
    Session,
    open_broker,
)
from broker._texts import DELEGATION_STATEMENT, policy_context, policy_switch_notice

from .conftest import lines_of, log_of, types_of

ASK_CONTEXT = (
    "Approval prompts are enabled in this session: operations that require approval may ask "
    "through the configured answerers; without an available answerer, the request fails closed."
)
NEVER_CONTEXT = (
    "Approval prompts are disabled in this session: actions that require approval are rejected "
    "automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
)
ASK_TO_NEVER = (
    'The user changed the approval policy from "ask the user for approval" to '
    '"never ask the user for approval".'
)
NEVER_TO_ASK = (
    'The user changed the approval policy from "never ask the user for approval" to '
    '"ask the user for approval".'
)
DELEGATED = (
    "You are a delegated subagent: your permission scope was fixed when you were started and "
    "cannot be widened from inside this session — operations that require approval are rejected "
    "automatically. When the task needs access beyond that scope, do not retry the denied "
    "operation; state the limitation in your reply so the delegating agent can handle it."
)
POLICY_ERROR = r'^approval policy must be one of "ask" or "never"$'


def req(session: Session, **kw: object) -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name="bash", **kw)  # type: ignore[arg-type]


class Counting:
    """An answerer that allows and counts how often it was consulted."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, _r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        self.calls += 1
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE


def test_exact_texts() -> None:
    assert policy_context(Policy.ASK) == ASK_CONTEXT
    assert policy_context(Policy.NEVER) == NEVER_CONTEXT
    assert policy_switch_notice(Policy.ASK, Policy.NEVER) == ASK_TO_NEVER
    assert policy_switch_notice(Policy.NEVER, Policy.ASK) == NEVER_TO_ASK
    assert DELEGATION_STATEMENT == DELEGATED


# -- deployment default ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("sometimes", ValueError),
        ("ASK", ValueError),
        ("", ValueError),
        (None, TypeError),
        (1, TypeError),
    ],
)
async def test_unknown_default_policy_fails_at_start_up_writing_nothing(
    bad: object, error: type[Exception]
) -> None:
    store = MemoryStore()
    with pytest.raises(error, match=POLICY_ERROR):
        async with open_broker(policy=bad, store=store):  # type: ignore[arg-type]
            raise AssertionError("must not start")
    assert store.session_ids() == []


async def test_default_policy_is_ask(approval_broker: Broker, approval_session: Session) -> None:
    assert approval_broker.policy is Policy.ASK
    assert approval_broker.effective_policy(approval_session) is Policy.ASK


# -- never ------------------------------------------------------------------------------------


async def test_never_default_rejects_without_any_answerer() -> None:
    before, after, gate = Counting(), Counting(), Counting()
    async with open_broker(policy="never") as broker, broker.open_session() as session:
        async with broker.answerer(before), broker.answerer(before, scope=session.agent):
            async with broker.answerer(after), broker.answerer(gate, prepend=True), session.turn():
                assert await broker.request(req(session)) is Outcome.REJECTED
        lines = lines_of(broker, session)
    assert before.calls == after.calls == gate.calls == 0
    decided = lines[2]
    assert re.fullmatch(
        r'\{"type":"approval/decided","data":\{"id":"[0-9a-f-]{36}","outcome":"rejected",'
        r'"policy":"never","source":"policy"\}\}',
        decided,
    )


async def test_never_override_rejects_answerers_registered_before_after_and_prepended(
    approval_broker: Broker, approval_session: Session
) -> None:
    before, after, gate = Counting(), Counting(), Counting()
    async with approval_broker.answerer(before):
        await approval_broker.set_policy(approval_session.agent, "never")
        async with approval_broker.answerer(after), approval_broker.answerer(gate, prepend=True):
            async with approval_session.turn():
                assert await approval_broker.request(req(approval_session)) is Outcome.REJECTED
    assert before.calls == after.calls == gate.calls == 0


async def test_abort_comes_before_never() -> None:
    signal = AbortSignal()
    signal.abort()
    async with open_broker(policy="never") as broker, broker.open_session() as session:
        async with session.turn():
            assert await broker.request(req(session, signal=signal)) is Outcome.CANCELLED
        decided = [e for e in log_of(broker, session) if isinstance(e, ApprovalDecided)]
    assert decided[0].policy is None


async def test_session_override_beats_the_default_both_ways() -> None:
    answerer = Counting()
    async with open_broker(policy="ask") as broker, broker.open_session() as session:
        await broker.set_approval_policy(session, "never")
        async with broker.answerer(answerer), session.turn():
            assert await broker.request(req(session)) is Outcome.REJECTED
    async with open_broker(policy="never") as broker, broker.open_session() as session:
        await broker.set_approval_policy(session, "ask")
        async with broker.answerer(answerer), session.turn():
            assert await broker.request(req(session)) is Outcome.ALLOWED_ONCE
    assert answerer.calls == 1


# -- the write paths ----------------------------------------------------------------------


async def test_set_approval_policy_appends_outside_a_turn_without_a_notice(
    approval_broker: Broker, approval_session: Session
) -> None:
    await approval_broker.set_approval_policy(approval_session, Policy.NEVER)
    await approval_broker.set_approval_policy(approval_session, Policy.NEVER)
    assert lines_of(approval_broker, approval_session) == [
        '{"type":"approval/policy","data":{"policy":"never"}}',
        '{"type":"approval/policy","data":{"policy":"never"}}',
    ]
    assert approval_session.agent.take_notices() == []
    with pytest.raises(ValueError, match=POLICY_ERROR):
        await approval_broker.set_approval_policy(approval_session, "maybe")
    assert len(log_of(approval_broker, approval_session)) == 2


async def test_set_policy_twice_injects_one_notice_with_the_exact_text(
    approval_broker: Broker, approval_session: Session
) -> None:
    agent = approval_session.agent
    assert await approval_broker.set_policy(agent, "never") is True
    assert await approval_broker.set_policy(agent, "never") is False
    assert types_of(approval_broker, approval_session) == ["approval/policy"]
    assert agent.take_notices() == [Notice(source="approval/policy", text=ASK_TO_NEVER)]
    assert agent.take_notices() == []
    assert await approval_broker.set_policy(agent, Policy.ASK) is True
    assert agent.take_notices() == [Notice(source="approval/policy", text=NEVER_TO_ASK)]


async def test_set_policy_unchanged_is_a_no_op(
    approval_broker: Broker, approval_session: Session
) -> None:
    assert await approval_broker.set_policy(approval_session.agent, "ask") is False
    assert log_of(approval_broker, approval_session) == []
    assert approval_session.agent.take_notices() == []


async def test_a_switch_and_back_before_the_next_step_queues_nothing(
    approval_broker: Broker, approval_session: Session
) -> None:
    agent = approval_session.agent
    await approval_broker.set_policy(agent, "never")
    await approval_broker.set_policy(agent, "ask")
    assert types_of(approval_broker, approval_session) == ["approval/policy"] * 2
    assert agent.take_notices() == []


async def test_set_policy_validates(approval_broker: Broker, approval_session: Session) -> None:
    with pytest.raises(ValueError, match=POLICY_ERROR):
        await approval_broker.set_policy(approval_session.agent, "always")
    with pytest.raises(
        TypeError,
        match=r"^session must be a Session or an Agent, got str: pass a session from "
        r"broker.start_session\(\), or its agent$",
    ):
        await approval_broker.set_policy("s1", "never")  # type: ignore[arg-type]


async def test_every_session_method_takes_a_session_or_its_agent(
    approval_broker: Broker, approval_session: Session
) -> None:
    """One idea, one kind of argument: what acts on a session takes the Session or its Agent,
    and both mean the same session."""
    broker, session, agent = approval_broker, approval_session, approval_session.agent
    assert await broker.set_policy(session, "never")
    assert broker.effective_policy(agent) is Policy.NEVER
    assert agent.take_notices() != []  # the live switch notifies the agent either way
    assert await broker.set_policy(agent, "ask")
    await broker.set_approval_policy(agent, "never")
    assert broker.effective_policy(session) is Policy.NEVER
    assert await broker.grant(agent, "bash")
    assert not await broker.grant(session, "bash")  # the same session: already granted
    assert broker.is_granted(session, "bash")
    assert broker.is_granted(agent, "bash")
    grant = await broker.remember(agent, "read")
    assert [g.id for g in broker.grants(session)] == [g.id for g in broker.grants(agent)]
    assert await broker.revoke(session, grant.id)
    child = await broker.delegate(session)
    grandchild = await broker.delegate(child.agent)
    assert grandchild.parent is child
    assert child.parent is session
    async with open_broker() as other:
        stranger = await other.start_session()
        with pytest.raises(ValueError, match=r"^session belongs to another broker: "):
            broker.is_granted(stranger.agent, "bash")
        with pytest.raises(ValueError, match=r"^session belongs to another broker: "):
            broker.effective_policy(stranger)


# -- runtime context ------------------------------------------------------------------------


async def test_runtime_context_on_first_request_and_on_change_only(
    approval_broker: Broker, approval_session: Session
) -> None:
    agent = approval_session.agent
    assert approval_broker.approval_context(agent) == ASK_CONTEXT
    assert approval_broker.approval_context_update(agent) == ASK_CONTEXT
    assert approval_broker.approval_context_update(agent) is None
    assert approval_broker.approval_context_update(agent) is None
    await approval_broker.set_policy(agent, "never")
    assert approval_broker.approval_context(agent) == NEVER_CONTEXT
    assert approval_broker.approval_context_update(agent) == NEVER_CONTEXT
    assert approval_broker.approval_context_update(agent) is None
    # A switch and back between two snapshots is no change to contribute.
    await approval_broker.set_policy(agent, "ask")
    await approval_broker.set_policy(agent, "never")
    assert approval_broker.approval_context_update(agent) is None


async def test_agentless_assembly_contributes_empty(approval_broker: Broker) -> None:
    assert approval_broker.approval_context(None) == ""
    assert approval_broker.approval_context_update(None) == ""


# -- delegation (spec 8.5) ----------------------------------------------------------------------


async def test_pin_never_child_is_rejected_before_an_allowing_answerer(
    approval_broker: Broker, approval_session: Session
) -> None:
    allow = Counting()
    child = await approval_broker.delegate(approval_session.agent)
    assert child.parent is approval_session
    async with approval_broker.answerer(allow), approval_broker.answerer(allow, scope=child.agent):
        async with child.turn():
            assert await approval_broker.request(req(child)) is Outcome.REJECTED
    assert allow.calls == 0
    lines = lines_of(approval_broker, child)
    assert lines[0] == (
        '{"type":"approval/policy","data":{"policy":"never","source":"delegation"}}'
    )
    assert types_of(approval_broker, child)[1:] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]
    assert types_of(approval_broker, approval_session) == []
    assert approval_broker.delegation_context_update(child.agent) == DELEGATED
    assert approval_broker.delegation_context_update(child.agent) is None
    assert approval_broker.delegation_context_update(approval_session.agent) is None
    assert approval_broker.approval_context_update(child.agent) == NEVER_CONTEXT


async def test_a_later_child_side_switch_wins(
    approval_broker: Broker, approval_session: Session
) -> None:
    child = await approval_broker.delegate(approval_session.agent)
    await approval_broker.set_policy(child.agent, "ask")
    async with approval_broker.answerer(Counting(), scope=child.agent), child.turn():
        assert await approval_broker.request(req(child)) is Outcome.ALLOWED_ONCE


async def test_policy_is_captured_at_delegation() -> None:
    async with open_broker(delegation="inherit") as broker, broker.open_session() as parent:
        await broker.set_policy(parent.agent, "never")
        child = await broker.delegate(parent.agent)
        await broker.set_policy(parent.agent, "ask")
        assert broker.effective_policy(child) is Policy.NEVER
        assert log_of(broker, child) == [ApprovalPolicy(policy=Policy.NEVER, source="delegation")]


async def test_inherit_routes_a_childs_ask_to_the_parents_scoped_answerer() -> None:
    parent_answerer, stranger = Counting(), Counting()
    async with open_broker(delegation="inherit") as broker:
        async with broker.open_session() as parent, broker.open_session() as other:
            child = await broker.delegate(parent.agent)
            grandchild = await broker.delegate(child.agent)
            async with broker.answerer(parent_answerer, scope=parent.agent):
                async with broker.answerer(stranger, scope=other.agent), grandchild.turn():
                    assert await broker.request(req(grandchild)) is Outcome.ALLOWED_ONCE
            assert broker.delegation_context_update(child.agent) is None
    assert parent_answerer.calls == 1
    assert stranger.calls == 0


async def test_pin_never_does_not_route_to_ancestors_even_after_a_switch(
    approval_broker: Broker, approval_session: Session
) -> None:
    parent_answerer = Counting()
    child = await approval_broker.delegate(approval_session.agent)
    await approval_broker.set_policy(child.agent, "ask")
    async with approval_broker.answerer(parent_answerer, scope=approval_session.agent):
        async with child.turn():
            assert await approval_broker.request(req(child)) is Outcome.UNAVAILABLE
    assert parent_answerer.calls == 0


async def test_unknown_delegation_mode_fails_at_start_up() -> None:
    with pytest.raises(ValueError, match=r'^delegation must be one of "pin-never" or "inherit"'):
        async with open_broker(delegation="sometimes"):
            raise AssertionError("must not start")


async def test_the_old_agent_keyword_still_works_for_one_release(
    approval_broker: Broker, approval_session: Session
) -> None:
    agent = approval_session.agent
    with pytest.warns(DeprecationWarning, match=r"^Broker.set_policy\(agent=...\) is deprecated"):
        assert await approval_broker.set_policy(agent=agent, policy="never")  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match=r"^Broker.is_granted\(agent=...\) is deprecated"):
        assert not approval_broker.is_granted(agent=agent, tool_name="bash")  # type: ignore[call-arg]
