"""The bash tool and its escalation gate (spec 8.2) on real bubblewrap, checking the filesystem."""

from __future__ import annotations

import pathlib

import pytest
import trio

from broker import ApprovalAsked, Broker, Outcome, Session, open_broker
from broker.rules import Layer, Rule, RuleDecision, RuleOrigin
from broker.testing import ScriptedAnswerer
from broker.tools import (
    ESCALATION_HINT,
    BashTool,
    BubblewrapExecutor,
    CallContext,
    CommandLimits,
    PlainExecutor,
    SandboxMode,
    SandboxUnavailableError,
    ToolCall,
    ToolResult,
    ToolRuntime,
)

from .conftest import log_of, types_of

WRITE = "echo escalated > escalated.txt && cat escalated.txt"
JUSTIFICATION = "the user asked to write escalated.txt in the workspace"
MARKER = "[sandbox: file access denied under read-only mode]"
HINT = (
    "[sandbox: escalation available — retry this exact command once with sandbox_permissions "
    "(the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
)


@pytest.fixture
async def executor() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:  # only where bwrap cannot run; -ra prints why
        pytest.skip(f"bubblewrap cannot run here: {exc}")


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def call(cid: str = "c1", /, **arguments: object) -> ToolCall:
    return ToolCall(id=cid, name="bash", arguments={"command": WRITE, **arguments})


def escalate(cid: str = "c2", mode: str = "workspace-write") -> ToolCall:
    return call(cid, sandbox_permissions=mode, justification=JUSTIFICATION)


def test_exact_hint_matches_the_spec() -> None:
    assert ESCALATION_HINT == HINT


async def test_a_denied_write_carries_marker_and_hint_and_leaves_no_file(
    executor: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    bash = BashTool(executor=executor, workspace=workspace)
    result = await ToolRuntime(tools=[bash]).execute(call())
    assert result.output.endswith(f"\n{MARKER}\n{HINT}")
    assert "Read-only file system" in result.output
    assert not (workspace / "escalated.txt").exists()


async def test_approved_escalation_runs_once_then_confined_again(
    executor: BubblewrapExecutor,
    workspace: pathlib.Path,
    approval_broker: Broker,
    approval_session: Session,
) -> None:
    bash = BashTool(executor=executor, workspace=workspace)
    runtime = ToolRuntime(tools=[bash], approval=approval_broker)
    answerer = ScriptedAnswerer([Outcome.ALLOWED_ONCE])
    async with approval_broker.answerer(answerer), approval_session.turn():
        granted = await runtime.execute(escalate(), agent=approval_session.agent)
        assert granted == ToolResult(output="escalated")
        assert [p.name for p in workspace.iterdir()] == ["escalated.txt"]
        (workspace / "escalated.txt").unlink()
        again = await runtime.execute(call("c3"), agent=approval_session.agent)
    assert MARKER in again.output
    assert list(workspace.iterdir()) == []
    assert len(answerer.asked) == 1
    asked = next(
        e for e in log_of(approval_broker, approval_session) if isinstance(e, ApprovalAsked)
    )
    assert asked.reason == f"escalate sandbox to workspace-write: {JUSTIFICATION}"
    assert asked.call_id == "c2"
    assert asked.tool_name == "bash"
    assert answerer.asked[0].display_reason == (
        f"run `{WRITE}` with workspace-write access: {JUSTIFICATION}"
    )


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (Outcome.REJECTED, 'the user rejected escalating this command to "workspace-write"'),
        (Outcome.CANCELLED, 'approval for escalating to "workspace-write" was cancelled'),
        (
            Outcome.UNAVAILABLE,
            'sandbox escalation to "workspace-write" requires approval, but no approval channel '
            "is available",
        ),
    ],
)
async def test_refused_escalations_have_exact_texts_and_write_nothing(
    executor: BubblewrapExecutor,
    workspace: pathlib.Path,
    approval_broker: Broker,
    approval_session: Session,
    answer: Outcome,
    text: str,
) -> None:
    runtime = ToolRuntime(
        tools=[BashTool(executor=executor, workspace=workspace)], approval=approval_broker
    )
    async with approval_broker.answerer(ScriptedAnswerer([answer])), approval_session.turn():
        result = await runtime.execute(escalate(), agent=approval_session.agent)
    assert result == ToolResult.error(text)
    assert list(workspace.iterdir()) == []


async def test_never_policy_escalation_text(
    executor: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    async with open_broker(policy="never") as broker, broker.open_session() as session:
        runtime = ToolRuntime(
            tools=[BashTool(executor=executor, workspace=workspace)], approval=broker
        )
        async with session.turn():
            result = await runtime.execute(escalate(), agent=session.agent)
    assert result.output == (
        'Error: escalating this command to "workspace-write" was rejected automatically: '
        "approval prompts are disabled in this session"
    )
    assert list(workspace.iterdir()) == []


async def test_a_deny_rule_escalation_text(
    executor: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    origin = RuleOrigin(layer=Layer.MANAGED, file="/etc/broker/rules.toml", index=3)
    rule = Rule.build(
        decision=RuleDecision.DENY, tools=("bash",), origin=origin, reason="no wider sandbox here"
    )
    async with open_broker(rules=[rule]) as broker, broker.open_session() as session:
        bash = BashTool(executor=executor, workspace=workspace)
        runtime = ToolRuntime(tools=[bash], approval=broker)
        async with session.turn():
            # Through the runtime, the deny rule holds for the call itself, before any escalation.
            through_runtime = await runtime.execute(escalate(), agent=session.agent)
            # A tool run on its own still asks about the escalation, and the rule refuses it.
            ctx = CallContext(agent=session.agent, approval=broker)
            alone = await bash.run(escalate(), ctx)
    assert through_runtime.output == (
        'Error: tool "bash" was denied by managed rule 3 of /etc/broker/rules.toml: '
        "no wider sandbox here"
    )
    assert alone.output == (
        'Error: escalating this command to "workspace-write" was denied by managed rule 3 of '
        "/etc/broker/rules.toml: no wider sandbox here"
    )
    assert list(workspace.iterdir()) == []


# -- the checks, in order -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"sandbox_permissions": "workspace-write"},
            "invalid escalation: sandbox_permissions requires a justification",
        ),
        (
            {"justification": JUSTIFICATION},
            "invalid escalation: justification is only valid together with sandbox_permissions",
        ),
        (
            {"sandbox_permissions": "workspace-write", "justification": "   "},
            "invalid justification: expected a non-empty sentence",
        ),
        (
            {"sandbox_permissions": "workspace-write", "justification": 7},
            "invalid justification: expected a non-empty sentence",
        ),
        (
            {"sandbox_permissions": "root", "justification": JUSTIFICATION},
            'invalid escalation: sandbox_permissions must be "workspace-write" or '
            '"danger-full-access"',
        ),
    ],
)
@pytest.mark.parametrize("confining", [True, False])
async def test_pairing_comes_first_even_without_a_sandbox(
    executor: BubblewrapExecutor,
    workspace: pathlib.Path,
    arguments: dict[str, object],
    text: str,
    confining: bool,
) -> None:
    bash = BashTool(executor=executor if confining else PlainExecutor(), workspace=workspace)
    result = await ToolRuntime(tools=[bash]).execute(call(**arguments))
    assert result == ToolResult.error(text)
    assert list(workspace.iterdir()) == []


async def test_no_sandbox_in_the_composition(
    workspace: pathlib.Path, approval_broker: Broker, approval_session: Session
) -> None:
    bash = BashTool(executor=PlainExecutor(), workspace=workspace)
    result = await ToolRuntime(tools=[bash], approval=approval_broker).execute(
        escalate(), agent=approval_session.agent
    )
    assert result == ToolResult.error(
        "sandbox_permissions is not available in this composition (no sandboxing executor to "
        "escalate)"
    )
    assert "sandbox_permissions" not in bash.spec().input_schema["properties"]


async def test_a_non_widening_request_never_asks(
    executor: BubblewrapExecutor,
    workspace: pathlib.Path,
    approval_broker: Broker,
    approval_session: Session,
) -> None:
    bash = BashTool(executor=executor, workspace=workspace)
    await bash.set_mode(approval_session, "workspace-write")
    answerer = ScriptedAnswerer()
    runtime = ToolRuntime(tools=[bash], approval=approval_broker)
    async with approval_broker.answerer(answerer), approval_session.turn():
        result = await runtime.execute(escalate(), agent=approval_session.agent)
    assert result == ToolResult.error(
        'sandbox escalation to "workspace-write" is not strictly wider than this call\'s '
        'current "workspace-write" mode'
    )
    assert answerer.asked == []
    assert "approval/asked" not in types_of(approval_broker, approval_session)
    assert types_of(approval_broker, approval_session)[0] == "sandbox/mode"


async def test_no_service_then_no_agent(
    executor: BubblewrapExecutor, workspace: pathlib.Path, approval_broker: Broker
) -> None:
    bash = BashTool(executor=executor, workspace=workspace)
    no_service = await ToolRuntime(tools=[bash]).execute(escalate(), agent=None)
    assert no_service == ToolResult.error(
        'sandbox escalation to "workspace-write" requires approval, but no approval service is '
        "composed"
    )
    no_agent = await ToolRuntime(tools=[bash], approval=approval_broker).execute(escalate())
    assert no_agent == ToolResult.error(
        'sandbox escalation to "workspace-write" requires approval, but the call has no agent '
        "to route it through"
    )


# -- composition, modes and limits ---------------------------------------------------------------


async def test_escalation_fields_are_advertised_only_with_a_sandbox(
    executor: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    confined = BashTool(executor=executor, workspace=workspace).spec().input_schema
    plain = BashTool(executor=PlainExecutor(), workspace=workspace).spec().input_schema
    assert set(confined["properties"]) == {"command", "sandbox_permissions", "justification"}
    assert confined["properties"]["sandbox_permissions"]["enum"] == [
        "workspace-write",
        "danger-full-access",
    ]
    assert set(plain["properties"]) == {"command"}


async def test_session_mode_override_and_workspace_write(
    executor: BubblewrapExecutor, workspace: pathlib.Path, approval_session: Session
) -> None:
    bash = BashTool(executor=executor, workspace=workspace)
    assert bash.mode_for(approval_session) is SandboxMode.READ_ONLY
    await bash.set_mode(approval_session, SandboxMode.WORKSPACE_WRITE)
    assert bash.mode_for(approval_session) is SandboxMode.WORKSPACE_WRITE
    result = await ToolRuntime(tools=[bash]).execute(call(), agent=approval_session.agent)
    assert result == ToolResult(output="escalated")
    with pytest.raises(
        ValueError,
        match=r"^mode must be one of read-only, workspace-write, "
        r"danger-full-access, got 'admin'$",
    ):
        await bash.set_mode(approval_session, "admin")


async def test_limits_are_reported(executor: BubblewrapExecutor, workspace: pathlib.Path) -> None:
    bash = BashTool(
        executor=executor,
        workspace=workspace,
        limits=CommandLimits(time_limit=0.5, output_limit=100),
    )
    runtime = ToolRuntime(tools=[bash])
    with trio.fail_after(10):
        slow = await runtime.execute(
            ToolCall(id="s", name="bash", arguments={"command": "sleep 5"})
        )
        chatty = await runtime.execute(
            ToolCall(id="t", name="bash", arguments={"command": "yes | head -c 5000"})
        )
    assert slow.output == "[command timed out after 0.5s and was killed]"
    assert chatty.output.endswith(
        "[output truncated: only the first 100 bytes of each stream were kept]"
    )
    failing = await runtime.execute(
        ToolCall(id="f", name="bash", arguments={"command": "echo oops >&2; exit 3"})
    )
    assert failing == ToolResult(output="oops\n[exit code 3]", failed=True)
    assert slow.failed
    assert not chatty.failed


async def test_command_is_required(executor: BubblewrapExecutor, workspace: pathlib.Path) -> None:
    result = await ToolRuntime(tools=[BashTool(executor=executor, workspace=workspace)]).execute(
        ToolCall(id="x", name="bash", arguments={"command": " "})
    )
    assert result == ToolResult.error("invalid input: command must be a non-empty string")
