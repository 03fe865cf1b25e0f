"""The tool runtime (spec 8.1): the gate waterfall and every ask-routing text from its real path."""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing

from broker import AbortSignal, Broker, MemoryStore, Outcome, Session, open_broker
from broker.testing import ScriptedAnswerer
from broker.tools import (
    Allow,
    Ask,
    CallContext,
    Deny,
    GateDecision,
    GateNext,
    ToolCall,
    ToolResult,
    ToolRuntime,
    ToolSpec,
)

from .conftest import log_of, types_of


class Counter:
    """A tool that counts its runs."""

    name = "write"

    def __init__(self) -> None:
        self.runs = 0

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description="count", input_schema={"type": "object"})

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        await trio.lowlevel.checkpoint()
        self.runs += 1
        return ToolResult(output=f"ran {call.id}")


def asking(reason: str | None = None):  # type: ignore[no-untyped-def]
    async def gate(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        await trio.lowlevel.checkpoint()
        return Ask(reason=reason)

    return gate


CALL = ToolCall(id="call_1", name="write", arguments={"path": "x"})


async def test_allowed_once_runs_exactly_that_call(
    approval_broker: Broker, approval_session: Session
) -> None:
    tool = Counter()
    answerer = ScriptedAnswerer([Outcome.ALLOWED_ONCE, Outcome.REJECTED])
    runtime = ToolRuntime(tools=[tool], gates=[asking("writes x")], approval=approval_broker)
    async with approval_broker.answerer(answerer), approval_session.turn():
        result = await runtime.execute(CALL, agent=approval_session.agent)
        assert result == ToolResult(output="ran call_1")
        assert tool.runs == 1
        # The grant died with the call: the next call asks again (and is refused here).
        second = await runtime.execute(CALL, agent=approval_session.agent)
    assert second == ToolResult.error('the user rejected tool "write"')
    assert tool.runs == 1
    assert len(answerer.asked) == 2
    asked = log_of(approval_broker, approval_session)[1]
    assert getattr(asked, "reason", None) == "writes x"
    assert getattr(asked, "call_id", None) == "call_1"


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (Outcome.REJECTED, 'the user rejected tool "write"'),
        (Outcome.CANCELLED, 'approval for tool "write" was cancelled'),
        (
            Outcome.UNAVAILABLE,
            'tool "write" requires approval, but no approval channel is available',
        ),
    ],
)
async def test_outcomes_map_to_exact_texts(
    approval_broker: Broker, approval_session: Session, answer: Outcome, text: str
) -> None:
    tool = Counter()
    runtime = ToolRuntime(tools=[tool], gates=[asking()], approval=approval_broker)
    async with approval_broker.answerer(ScriptedAnswerer([answer])), approval_session.turn():
        result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result == ToolResult(output=f"Error: {text}", is_error=True)
    assert tool.runs == 0


async def test_no_answerer_is_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    runtime = ToolRuntime(tools=[Counter()], gates=[asking()], approval=approval_broker)
    async with approval_session.turn():
        result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result.output == (
        'Error: tool "write" requires approval, but no approval channel is available'
    )


async def test_never_policy_rejection_has_its_own_text() -> None:
    async with open_broker(policy="never") as broker, broker.open_session() as session:
        runtime = ToolRuntime(tools=[Counter()], gates=[asking()], approval=broker)
        async with broker.answerer(ScriptedAnswerer()), session.turn():
            result = await runtime.execute(CALL, agent=session.agent)
    assert result.output == (
        'Error: tool "write" was rejected automatically: approval prompts are disabled in this '
        "session"
    )


async def test_no_service_with_reason_denies_with_the_reason_verbatim() -> None:
    tool = Counter()
    runtime = ToolRuntime(tools=[tool], gates=[asking("Policy X: ask the owner first")])
    result = await runtime.execute(CALL, agent=None)
    assert result == ToolResult.error("Policy X: ask the owner first")
    assert tool.runs == 0


async def test_no_service_without_reason(approval_session: Session) -> None:
    runtime = ToolRuntime(tools=[Counter()], gates=[asking()])
    result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result.output == 'Error: tool "write" requires approval (not yet supported)'


async def test_service_but_no_agent_does_not_ask(
    approval_broker: Broker, approval_session: Session
) -> None:
    answerer = ScriptedAnswerer([Outcome.ALLOWED_ONCE])
    runtime = ToolRuntime(tools=[Counter()], gates=[asking("r")], approval=approval_broker)
    async with approval_broker.answerer(answerer), approval_session.turn():
        result = await runtime.execute(CALL, agent=None)
    assert result.output == (
        'Error: tool "write" requires approval, but the call has no agent to route it through'
    )
    assert answerer.asked == []
    assert "approval/asked" not in types_of(approval_broker, approval_session)


async def test_the_service_is_looked_up_per_call(
    approval_broker: Broker, approval_session: Session
) -> None:
    runtime = ToolRuntime(tools=[Counter()], gates=[asking()])
    async with approval_broker.answerer(ScriptedAnswerer([Outcome.ALLOWED_ONCE])):
        async with approval_session.turn():
            before = await runtime.execute(CALL, agent=approval_session.agent)
            runtime.approval = approval_broker
            after = await runtime.execute(CALL, agent=approval_session.agent)
    assert before.is_error
    assert after == ToolResult(output="ran call_1")


async def test_caller_abort_mid_question_is_aborted_before_dispatch(
    approval_broker: Broker, approval_session: Session
) -> None:
    tool = Counter()
    signal = AbortSignal()

    async def hold(req: object) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    runtime = ToolRuntime(tools=[tool], gates=[asking()], approval=approval_broker)
    results: list[ToolResult] = []
    async with approval_broker.answerer(ScriptedAnswerer([hold])), approval_session.turn():
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append(
                    await runtime.execute(CALL, agent=approval_session.agent, signal=signal)
                )

            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            signal.abort()
    assert results == [ToolResult.error("tool call aborted before dispatch")]
    assert tool.runs == 0
    decided = log_of(approval_broker, approval_session)[2]
    assert getattr(decided, "outcome", None) is Outcome.CANCELLED


async def test_an_already_aborted_call_never_runs(approval_session: Session) -> None:
    tool = Counter()
    signal = AbortSignal()
    signal.abort()
    result = await ToolRuntime(tools=[tool]).execute(
        CALL, agent=approval_session.agent, signal=signal
    )
    assert result == ToolResult.error("tool call aborted before dispatch")
    assert tool.runs == 0


# -- the gate waterfall ---------------------------------------------------------------------


async def test_default_is_allow_and_first_claim_wins() -> None:
    tool = Counter()
    seen: list[str] = []

    async def passing(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        seen.append("passing")
        return await next_()

    async def denying(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        seen.append("denying")
        await trio.lowlevel.checkpoint()
        return Deny(reason="not on fridays")

    async def never_reached(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        seen.append("never")
        await trio.lowlevel.checkpoint()
        return Allow()

    assert await ToolRuntime(tools=[tool]).execute(CALL) == ToolResult(output="ran call_1")
    runtime = ToolRuntime(tools=[tool], gates=[passing, denying, never_reached])
    assert await runtime.execute(CALL) == ToolResult.error("not on fridays")
    assert seen == ["passing", "denying"]
    assert tool.runs == 1


async def test_broken_gates_fail_closed() -> None:
    tool = Counter()

    async def boom(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        raise RuntimeError("gate bug")

    async def garbage(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        await trio.lowlevel.checkpoint()
        return "allow"  # type: ignore[return-value]

    broken = await ToolRuntime(tools=[tool], gates=[boom]).execute(CALL)
    assert re.fullmatch(r"Error: pre-execute gate .*boom failed: gate bug", broken.output)
    weird = await ToolRuntime(tools=[tool], gates=[garbage]).execute(CALL)
    assert re.fullmatch(
        r"Error: pre-execute gate .*garbage returned 'allow', not Allow, Deny or Ask", weird.output
    )
    assert tool.runs == 0


async def test_unknown_tool_and_duplicate_names() -> None:
    result = await ToolRuntime(tools=[Counter()]).execute(ToolCall(id="c", name="rm"))
    assert result == ToolResult.error('unknown tool "rm": available tools are write')
    with pytest.raises(ValueError, match=r"^tools has two tools named 'write'"):
        ToolRuntime(tools=[Counter(), Counter()])


# -- a question that cannot be put or recorded: an error result, never an exception -----------


async def test_an_ask_outside_a_turn_is_an_error_result_and_nothing_runs(
    approval_broker: Broker, approval_session: Session
) -> None:
    tool = Counter()
    runtime = ToolRuntime(tools=[tool], gates=[asking("writes x")], approval=approval_broker)
    result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result.is_error
    assert result.output.startswith(
        'Error: approval for tool "write" could not be asked or recorded (TurnError: '
        "approval.request() outside an open turn"
    )
    assert result.output.endswith("; the tool did not run")
    assert tool.runs == 0
    assert log_of(approval_broker, approval_session) == []


async def test_a_failed_audit_append_is_an_error_result_and_nothing_runs() -> None:
    store = MemoryStore()
    tool = Counter()
    async with open_broker(store=store) as broker, broker.open_session() as session:
        runtime = ToolRuntime(tools=[tool], gates=[asking("writes x")], approval=broker)
        async with broker.answerer(ScriptedAnswerer([Outcome.ALLOWED_ONCE])), session.turn():
            store.fail_appends = "disk full"
            result = await runtime.execute(CALL, agent=session.agent)
            store.fail_appends = None
    assert result == ToolResult.error(
        'approval for tool "write" could not be asked or recorded (AuditAppendError: could '
        f"not append approval/asked to session {session.id}: disk full); the tool did not run"
    )
    assert tool.runs == 0


async def test_a_closed_session_is_an_error_result_and_nothing_runs(
    approval_broker: Broker,
) -> None:
    tool = Counter()
    runtime = ToolRuntime(tools=[tool], gates=[asking()], approval=approval_broker)
    session = await approval_broker.start_session()
    await session.aclose()
    result = await runtime.execute(CALL, agent=session.agent)
    assert result.output.startswith(
        'Error: approval for tool "write" could not be asked or recorded (SessionClosedError: '
    )
    assert tool.runs == 0


async def test_the_callers_own_cancellation_still_propagates(
    approval_broker: Broker, approval_session: Session, autojump_clock: trio.testing.MockClock
) -> None:
    tool = Counter()
    runtime = ToolRuntime(tools=[tool], gates=[asking()], approval=approval_broker)

    async def hang(_req: object, _next: object) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with approval_broker.answerer(hang), approval_session.turn():
        with trio.move_on_after(0.5) as scope:
            await runtime.execute(CALL, agent=approval_session.agent)
    assert scope.cancelled_caught
    assert tool.runs == 0
    assert types_of(approval_broker, approval_session)[1:3] == [
        "approval/asked",
        "approval/decided",
    ]
