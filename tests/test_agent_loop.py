"""The agent loop: event order, runtime-context snapshots, notices, abort, and scenario files."""

from __future__ import annotations

import json
import pathlib

import pytest
import trio
import trio.testing

from broker import AbortSignal, Broker, Outcome, Session, open_broker
from broker.agent import (
    AgentLoop,
    ContextEntry,
    ModelRequest,
    Scenario,
    ScenarioError,
    ScriptedModel,
    StopReason,
)
from broker.scenarios import scenario_path
from broker.testing import ScriptedAnswerer
from broker.tools import (
    Ask,
    CallContext,
    GateDecision,
    GateNext,
    ToolCall,
    ToolResult,
    ToolRuntime,
    ToolSpec,
)

from .conftest import lines_of, types_of

ASK = (
    "Approval prompts are enabled in this session: operations that require approval may ask "
    "through the configured answerers; without an available answerer, the request fails closed."
)
NEVER = (
    "Approval prompts are disabled in this session: actions that require approval are rejected "
    "automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
)


class Note:
    name = "note"

    def spec(self) -> ToolSpec:
        return ToolSpec(name="note", description="note", input_schema={"type": "object"})

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        await trio.lowlevel.checkpoint()
        return ToolResult(output="noted")


async def ask_gate(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
    await trio.lowlevel.checkpoint()
    return Ask(reason="notes need approval")


def scripted(*steps: dict[str, object]) -> ScriptedModel:
    return ScriptedModel(Scenario.from_data({"name": "t", "steps": list(steps)}))


def note_call(cid: str) -> dict[str, object]:
    return {"toolCalls": [{"id": cid, "name": "note", "arguments": {"text": "x"}}]}


def loop_for(broker: Broker, session: Session, model: ScriptedModel) -> AgentLoop:
    runtime = ToolRuntime(tools=[Note()], gates=[ask_gate], approval=broker)
    return AgentLoop(broker=broker, session=session, model=model, runtime=runtime)


def context_keys(request: ModelRequest) -> list[str]:
    return [entry.key for entry in request.context]


async def test_reference_event_order(approval_broker: Broker, approval_session: Session) -> None:
    model = scripted(note_call("c1"), {"text": "done"})
    loop = loop_for(approval_broker, approval_session, model)
    async with approval_broker.answerer(ScriptedAnswerer([Outcome.ALLOWED_ONCE])):
        result = await loop.prompt("take a note")
    assert (result.turn, result.stop_reason, result.steps) == (1, StopReason.END_TURN, 2)
    assert types_of(approval_broker, approval_session) == [
        "turn/start",
        "user/message",
        "tool/call",
        "approval/asked",
        "approval/decided",
        "tool/result",
        "agent/message",
        "turn/end",
    ]
    lines = lines_of(approval_broker, approval_session)
    assert lines[1] == '{"type":"user/message","data":{"text":"take a note"}}'
    assert lines[2] == (
        '{"type":"tool/call","data":{"callId":"c1","toolName":"note","input":{"text":"x"}}}'
    )
    assert lines[5] == '{"type":"tool/result","data":{"callId":"c1","output":"noted"}}'


async def test_context_on_first_step_and_on_change_only(
    approval_broker: Broker, approval_session: Session
) -> None:
    model = scripted(
        {"text": "a"},
        note_call("c1"),
        {"text": "b"},
        {"text": "c"},
    )
    loop = loop_for(approval_broker, approval_session, model)
    async with approval_broker.answerer(ScriptedAnswerer()):
        await loop.prompt("one")
        await approval_broker.set_policy(approval_session.agent, "never")
        await loop.prompt("two")
        await loop.prompt("three")
    # Steps: "one" -> a; (switch to never); "two" -> note call, b; "three" -> c.
    first, second, third, fourth = model.requests
    assert first.context == (ContextEntry(key="approval:policy", text=ASK),)
    assert second.context == (ContextEntry(key="approval:policy", text=NEVER),)
    assert third.context == ()
    assert fourth.context == ()
    # The snapshot accumulates: each text appears once, in the order it was appended.
    assert [m.text for m in fourth.messages if m.role == "context"] == [ASK, NEVER]


async def test_switch_notice_is_delivered_once_on_the_next_step(
    approval_broker: Broker, approval_session: Session
) -> None:
    model = scripted({"text": "a"}, {"text": "b"}, {"text": "c"})
    loop = loop_for(approval_broker, approval_session, model)
    await loop.prompt("one")
    await approval_broker.set_policy(approval_session.agent, "never")
    await approval_broker.set_policy(approval_session.agent, "never")
    await loop.prompt("two")
    await loop.prompt("three")
    notice = (
        'The user changed the approval policy from "ask the user for approval" to '
        '"never ask the user for approval".'
    )
    assert [n.text for n in model.requests[1].notices] == [notice]
    assert model.requests[1].context == (ContextEntry(key="approval:policy", text=NEVER),)
    assert model.requests[2].notices == ()
    assert model.requests[2].context == ()
    notices = [line for line in lines_of(approval_broker, approval_session) if '"source"' in line]
    assert notices == [
        f'{{"type":"user/message","data":{{"text":{json.dumps(notice)},'
        '"source":"approval/policy"}}'
    ]


async def test_delegated_child_is_told_and_rejected_before_an_allowing_answerer(
    approval_broker: Broker, approval_session: Session
) -> None:
    child = await approval_broker.delegate(approval_session.agent)
    model = scripted(note_call("c1"), {"text": "I cannot take notes."})
    loop = loop_for(approval_broker, child, model)
    answerer = ScriptedAnswerer([Outcome.ALLOWED_ONCE])
    async with approval_broker.answerer(answerer):
        await loop.prompt("take a note")
    assert answerer.asked == []
    assert context_keys(model.requests[0]) == ["approval:delegation", "approval:policy"]
    assert model.requests[0].context[1].text == NEVER
    tool_result = next(m for m in model.requests[1].messages if m.role == "tool")
    assert tool_result.text == (
        'Error: tool "note" was rejected automatically: approval prompts are disabled in this '
        "session"
    )
    assert "approval/decided" in types_of(approval_broker, child)
    assert "approval/decided" not in types_of(approval_broker, approval_session)


async def test_abort_withdraws_the_question_and_stops_the_turn(
    approval_broker: Broker, approval_session: Session
) -> None:
    model = scripted(note_call("c1"), {"text": "never reached"})
    loop = loop_for(approval_broker, approval_session, model)
    signal = AbortSignal()

    async def hold(req: object) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    results = []
    async with approval_broker.answerer(ScriptedAnswerer([hold])), trio.open_nursery() as n:

        async def run() -> None:
            results.append(await loop.prompt("take a note", signal=signal))

        n.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        signal.abort("session/cancel")
    assert results[0].stop_reason is StopReason.CANCELLED
    assert len(model.requests) == 1
    assert loop.messages[-1].text == "Error: tool call aborted before dispatch"
    types = types_of(approval_broker, approval_session)
    assert types[-4:] == ["approval/asked", "approval/decided", "tool/result", "turn/end"]


async def test_caller_cancellation_ends_the_turn_cancelled(
    approval_broker: Broker, approval_session: Session
) -> None:
    model = scripted(note_call("c1"))
    loop = loop_for(approval_broker, approval_session, model)

    async def hold(req: object) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with approval_broker.answerer(ScriptedAnswerer([hold])):
        with trio.move_on_after(1) as scope:
            await loop.prompt("take a note")
    assert scope.cancelled_caught
    lines = lines_of(approval_broker, approval_session)
    assert lines[-1] == '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"cancelled"}}}'
    assert '"outcome":"cancelled"' in lines[-2]


async def test_step_budget(approval_broker: Broker, approval_session: Session) -> None:
    model = scripted(note_call("c1"), note_call("c2"), note_call("c3"))
    runtime = ToolRuntime(tools=[Note()], approval=approval_broker)
    loop = AgentLoop(
        broker=approval_broker, session=approval_session, model=model, runtime=runtime, max_steps=2
    )
    result = await loop.prompt("loop")
    assert (result.stop_reason, result.steps) == (StopReason.MAX_TURN_REQUESTS, 2)
    with pytest.raises(ValueError, match=r"^max_steps must be at least 1, got 0"):
        AgentLoop(
            broker=approval_broker,
            session=approval_session,
            model=model,
            runtime=runtime,
            max_steps=0,
        )


async def test_no_service_fails_closed_in_the_loop() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        model = scripted(note_call("c1"), {"text": "ok"})
        runtime = ToolRuntime(tools=[Note()], gates=[ask_gate])
        await AgentLoop(broker=broker, session=session, model=model, runtime=runtime).prompt("x")
    tool = next(m for m in model.requests[1].messages if m.role == "tool")
    assert tool.text == "Error: notes need approval"


# -- scenarios -----------------------------------------------------------------------------------


def test_builtin_scenario_loads() -> None:
    scenario = Scenario.from_file(scenario_path("escalation"))
    assert scenario.name == "escalation"
    assert scenario.steps[1].tool_calls[0].arguments["sandbox_permissions"] == "workspace-write"
    with pytest.raises(ValueError, match=r"^name must be a built-in scenario, got 'nope'"):
        scenario_path("nope")


def test_toml_scenarios(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "t"\n[[steps]]\ntext = "hi"\n')
    assert Scenario.from_file(path).steps[0].text == "hi"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", r"^scenario '.*s\.json' is not valid json: "),
        (
            '{"name": "t", "steps": [{"txt": "hi"}]}',
            r"^scenario '.*s\.json' is malformed: unexpected keys \(txt\): expected only text, "
            r"toolCalls, expect @ \$\.steps\[0\]$",
        ),
        (
            '{"steps": []}',
            r"^scenario '.*s\.json' is malformed: required field missing @ \$\.name$",
        ),
    ],
)
def test_bad_scenarios_name_the_file_and_the_problem(
    tmp_path: pathlib.Path, content: str, message: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(ScenarioError, match=message):
        Scenario.from_file(path)


def test_missing_scenario_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ScenarioError, match=r"^scenario '.*missing\.json' cannot be read: "):
        Scenario.from_file(tmp_path / "missing.json")
