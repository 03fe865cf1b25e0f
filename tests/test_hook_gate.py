"""The hook bridge as a pre-execute gate: real hook scripts, routed through the tool runtime."""

from __future__ import annotations

import json
import pathlib
import sys

import trio

from broker import ApprovalAsked, Broker, Outcome, Session
from broker.hooks import HookBridge, HookGate, HookSettings
from broker.testing import ScriptedAnswerer
from broker.tools import CallContext, ToolCall, ToolResult, ToolRuntime, ToolSpec

from .conftest import log_of


class Echo:
    name = "Bash"

    def __init__(self) -> None:
        self.runs = 0

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description="echo", input_schema={"type": "object"})

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        await trio.lowlevel.checkpoint()
        self.runs += 1
        return ToolResult(output="ran")


def hook_printing(tmp_path: pathlib.Path, name: str, output: dict[str, object] | None) -> str:
    script = tmp_path / f"{name}.py"
    body = "" if output is None else f"print({json.dumps(json.dumps(output))})"
    script.write_text(f"import sys, json\njson.load(sys.stdin)\n{body}\n")
    return f"{sys.executable} {script}"


def decision(kind: str, reason: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {"hookEventName": "PreToolUse", "permissionDecision": kind}
    if reason is not None:
        out["permissionDecisionReason"] = reason
    return {"hookSpecificOutput": out}


def gate_for(tmp_path: pathlib.Path, *commands: str) -> HookGate:
    settings = HookSettings.from_json(
        {
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [
                            {"type": "command", "command": c, "timeout": 10} for c in commands
                        ],
                    }
                ]
            }
        },
        source="settings.json",
    )
    return HookGate(bridge=HookBridge(settings=settings), cwd=tmp_path)


CALL = ToolCall(id="toolu_1", name="Bash", arguments={"command": "ls"})


async def test_hook_ask_with_reason_is_asked_and_logged(
    tmp_path: pathlib.Path, approval_broker: Broker, approval_session: Session
) -> None:
    tool = Echo()
    gate = gate_for(tmp_path, hook_printing(tmp_path, "ask", decision("ask", "touches prod")))
    runtime = ToolRuntime(tools=[tool], gates=[gate], approval=approval_broker)
    answerer = ScriptedAnswerer([Outcome.ALLOWED_ONCE])
    async with approval_broker.answerer(answerer), approval_session.turn():
        with trio.fail_after(20):
            result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result == ToolResult(output="ran")
    asked = [e for e in log_of(approval_broker, approval_session) if isinstance(e, ApprovalAsked)]
    assert [(a.tool_name, a.call_id, a.reason) for a in asked] == [
        ("Bash", "toolu_1", "touches prod")
    ]


async def test_hook_ask_without_reason_logs_no_reason(
    tmp_path: pathlib.Path, approval_broker: Broker, approval_session: Session
) -> None:
    gate = gate_for(tmp_path, hook_printing(tmp_path, "ask", decision("ask")))
    runtime = ToolRuntime(tools=[Echo()], gates=[gate], approval=approval_broker)
    async with approval_broker.answerer(ScriptedAnswerer([Outcome.REJECTED])):
        async with approval_session.turn():
            with trio.fail_after(20):
                result = await runtime.execute(CALL, agent=approval_session.agent)
    assert result == ToolResult.error('the user rejected tool "Bash"')
    asked = log_of(approval_broker, approval_session)[1]
    assert isinstance(asked, ApprovalAsked)
    assert asked.reason is None


async def test_hook_ask_without_a_service(tmp_path: pathlib.Path) -> None:
    with_reason = gate_for(tmp_path, hook_printing(tmp_path, "a1", decision("ask", "why not")))
    without = gate_for(tmp_path, hook_printing(tmp_path, "a2", decision("ask")))
    tool = Echo()
    with trio.fail_after(20):
        first = await ToolRuntime(tools=[tool], gates=[with_reason]).execute(CALL)
        second = await ToolRuntime(tools=[tool], gates=[without]).execute(CALL)
    assert first == ToolResult.error("why not")
    assert second == ToolResult.error('tool "Bash" requires approval (not yet supported)')
    assert tool.runs == 0


async def test_hook_deny_and_hook_failure_fail_closed(tmp_path: pathlib.Path) -> None:
    deny = gate_for(tmp_path, hook_printing(tmp_path, "d", decision("deny", "no ls")))
    crash = gate_for(tmp_path, "exit 1")
    tool = Echo()
    with trio.fail_after(20):
        denied = await ToolRuntime(tools=[tool], gates=[deny]).execute(CALL)
        crashed = await ToolRuntime(tools=[tool], gates=[crash]).execute(CALL)
    assert denied == ToolResult.error("no ls")
    assert crashed == ToolResult.error('PreToolUse hook "exit 1" exited with status 1')
    assert tool.runs == 0


async def test_no_opinion_delegates_explicit_allow_claims(tmp_path: pathlib.Path) -> None:
    tool = Echo()
    silent = gate_for(tmp_path, hook_printing(tmp_path, "s", None))
    allow = gate_for(tmp_path, hook_printing(tmp_path, "al", decision("allow")))
    deny = gate_for(tmp_path, hook_printing(tmp_path, "dn", decision("deny", "later gate")))
    with trio.fail_after(20):
        delegated = await ToolRuntime(tools=[tool], gates=[silent, deny]).execute(CALL)
        claimed = await ToolRuntime(tools=[tool], gates=[allow, deny]).execute(CALL)
    assert delegated == ToolResult.error("later gate")
    assert claimed == ToolResult(output="ran")
