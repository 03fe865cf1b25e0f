"""The hook bridge cannot fail open, and the prompt cannot lie (issue 10, items 2, 5 and 6)."""

from __future__ import annotations

import io
import json
import logging
import pathlib
import secrets
from typing import TYPE_CHECKING, cast

import pytest
import trio

from broker import ApprovalRequest, Outcome
from broker.cli import main
from broker.cli._terminal import TerminalAnswerer
from broker.hooks import HookBridge, HookCall, HookGate, HookSettings, HookSettingsError
from broker.tools import BashTool, ToolCall, ToolRuntime

from .conftest import BOUND, WW
from .test_sandbox_attacks import _leftovers

if TYPE_CHECKING:
    from broker import Agent, AnswerNext
    from broker.tools import BubblewrapExecutor, ToolResult

pytestmark = pytest.mark.slow


def settings_file(directory: pathlib.Path, hooks: dict[str, object]) -> pathlib.Path:
    path = directory / "settings.json"
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def pre_tool_use(matcher: str, command: str) -> dict[str, object]:
    return {
        "PreToolUse": [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]
    }


async def run_bash(
    executor: BubblewrapExecutor, workspace: pathlib.Path, settings: HookSettings, command: str
) -> ToolResult:
    gate = HookGate(bridge=HookBridge(settings=settings), cwd=workspace)
    tool = BashTool(executor=executor, workspace=workspace, default_mode=WW)
    runtime = ToolRuntime(tools=[tool], gates=[gate])
    return await runtime.execute(ToolCall(id="c1", name="bash", arguments={"command": command}))


DENY = "echo 'blocked by policy' >&2; exit 2"


@pytest.mark.parametrize("matcher", ["Bash", "bash", "Bash|Write", "Ba.*"])
async def test_a_claude_code_matcher_denies_this_projects_bash(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, tmp_path: pathlib.Path, matcher: str
) -> None:
    settings = HookSettings.from_file(settings_file(tmp_path, pre_tool_use(matcher, DENY)))
    with trio.fail_after(BOUND):
        result = await run_bash(sandbox, workspace, settings, "echo ran > ran.txt")
    assert result.output == "Error: blocked by policy"
    assert not (workspace / "ran.txt").exists()


@pytest.mark.parametrize(
    ("hooks", "problem"),
    [
        (
            {"PretoolUse": pre_tool_use("Bash", DENY)["PreToolUse"]},
            "hooks.PretoolUse is not a hook event, so its hooks never run; "
            'did you mean "PreToolUse"?',
        ),
        (
            {"PostToolUse": pre_tool_use("Bash", DENY)["PreToolUse"]},
            "hooks.PostToolUse is not run by this broker (only PreToolUse is); its hooks never run",
        ),
        (
            {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http", "url": "http://x"}]}]},
            'hooks.PreToolUse[0].hooks[0].type is "http", which this broker does not run '
            '(only "command" hooks run); this hook never runs',
        ),
        (
            pre_tool_use("Read|Grep", DENY),
            'hooks.PreToolUse[0].matcher "Read|Grep" matches no registered tool, so its hooks '
            "never run; the tools are bash (Bash)",
        ),
    ],
)
def test_settings_that_would_run_fewer_hooks_are_reported_loudly(
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    hooks: dict[str, object],
    problem: str,
) -> None:
    path = settings_file(tmp_path, hooks)
    with caplog.at_level(logging.WARNING, logger="broker.hooks"):
        settings = HookSettings.from_file(path)
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {problem}"]
    assert settings.check() == (f"{path}: {problem}",)
    assert main(["hooks", "check", str(path)]) == 1
    assert capsys.readouterr().out == f"{path}: {problem}\n"


def test_hooks_check_accepts_a_file_that_runs_everything(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = settings_file(tmp_path, pre_tool_use("Bash", DENY))
    assert main(["hooks", "check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (1 PreToolUse command hooks)\n"


@pytest.fixture
def guarded(workspace: pathlib.Path, tmp_path: pathlib.Path) -> HookSettings:
    """A guard hook that lives in the workspace, as Claude Code projects commonly keep it."""
    hooks = workspace / ".claude" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "guard.sh").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "guard.sh").chmod(0o755)
    command = '"$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.sh'
    return HookSettings.from_file(settings_file(tmp_path, pre_tool_use("Bash", command)))


async def test_a_command_cannot_rewrite_a_workspace_hook(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, guarded: HookSettings
) -> None:
    guard = workspace / ".claude" / "hooks" / "guard.sh"
    before = guard.read_bytes()
    with trio.fail_after(BOUND):
        first = await run_bash(
            sandbox,
            workspace,
            guarded,
            f"printf '#!/bin/sh\\ntouch {workspace}/pwned\\n' > {guard}",
        )
        second = await run_bash(sandbox, workspace, guarded, "echo second")
    assert "Read-only file system" in first.output
    assert guard.read_bytes() == before
    assert second.output == "second"
    assert not (workspace / "pwned").exists()


async def test_a_workspace_hook_changed_after_load_is_denied_not_run(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, guarded: HookSettings
) -> None:
    gate = HookGate(bridge=HookBridge(settings=guarded), cwd=workspace)
    guard = workspace / ".claude" / "hooks" / "guard.sh"
    # As an approved danger-full-access command (or anything outside the sandbox) could.
    guard.write_text(f"#!/bin/sh\ntouch {workspace}/pwned\nexit 0\n")
    tool = BashTool(executor=sandbox, workspace=workspace, default_mode=WW)
    runtime = ToolRuntime(tools=[tool], gates=[gate])
    with trio.fail_after(BOUND):
        result = await runtime.execute(
            ToolCall(id="c2", name="bash", arguments={"command": "echo ran > ran.txt"})
        )
    assert result.output == (
        'Error: PreToolUse hook ""$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.sh" was not run: '
        f"{guard.resolve()} changed since the settings were loaded (sha256 mismatch); reload "
        "the settings to trust the new content"
    )
    assert not (workspace / "pwned").exists()
    assert not (workspace / "ran.txt").exists()


def test_a_workspace_hook_that_does_not_exist_is_refused_at_load(
    workspace: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    command = "bash $CLAUDE_PROJECT_DIR/.claude/hooks/missing.sh"
    settings = HookSettings.from_file(settings_file(tmp_path, pre_tool_use("Bash", command)))
    missing = workspace.resolve() / ".claude" / "hooks" / "missing.sh"
    with pytest.raises(
        HookSettingsError, match=r"^.*refers to .*missing\.sh.* which does not exist"
    ):
        HookGate(bridge=HookBridge(settings=settings), cwd=workspace)
    assert not missing.exists()


async def test_a_setsid_child_dies_with_its_hook(
    workspace: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    marker = f"30.{secrets.randbelow(10**6):06d}"
    command = f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 0.2; exit 0"
    settings = HookSettings.from_file(settings_file(tmp_path, pre_tool_use("Bash", command)))
    gate = HookGate(bridge=HookBridge(settings=settings), cwd=workspace)
    with trio.fail_after(BOUND):
        _, verdicts = await gate.bridge.evaluate_verbose(
            HookCall(
                session_id="s",
                cwd=workspace,
                tool_name="bash",
                tool_input={"command": "x"},
                tool_use_id="t",
            )
        )
    assert [v.decision for v in verdicts] == [None]
    assert not _leftovers(marker)


@pytest.mark.parametrize(
    "hostile",
    [
        "rm -rf ~\r\x1b[2Kls",  # carriage return + erase line: the person would see "ls"
        "echo safe \u202e# txt.exe",  # right-to-left override reorders the rest
        "ls\x1b]0;title\x07\x9b2K",  # OSC title, BEL, C1 CSI
        "ls\u2066\u2069\u200e\u200f\u061c\u200b",  # isolates, marks, zero-width space
    ],
)
async def test_the_terminal_prompt_shows_controls_and_bidi_visibly(
    monkeypatch: pytest.MonkeyPatch, hostile: str
) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    answerer = TerminalAnswerer(fixed=Outcome.REJECTED)
    # The terminal reads only the display fields; no agent is needed to show them.
    req = ApprovalRequest(
        agent=cast("Agent", None),
        tool_name="bash",
        call_id=f"c{hostile}",
        display_reason=f"run `{hostile}`",
        reason=f"because {hostile}",
    )

    async def next_() -> Outcome:
        raise AssertionError("the terminal answers itself")

    with trio.fail_after(BOUND):
        assert await answerer(req, cast("AnswerNext", next_)) is Outcome.REJECTED
    shown = out.getvalue()
    bad = [c for c in shown if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)]
    assert bad == []
    for char in "\u202e\u2066\u2069\u200e\u200f\u061c\u200b":
        assert char not in shown
    assert "\\x1b" in shown or "\\u202e" in shown or "\\u2066" in shown


async def test_a_claude_code_script_that_checks_tool_name_still_denies(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # The common shape of a Claude Code guard: act only when tool_name is "Bash".
    script = tmp_path / "guard.py"
    script.write_text(
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        "if event['tool_name'] == 'Bash' and 'rm' in event['tool_input']['command']:\n"
        "    print('no rm', file=sys.stderr); sys.exit(2)\n"
    )
    command = f"python3 {script}"
    settings = HookSettings.from_file(settings_file(tmp_path, pre_tool_use("Bash", command)))
    (workspace / "keep").write_text("x")
    with trio.fail_after(BOUND):
        result = await run_bash(sandbox, workspace, settings, "rm keep")
    assert result.output == "Error: no rm"
    assert (workspace / "keep").exists()
