"""The conversation rebuilt from a session's log: what a loaded session's model is given."""

from __future__ import annotations

import pytest
import trio

from broker import Broker, Session
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    Event,
    ToolCalled,
    ToolResulted,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from broker._vocabulary import Outcome
from broker.agent import (
    AgentLoop,
    Message,
    ModelRequest,
    ModelResponse,
    Scenario,
    ScenarioMismatchError,
    ScriptedModel,
    conversation_from_log,
)
from broker.tools import CallContext, ToolCall, ToolResult, ToolRuntime, ToolSpec

from .conftest import log_of


class Flaky:
    """A tool whose ``fail`` argument makes it fail the way a non-zero exit does."""

    name = "note"

    def spec(self) -> ToolSpec:
        return ToolSpec(name="note", description="note", input_schema={"type": "object"})

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        await trio.lowlevel.checkpoint()
        if call.arguments.get("fail"):
            return ToolResult(output="exit 3", failed=True)
        return ToolResult(output=f"noted {call.id}")


class Recording:
    """A model that answers from a list and keeps every request it was given."""

    def __init__(self, *responses: ModelResponse) -> None:
        self.responses = list(responses)
        self.requests: list[ModelRequest] = []

    async def step(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        return self.responses.pop(0) if self.responses else ModelResponse()


def call(cid: str, **arguments: object) -> ToolCall:
    return ToolCall(id=cid, name="note", arguments=dict(arguments))


def loop_for(broker: Broker, session: Session, model: object) -> AgentLoop:
    runtime = ToolRuntime(tools=[Flaky()], gates=[], approval=broker)
    return AgentLoop(broker=broker, session=session, model=model, runtime=runtime)  # type: ignore[arg-type]


def without_context(messages: tuple[Message, ...] | list[Message]) -> list[Message]:
    return [m for m in messages if m.role != "context"]


async def test_the_rebuilt_conversation_is_the_live_one(
    approval_broker: Broker, approval_session: Session
) -> None:
    """Every shape of step (text + calls, several calls in one step, calls without text, a
    failed call, a final text) comes back from the log exactly as the loop held it."""
    model = Recording(
        ModelResponse(text="two at once", tool_calls=(call("a"), call("b", fail=True))),
        ModelResponse(tool_calls=(call("c"),)),
        ModelResponse(tool_calls=(call("d"),)),
        ModelResponse(text="done"),
        ModelResponse(text="second turn"),
    )
    loop = loop_for(approval_broker, approval_session, model)
    with trio.fail_after(10):
        await loop.prompt("first")
        await loop.prompt("again")
    live = without_context(loop.messages)
    rebuilt = conversation_from_log(log_of(approval_broker, approval_session))
    assert rebuilt == live
    assert [m.role for m in rebuilt] == [
        "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool",
        "assistant", "user", "assistant",
    ]  # fmt: skip
    assert rebuilt[1].tool_calls == (call("a"), call("b", fail=True))
    assert rebuilt[4].tool_calls == (call("c"),)
    assert rebuilt[4].text == ""


async def test_a_failed_call_is_logged_failed(
    approval_broker: Broker, approval_session: Session
) -> None:
    model = Recording(ModelResponse(tool_calls=(call("x", fail=True),)))
    with trio.fail_after(10):
        await loop_for(approval_broker, approval_session, model).prompt("go")
    results = [e for e in log_of(approval_broker, approval_session) if isinstance(e, ToolResulted)]
    assert results == [ToolResulted(call_id="x", output="exit 3", failed=True)]


def test_an_unanswered_call_gets_a_result_saying_why() -> None:
    events: list[Event] = [
        TurnStart(turn=1),
        UserMessage(text="go"),
        ToolCalled(call_id="c1", tool_name="bash", input={"command": "ls"}),
        ApprovalAsked(id="q", tool_name="bash", call_id="c1"),
        ApprovalDecided(id="q", outcome=Outcome.CANCELLED, recovered=True),
        TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")),
    ]
    assert conversation_from_log(events)[-1] == Message(
        role="tool",
        call_id="c1",
        is_error=True,
        text="Error: interrupted: the broker stopped before this tool call finished; it may or "
        "may not have run",
    )
    cancelled = [*events[:-1], TurnEnd(turn=1, reason=TurnEndReason(kind="cancelled"))]
    assert conversation_from_log(cancelled)[-1].text == (
        "Error: not finished: the turn ended (cancelled) before this tool call produced a result"
    )
    assert conversation_from_log(events[:-1])[-1].text == (
        "Error: not finished: the session log ends before this tool call produced a result"
    )


def test_sourced_notices_keep_their_source() -> None:
    notice = UserMessage(text="The user changed the approval policy", source="approval:policy")
    assert conversation_from_log([notice]) == [
        Message(role="user", text=notice.text, source="approval:policy")
    ]


async def test_restore_gives_the_model_the_earlier_turns(
    approval_broker: Broker, approval_session: Session
) -> None:
    first = Recording(ModelResponse(text="hello", tool_calls=(call("a"),)), ModelResponse())
    with trio.fail_after(10):
        await loop_for(approval_broker, approval_session, first).prompt("one")
    second = Recording(ModelResponse(text="again"))
    loop = loop_for(approval_broker, approval_session, second)
    loop.restore(log_of(approval_broker, approval_session))
    with trio.fail_after(10):
        await loop.prompt("two")
    given = without_context(second.requests[0].messages)
    assert [(m.role, m.text) for m in given] == [
        ("user", "one"),
        ("assistant", "hello"),
        ("tool", "noted a"),
        ("user", "two"),
    ]
    with pytest.raises(RuntimeError, match=r"^restore\(\) needs a loop with an empty conv"):
        loop.restore([])


def scenario(*steps: dict[str, object]) -> Scenario:
    return Scenario.from_data({"name": "s", "steps": list(steps)})


async def test_a_scripted_model_continues_its_script_and_never_reuses_a_call_id(
    approval_broker: Broker, approval_session: Session
) -> None:
    script = scenario(
        {"toolCalls": [{"name": "note"}]},
        {"text": "first done"},
        {
            "expect": [
                {"role": "user", "text": "one"},
                {"role": "tool", "callId": "call_1"},
                {"role": "assistant", "text": "first done"},
                {"role": "user", "text": "two"},
            ],
            "toolCalls": [{"name": "note"}],
        },
    )
    with trio.fail_after(10):
        await loop_for(approval_broker, approval_session, ScriptedModel(script)).prompt("one")
        loop = loop_for(approval_broker, approval_session, ScriptedModel(script))
        loop.restore(log_of(approval_broker, approval_session))
        await loop.prompt("two")
    ids = [
        e.call_id for e in log_of(approval_broker, approval_session) if isinstance(e, ToolCalled)
    ]
    assert ids == ["call_1", "call_2"]


async def test_a_failed_expectation_names_the_missing_message(
    approval_broker: Broker, approval_session: Session
) -> None:
    script = scenario({"expect": [{"role": "user", "text": "earlier"}], "text": "x"})
    loop = loop_for(approval_broker, approval_session, ScriptedModel(script))
    with trio.fail_after(10), pytest.raises(ScenarioMismatchError) as info:
        await loop.prompt("now")
    assert str(info.value) == (
        "scenario 's' step 1 expected a message with role='user', text='earlier' in the "
        "conversation it was given (2 messages), in order: it is missing"
    )
