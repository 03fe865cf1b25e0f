"""The Codex harness against the real ``codex`` binary: its hook protocol, pinned.

Each test runs ``codex exec`` (npm ``@openai/codex``, pinned in ``tests/agents/codex``)
offline against :class:`ScriptedResponses`, with a tiny stdlib hook script that logs its stdin
JSON and answers as told. Needs ``npm ci --prefix tests/agents/codex``: without the binary
these tests fail (they never skip), saying how to install it. The facts pinned here are
written up in ``design/agent-hooks-codex.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .codex import (
    CODEX_BIN,
    CODEX_DIR,
    CompletedRun,
    hook_command,
    hook_trust_state,
    run_codex,
)
from .model_api_openai import (
    Parallel,
    ScriptedResponses,
    ShellCall,
    Text,
    Turn,
    function_call_outputs,
)

pytestmark = pytest.mark.slow

PINNED = json.loads((CODEX_DIR / "package.json").read_text(encoding="utf-8"))["dependencies"][
    "@openai/codex"
]

# Logs its stdin (one JSON line per run) before doing anything else, then answers per argv:
#   <log> <mode> [<substring>]
HOOK_SCRIPT = r"""
import json, sys, time
raw = sys.stdin.read()
log, mode = sys.argv[1], sys.argv[2]
with open(log, "a", encoding="utf-8") as f:
    f.write(json.dumps({"stdin": json.loads(raw), "mode": mode}) + "\n")
event = json.loads(raw)["hook_event_name"]
def specific(**fields):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": event, **fields}}))
if mode == "deny-if" and sys.argv[3] not in json.loads(raw)["tool_input"]["command"]:
    mode = "silent"
if mode == "silent":
    pass
elif mode in ("deny", "deny-if"):
    specific(permissionDecision="deny", permissionDecisionReason="the broker said no")
elif mode == "deny-no-reason":
    specific(permissionDecision="deny")
elif mode == "ask":
    specific(permissionDecision="ask")
elif mode == "allow":
    specific(permissionDecision="allow")
elif mode == "rewrite":
    specific(permissionDecision="allow", updatedInput={"command": "echo rewritten > out.txt"})
elif mode == "legacy-block":
    print(json.dumps({"decision": "block", "reason": "blocked the legacy way"}))
elif mode == "exit2":
    sys.stderr.write("exit 2 says no\n")
    sys.exit(2)
elif mode == "crash":
    sys.stderr.write("Traceback: the hook fell over\n")
    sys.exit(1)
elif mode == "bad-json":
    print('{"hookSpecificOutput": ')
elif mode == "plain-text":
    print("deny")
elif mode == "sleep":
    time.sleep(30)
elif mode == "perm-allow":
    specific(decision={"behavior": "allow"})
elif mode == "perm-deny":
    specific(decision={"behavior": "deny", "message": "the broker denied it"})
else:
    raise SystemExit("unknown mode " + mode)
"""

ESCALATED = {"sandbox_permissions": "require_escalated", "justification": "Write out.txt"}


class Hook:
    """The hook script in *tmp_path* and the log of its runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.script = tmp_path / "hook.py"
        self.script.write_text(HOOK_SCRIPT, encoding="utf-8")
        self.log = tmp_path / "hook-runs.jsonl"

    def command(self, mode: str, *args: str) -> str:
        return hook_command(sys.executable, self.script, self.log, mode, *args)

    def config(self, event: str, mode: str, *args: str, timeout: int = 20) -> dict[str, Any]:
        return {
            "matcher": "Bash",
            "hooks": [
                {"type": "command", "command": self.command(mode, *args), "timeout": timeout}
            ],
        }

    def hooks(self, **events: str) -> dict[str, Any]:
        """``hooks.json`` content: one matcher group per ``Event=mode``."""
        return {"hooks": {event: [self.config(event, mode)] for event, mode in events.items()}}

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["stdin"] for line in lines]


@pytest.fixture
def hook(tmp_path: Path) -> Hook:
    return Hook(tmp_path)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def check_run(run: CompletedRun, api: ScriptedResponses) -> None:
    """The run ended normally and the script was neither overrun nor cut short."""
    context = f"stderr:\n{run.stderr[-3000:]}\nstdout:\n{run.stdout[-3000:]}"
    assert run.returncode == 0, context
    assert api.overruns == 0, context
    assert run.final_message == "done", context


def output_for(api: ScriptedResponses, call_id: str = "call_t0_0") -> str:
    """What the model was told about *call_id* (in the request after the call)."""
    return function_call_outputs(api.request_for_turn(1))[call_id]


def test_pinned_binary_runs_offline() -> None:
    if not CODEX_BIN.exists():
        pytest.fail(f"{CODEX_BIN} is missing: run `npm ci --prefix {CODEX_DIR}`")
    out = subprocess.run(
        [str(CODEX_BIN), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == f"codex-cli {PINNED}"


def test_pre_tool_use_runs_and_silence_allows(workdir: Path, hook: Hook) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse="silent"))
    check_run(run, api)
    assert (workdir / "out.txt").read_text() == "hi\n"
    [stdin] = hook.runs()
    assert stdin == {
        "session_id": run.thread_id,
        "turn_id": stdin["turn_id"],
        "transcript_path": stdin["transcript_path"],
        "cwd": str(workdir),
        "hook_event_name": "PreToolUse",
        "model": "gpt-5.5",
        "permission_mode": "bypassPermissions",
        "tool_name": "Bash",
        "tool_input": {"command": "echo hi > out.txt"},
        "tool_use_id": "call_t0_0",
    }
    assert stdin["turn_id"]
    assert stdin["transcript_path"].startswith(str(run.codex_home / "sessions"))
    assert "Process exited with code 0" in output_for(api)
    assert [item["exit_code"] for item in run.items("command_execution")] == [0]


def test_pre_tool_use_deny_reason_reaches_the_model(workdir: Path, hook: Hook) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse="deny"))
    check_run(run, api)
    assert not (workdir / "out.txt").exists()
    assert len(hook.runs()) == 1
    assert output_for(api) == (
        "Command blocked by PreToolUse hook: the broker said no. Command: echo hi > out.txt"
    )
    assert run.items("command_execution") == []


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("exit2", "exit 2 says no"), ("legacy-block", "blocked the legacy way")],
)
def test_pre_tool_use_other_ways_to_deny(workdir: Path, hook: Hook, mode: str, reason: str) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse=mode))
    check_run(run, api)
    assert not (workdir / "out.txt").exists()
    assert output_for(api) == (
        f"Command blocked by PreToolUse hook: {reason}. Command: echo hi > out.txt"
    )


def test_pre_tool_use_allow_with_updated_input_rewrites_the_command(
    workdir: Path, hook: Hook
) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse="rewrite"))
    check_run(run, api)
    assert (workdir / "out.txt").read_text() == "rewritten\n"
    assert [item["command"] for item in run.items("command_execution")] == [
        "/bin/bash -lc 'echo rewritten > out.txt'"
    ]


@pytest.mark.parametrize(
    "mode", ["crash", "bad-json", "plain-text", "deny-no-reason", "ask", "allow", "sleep"]
)
def test_pre_tool_use_fails_open(workdir: Path, hook: Hook, mode: str) -> None:
    """A hook that crashes, answers nonsense, answers what PreToolUse cannot do (ask, a bare
    allow, a deny without a reason) or times out does not stop the command."""
    hooks = {"hooks": {"PreToolUse": [hook.config("PreToolUse", mode, timeout=1)]}}
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hooks)
    check_run(run, api)
    assert len(hook.runs()) == 1  # it did run
    assert (workdir / "out.txt").read_text() == "hi\n"
    assert "Process exited with code 0" in output_for(api)
    if mode == "sleep":
        assert 1.0 <= run.seconds < 20  # waited for the 1 s timeout, not the 30 s sleep


def test_parallel_calls_each_run_the_hook(workdir: Path, hook: Hook) -> None:
    turns: list[Turn] = [
        Parallel(ShellCall("echo a > a.txt"), ShellCall("echo b > b.txt")),
        Text("done"),
    ]
    hooks = {"hooks": {"PreToolUse": [hook.config("PreToolUse", "deny-if", "b.txt")]}}
    with ScriptedResponses(turns) as api:
        run = run_codex(workdir, api=api, hooks=hooks)
    check_run(run, api)
    runs = hook.runs()
    assert sorted(r["tool_use_id"] for r in runs) == ["call_t0_0", "call_t0_1"]
    assert sorted(r["tool_input"]["command"] for r in runs) == ["echo a > a.txt", "echo b > b.txt"]
    assert len({r["turn_id"] for r in runs}) == 1
    assert (workdir / "a.txt").exists()
    assert not (workdir / "b.txt").exists()
    outputs = function_call_outputs(api.request_for_turn(1))
    assert "Process exited with code 0" in outputs["call_t0_0"]
    assert outputs["call_t0_1"].startswith("Command blocked by PreToolUse hook: the broker said no")


def test_untrusted_hooks_are_skipped_silently(workdir: Path, hook: Hook) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse="deny"), hook_trust="none")
    check_run(run, api)
    assert hook.runs() == []
    assert (workdir / "out.txt").exists()


def test_trust_hashes_match_what_codex_computes(tmp_path: Path) -> None:
    """``hook_trust_state`` against ``codex app-server``'s ``hooks/list`` (key, currentHash),
    for handlers with and without matcher, timeout, async and statusMessage."""
    codex_home, home = tmp_path / "codex-home", tmp_path / "home"
    codex_home.mkdir()
    home.mkdir()
    hooks = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "command", "command": "echo a", "statusMessage": "checking"},
                        {"type": "command", "command": "echo b", "timeout": 5, "async": True},
                    ],
                }
            ],
            "PermissionRequest": [{"hooks": [{"type": "command", "command": "echo c"}]}],
        }
    }
    hooks_json = codex_home / "hooks.json"
    hooks_json.write_text(json.dumps(hooks))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home)}
    messages: list[dict[str, Any]] = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "0"}}},
        {"method": "initialized"},
        {"id": 2, "method": "hooks/list", "params": {"cwds": [str(tmp_path)]}},
    ]
    stdin = "".join(json.dumps({"jsonrpc": "2.0", **m}) + "\n" for m in messages)
    with subprocess.Popen(
        [str(CODEX_BIN), "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    ) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write(stdin)
        server.stdin.flush()
        try:
            for line in server.stdout:  # bounded by the pytest timeout
                reply = json.loads(line)
                if reply.get("id") == 2:
                    break
        finally:
            server.kill()
    [listing] = reply["result"]["data"]
    reported = {entry["key"]: entry["currentHash"] for entry in listing["hooks"]}
    assert {entry["trustStatus"] for entry in listing["hooks"]} == {"untrusted"}
    assert reported == hook_trust_state(hooks_json, hooks)
    assert len(reported) == 3


def test_bypass_flag_runs_untrusted_hooks(workdir: Path, hook: Hook) -> None:
    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, hooks=hook.hooks(PreToolUse="deny"), hook_trust="bypass")
    check_run(run, api)
    assert len(hook.runs()) == 1
    assert not (workdir / "out.txt").exists()
    warnings = [item["message"] for item in run.items("error")]
    assert any("--dangerously-bypass-hook-trust" in message for message in warnings)


def test_permission_request_allow(workdir: Path, hook: Hook) -> None:
    turns: list[Turn] = [ShellCall("echo hi > out.txt", extra=ESCALATED), Text("done")]
    hooks = hook.hooks(PreToolUse="silent", PermissionRequest="perm-allow")
    with ScriptedResponses(turns) as api:
        run = run_codex(workdir, api=api, hooks=hooks, approve_for_me=True)
    check_run(run, api)
    assert (workdir / "out.txt").read_text() == "hi\n"
    pre, permission = hook.runs()  # PreToolUse first, then the approval path
    assert pre["hook_event_name"] == "PreToolUse"
    assert pre["permission_mode"] == "default"
    assert permission == {
        "session_id": run.thread_id,
        "turn_id": pre["turn_id"],
        "transcript_path": pre["transcript_path"],
        "cwd": str(workdir),
        "hook_event_name": "PermissionRequest",
        "model": "gpt-5.5",
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": "echo hi > out.txt", "description": "Write out.txt"},
    }
    assert api.side_requests == []  # the hook's allow settled it: no automatic reviewer


def test_permission_request_deny(workdir: Path, hook: Hook) -> None:
    turns: list[Turn] = [ShellCall("echo hi > out.txt", extra=ESCALATED), Text("done")]
    with ScriptedResponses(turns) as api:
        run = run_codex(
            workdir, api=api, hooks=hook.hooks(PermissionRequest="perm-deny"), approve_for_me=True
        )
    check_run(run, api)
    assert not (workdir / "out.txt").exists()
    assert len(hook.runs()) == 1
    assert output_for(api) == (
        'exec_command failed: CreateProcess { message: "Rejected(\\"the broker denied it\\")" }'
    )
    assert api.side_requests == []


def test_permission_request_without_a_decision_goes_to_the_reviewer(
    workdir: Path, hook: Hook
) -> None:
    """A crashing PermissionRequest hook decides nothing: the approval goes on to the
    automatic reviewer (a model sub-agent), which the scripted server cannot satisfy."""
    turns: list[Turn] = [ShellCall("echo hi > out.txt", extra=ESCALATED), Text("done")]
    with ScriptedResponses(turns) as api:
        run = run_codex(
            workdir, api=api, hooks=hook.hooks(PermissionRequest="crash"), approve_for_me=True
        )
    check_run(run, api)
    assert len(hook.runs()) == 1
    assert not (workdir / "out.txt").exists()
    assert api.side_requests
    assert {r.thread_source for r in api.side_requests} == {"guardian_review"}
    assert "Automatic approval review failed" in output_for(api)


def test_permission_request_not_run_when_approval_is_impossible(workdir: Path, hook: Hook) -> None:
    """Without --approve-for-me, ``codex exec`` runs with approval_policy=never: an escalation
    is refused outright and no PermissionRequest hook runs."""
    turns: list[Turn] = [ShellCall("echo hi > out.txt", extra=ESCALATED), Text("done")]
    hooks = hook.hooks(PermissionRequest="perm-allow")
    with ScriptedResponses(turns) as api:
        run = run_codex(workdir, api=api, hooks=hooks, sandbox_mode="workspace-write")
    check_run(run, api)
    assert hook.runs() == []
    assert not (workdir / "out.txt").exists()
    assert output_for(api).startswith("approval policy is Never; reject command")


def test_sandboxed_command_needs_no_permission(workdir: Path, hook: Hook) -> None:
    """Under --approve-for-me a plain call runs in the workspace-write sandbox (bubblewrap,
    working as root here) without an approval, so only PreToolUse runs; a write outside the
    workspace fails in the sandbox and is not retried with an approval."""
    outside = Path("/opt") / f"codex-harness-{workdir.parent.name}.txt"
    turns: list[Turn] = [
        Parallel(ShellCall("echo hi > out.txt"), ShellCall(f"echo x > {outside}")),
        Text("done"),
    ]
    hooks = hook.hooks(PreToolUse="silent", PermissionRequest="perm-allow")
    try:
        with ScriptedResponses(turns) as api:
            run = run_codex(workdir, api=api, hooks=hooks, approve_for_me=True)
        assert not outside.exists()
    finally:
        outside.unlink(missing_ok=True)
    check_run(run, api)
    assert [r["hook_event_name"] for r in hook.runs()] == ["PreToolUse", "PreToolUse"]
    assert (workdir / "out.txt").exists()
    assert "Read-only file system" in output_for(api, "call_t0_1")
