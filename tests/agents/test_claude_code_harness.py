"""The Claude Code harness against the real CLI: what its hooks get and which answers it honours.

Each test runs the pinned ``claude -p`` (``tests/agents/claude-code``) against the scripted model
API of :mod:`tests.agents.model_api`; the model asks for ``Bash`` with ``echo hi > out.txt``
(a write, which Claude Code's default mode would not allow by itself in ``-p``), and a tiny
stdlib hook script (:data:`HOOK_SCRIPT`) logs its stdin and answers as told. These tests pin
the hook protocol ``broker hook claude-code`` is written against
(design/agent-hooks-claude-code.md); a new Claude Code version that changes it turns them red.
Needs ``cd tests/agents/claude-code && npm ci``: without the CLI these tests fail (they never
skip), saying how to install it.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from tests.agents.claude_code import CompletedRun, claude_binary, pinned_version, run_claude
from tests.agents.model_api import (
    Parallel,
    RecordedRequest,
    ScriptedAnthropic,
    Text,
    ToolUse,
    Turn,
    result_text,
    tool_results,
)

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 60.0
COMMAND = "echo hi > out.txt"
CALL_ID = "toolu_harness0001"

# argv: LOG MODE REASON SLEEP. Logs one JSON line per run (stdin, start/end times, pid, the files
# in cwd), then
# answers: a PreToolUse decision, a PermissionRequest decision, exit 2, a crash, bad JSON...
HOOK_SCRIPT = """\
import json, os, sys, time

log, mode, reason, sleep = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
start = time.time()
stdin = json.loads(sys.stdin.read())


def record(end):
    line = {"mode": mode, "stdin": stdin, "start": start, "end": end, "pid": os.getpid(),
            "files": sorted(os.listdir(stdin["cwd"]))}
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\\n")


def pre(decision):
    out = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason:
        out["permissionDecisionReason"] = reason
    print(json.dumps({"hookSpecificOutput": out}))


if mode == "hang":
    record(None)
    time.sleep(120)
time.sleep(sleep)
record(time.time())
if mode in ("allow", "deny", "ask"):
    pre(mode)
elif mode == "invalid-decision":
    pre("maybe")
elif mode == "exit2":
    sys.stderr.write(reason + "\\n")
    sys.exit(2)
elif mode == "crash":
    sys.stderr.write(reason + "\\n")
    sys.exit(1)
elif mode == "badjson":
    print("{this is not json")
elif mode == "perm-allow":
    decision = {"behavior": "allow"}
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                             "decision": decision}}))
elif mode == "perm-deny":
    decision = {"behavior": "deny", "message": reason}
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                             "decision": decision}}))
elif mode != "silent":
    sys.exit("unknown mode " + mode)
"""

PRE_TOOL_USE_FIELDS = {
    "session_id",
    "transcript_path",
    "cwd",
    "prompt_id",
    "permission_mode",
    "effort",
    "hook_event_name",
    "tool_name",
    "tool_input",
    "tool_use_id",
}
# No tool_use_id: a PermissionRequest cannot be tied to its call by id, only by its input.
PERMISSION_REQUEST_FIELDS = (PRE_TOOL_USE_FIELDS - {"tool_use_id"}) | {"permission_suggestions"}


@dataclass
class Hook:
    """The logging hook script in a test's tmp_path."""

    script: pathlib.Path
    log: pathlib.Path

    def command(self, mode: str, reason: str = "", sleep: float = 0.0) -> str:
        argv = [sys.executable, str(self.script), str(self.log), mode, reason, str(sleep)]
        return shlex.join(argv)

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def events(self) -> list[str]:
        return [call["stdin"]["hook_event_name"] for call in self.calls()]


@pytest.fixture
def hook(tmp_path: pathlib.Path) -> Hook:
    script = tmp_path / "hook.py"
    script.write_text(HOOK_SCRIPT, encoding="utf-8")
    return Hook(script, tmp_path / "hook-calls.jsonl")


def handler(command: str, **extra: Any) -> dict[str, Any]:
    return {"type": "command", "command": command, **extra}


def settings_for(
    *, pre: dict[str, Any] | None = None, perm: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Project settings with a ``Bash`` PreToolUse and/or PermissionRequest handler."""
    hooks: dict[str, Any] = {}
    if pre is not None:
        hooks["PreToolUse"] = [{"matcher": "Bash", "hooks": [pre]}]
    if perm is not None:
        hooks["PermissionRequest"] = [{"matcher": "Bash", "hooks": [perm]}]
    return {"hooks": hooks}


@dataclass
class Outcome:
    run: CompletedRun
    api: ScriptedAnthropic
    workdir: pathlib.Path

    @property
    def answered(self) -> RecordedRequest:
        """The conversation request that carried the tool results (turn 1)."""
        return self.api.request_for_turn(1)

    def results(self) -> list[dict[str, Any]]:
        return tool_results(self.answered)

    def only_result(self) -> tuple[bool, str]:
        results = self.results()
        assert len(results) == 1, results
        assert results[0]["tool_use_id"] == CALL_ID
        return bool(results[0].get("is_error")), result_text(results[0])

    def ran(self) -> bool:
        return (self.workdir / "out.txt").exists()


def drive(
    tmp_path: pathlib.Path,
    settings: dict[str, Any],
    *,
    first: Turn | None = None,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> Outcome:
    """One ``claude -p`` run: the model calls Bash (*first*), then says done."""
    first = first if first is not None else ToolUse(COMMAND, id=CALL_ID)
    workdir = tmp_path / "work"
    with ScriptedAnthropic([first, Text("done")]) as api:
        run = run_claude(
            workdir,
            api=api,
            settings=settings,
            prompt="Run the command.",
            timeout=RUN_TIMEOUT,
            extra_args=extra_args,
            extra_env=extra_env,
        )
    assert run.returncode == 0, run.describe()
    assert run.result["subtype"] == "success", run.describe()
    assert run.result["result"] == "done", run.describe()
    assert api.overruns == 0
    # Offline: every request was the main conversation's; nothing else was asked of the API.
    assert [r.kind for r in api.requests] == ["conversation", "conversation"], api.requests
    return Outcome(run, api, workdir)


def denied_ids(run: CompletedRun) -> list[str]:
    return [denial["tool_use_id"] for denial in run.result["permission_denials"]]


# -- the CLI itself ---------------------------------------------------------------------------


def test_pinned_cli_runs_offline() -> None:
    """The native binary npm put in place answers --version with no network and no HOME."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}
    argv = [str(claude_binary()), "--version"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True, env=env)
    assert out.stdout.strip() == f"{pinned_version()} (Claude Code)"


def test_without_a_hook_print_mode_denies_the_write(tmp_path: pathlib.Path) -> None:
    """The control: in -p's default mode nobody may approve the write, so it is refused."""
    outcome = drive(tmp_path, {})
    assert not outcome.ran()
    is_error, text = outcome.only_result()
    assert is_error
    assert "needs approval" in text
    assert denied_ids(outcome.run) == [CALL_ID]


# -- a. allow ---------------------------------------------------------------------------------


def test_pre_tool_use_allow_runs_the_command(tmp_path: pathlib.Path, hook: Hook) -> None:
    outcome = drive(tmp_path, settings_for(pre=handler(hook.command("allow", "fine by hook"))))
    assert (outcome.workdir / "out.txt").read_text() == "hi\n"
    assert outcome.only_result() == (False, "(Bash completed with no output)")
    assert denied_ids(outcome.run) == []

    [call] = hook.calls()
    stdin = call["stdin"]
    assert set(stdin) == PRE_TOOL_USE_FIELDS
    assert stdin["hook_event_name"] == "PreToolUse"
    assert stdin["tool_name"] == "Bash"
    assert stdin["tool_input"] == {"command": COMMAND, "description": "Run a scripted command"}
    assert stdin["tool_use_id"] == CALL_ID  # the model's own tool_use id
    assert stdin["cwd"] == str(outcome.workdir)
    assert stdin["permission_mode"] == "default"
    assert stdin["session_id"] == outcome.run.result["session_id"]
    assert pathlib.Path(stdin["transcript_path"]).is_relative_to(outcome.run.home)


# -- b. deny ----------------------------------------------------------------------------------


def test_pre_tool_use_deny_blocks_and_the_reason_reaches_the_model(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    reason = "broker: denied by rule no-writes"
    outcome = drive(tmp_path, settings_for(pre=handler(hook.command("deny", reason))))
    assert not outcome.ran()
    assert outcome.only_result() == (True, f"PreToolUse:Bash hook error: {reason}")
    assert denied_ids(outcome.run) == [CALL_ID]
    assert hook.events() == ["PreToolUse"]


def test_pre_tool_use_ask_in_print_mode_is_a_deny_with_the_reason(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    """``ask`` has nobody to ask in -p: refused, the reason verbatim, PermissionRequest not run."""
    reason = "broker: a human must look at this"
    settings = settings_for(
        pre=handler(hook.command("ask", reason)), perm=handler(hook.command("perm-allow"))
    )
    outcome = drive(tmp_path, settings)
    assert not outcome.ran()
    assert outcome.only_result() == (True, reason)
    assert hook.events() == ["PreToolUse"]


# -- c. exit 2 --------------------------------------------------------------------------------


def test_pre_tool_use_exit_2_blocks_and_stderr_reaches_the_model(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    reason = "broker: no answer, refused"
    command = hook.command("exit2", reason)
    outcome = drive(tmp_path, settings_for(pre=handler(command)))
    assert not outcome.ran()
    # The model sees the hook's command line too, then stderr.
    assert outcome.only_result() == (True, f"PreToolUse:Bash hook error: [{command}]: {reason}\n")
    assert denied_ids(outcome.run) == [CALL_ID]


# -- d. broken hooks: fail open unless onFailure is "block" -----------------------------------

FAILURES = ["crash", "badjson", "hang", "silent", "invalid-decision"]
# onFailure "block" covers a non-0/2 exit, a timeout and output that fails validation; stdout
# that is not JSON at all (exit 0) is plain text, not a failure, and no decision at all.
BLOCKED_BY_ON_FAILURE = {"crash", "hang", "invalid-decision"}


@pytest.mark.parametrize("on_failure", [None, "block"])
@pytest.mark.parametrize("mode", FAILURES)
def test_a_broken_hook_leaves_the_call_to_claude_codes_own_rules(
    tmp_path: pathlib.Path, hook: Hook, mode: str, on_failure: str | None
) -> None:
    """``--allowedTools Bash`` allows the call by rule; a broken hook does not stop it (fail open)
    unless the handler says ``"onFailure": "block"``."""
    extra: dict[str, Any] = {"timeout": 1}  # seconds
    if on_failure:
        extra["onFailure"] = on_failure
    pre = handler(hook.command(mode, "hook broke"), **extra)
    outcome = drive(tmp_path, settings_for(pre=pre), extra_args=("--allowedTools", "Bash"))
    assert [call["mode"] for call in hook.calls()] == [mode]
    is_error, text = outcome.only_result()
    blocked = on_failure == "block" and mode in BLOCKED_BY_ON_FAILURE
    assert outcome.ran() is not blocked, text
    assert is_error is blocked
    if blocked:
        assert text.startswith("PreToolUse:Bash hook error: ")
        assert 'blocking because onFailure is "block"' in text
        assert ("timed out" in text) is (mode == "hang")


@pytest.mark.parametrize("mode", ["crash", "badjson", "hang"])
def test_a_broken_hook_in_default_mode_falls_to_the_print_mode_refusal(
    tmp_path: pathlib.Path, hook: Hook, mode: str
) -> None:
    """Without an allow rule the fall-through is -p's own refusal (not the hook's failure)."""
    outcome = drive(tmp_path, settings_for(pre=handler(hook.command(mode, "x"), timeout=1)))
    assert not outcome.ran()
    is_error, text = outcome.only_result()
    assert is_error
    assert "needs approval" in text


def test_the_hook_timeout_is_in_seconds(tmp_path: pathlib.Path, hook: Hook) -> None:
    outcome = drive(
        tmp_path,
        settings_for(pre=handler(hook.command("hang"), timeout=2, onFailure="block")),
        extra_args=("--allowedTools", "Bash"),
    )
    assert not outcome.ran()
    assert 2.0 <= outcome.run.wall_time < 30.0, outcome.run.wall_time


# -- e. parallel tool calls -------------------------------------------------------------------


def overlaps(calls: list[dict[str, Any]]) -> bool:
    (a, b) = calls
    return bool(a["start"] < b["end"] and b["start"] < a["end"])


def test_two_writes_in_one_reply_reach_the_hook_one_after_the_other(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    first = Parallel(
        ToolUse("echo a > a.txt", id="toolu_harness_a"),
        ToolUse("echo b > b.txt", id="toolu_harness_b"),
    )
    pre = handler(hook.command("allow", sleep=1.0))
    outcome = drive(tmp_path, settings_for(pre=pre), first=first)
    calls = hook.calls()
    assert [c["stdin"]["tool_use_id"] for c in calls] == ["toolu_harness_a", "toolu_harness_b"]
    assert not overlaps(calls), calls
    # The second hook runs after the first command ran.
    assert "a.txt" not in calls[0]["files"]
    assert "a.txt" in calls[1]["files"]
    assert (outcome.workdir / "a.txt").exists()
    assert (outcome.workdir / "b.txt").exists()
    results = outcome.results()
    assert sorted(r["tool_use_id"] for r in results) == ["toolu_harness_a", "toolu_harness_b"]
    assert not any(r.get("is_error") for r in results)


def test_two_read_only_calls_in_one_reply_reach_the_hook_at_once(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    first = Parallel(
        ToolUse("echo a", id="toolu_harness_a"), ToolUse("echo b", id="toolu_harness_b")
    )
    pre = handler(hook.command("allow", sleep=1.5))
    outcome = drive(tmp_path, settings_for(pre=pre), first=first)
    calls = hook.calls()
    assert len(calls) == 2
    assert len({c["pid"] for c in calls}) == 2
    assert overlaps(calls), calls
    results = {r["tool_use_id"]: result_text(r) for r in outcome.results()}
    assert results == {"toolu_harness_a": "a", "toolu_harness_b": "b"}


# -- f. PermissionRequest ---------------------------------------------------------------------


def test_permission_request_allow_runs_the_command(tmp_path: pathlib.Path, hook: Hook) -> None:
    outcome = drive(tmp_path, settings_for(perm=handler(hook.command("perm-allow"))))
    assert (outcome.workdir / "out.txt").read_text() == "hi\n"
    assert outcome.only_result() == (False, "(Bash completed with no output)")
    [call] = hook.calls()
    stdin = call["stdin"]
    assert set(stdin) == PERMISSION_REQUEST_FIELDS
    assert stdin["hook_event_name"] == "PermissionRequest"
    assert stdin["tool_name"] == "Bash"
    assert stdin["tool_input"] == {"command": COMMAND, "description": "Run a scripted command"}
    assert stdin["permission_suggestions"] == [
        {"type": "addDirectories", "directories": [str(outcome.workdir)], "destination": "session"}
    ]


def test_permission_request_deny_blocks_with_the_message(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    message = "broker: denied at the permission prompt"
    outcome = drive(tmp_path, settings_for(perm=handler(hook.command("perm-deny", message))))
    assert not outcome.ran()
    assert outcome.only_result() == (True, message)
    assert denied_ids(outcome.run) == [CALL_ID]


def test_permission_request_exit_2_is_not_a_deny_message(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    """Exit 2 is no answer here: the call falls to -p's refusal; stderr never reaches the model."""
    outcome = drive(tmp_path, settings_for(perm=handler(hook.command("exit2", "secret words"))))
    assert not outcome.ran()
    is_error, text = outcome.only_result()
    assert is_error
    assert "needs approval" in text
    assert "secret words" not in text


def test_permission_request_runs_only_when_claude_code_would_ask(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    """Claude Code allows a read-only command itself: PreToolUse runs, PermissionRequest not."""
    settings = settings_for(
        pre=handler(hook.command("silent")), perm=handler(hook.command("perm-deny", "no"))
    )
    outcome = drive(tmp_path, settings, first=ToolUse("echo hi", id=CALL_ID))
    assert outcome.only_result() == (False, "hi")
    assert hook.events() == ["PreToolUse"]


@pytest.mark.parametrize(
    ("pre_mode", "events", "ran"),
    [
        ("allow", ["PreToolUse"], True),  # an allow skips the permission prompt altogether
        ("silent", ["PreToolUse", "PermissionRequest"], True),  # no decision: the prompt's hook
        ("crash", ["PreToolUse", "PermissionRequest"], True),  # a failed hook: the same
        ("deny", ["PreToolUse"], False),
    ],
)
def test_pre_tool_use_then_permission_request(
    tmp_path: pathlib.Path, hook: Hook, pre_mode: str, events: list[str], ran: bool
) -> None:
    settings = settings_for(
        pre=handler(hook.command(pre_mode, "pre says")),
        perm=handler(hook.command("perm-allow")),
    )
    outcome = drive(tmp_path, settings)
    assert hook.events() == events
    assert outcome.ran() is ran


# -- root -------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for root only")
def test_root_may_not_bypass_permissions_unless_is_sandbox(
    tmp_path: pathlib.Path, hook: Hook
) -> None:
    workdir = tmp_path / "refused"
    with ScriptedAnthropic([ToolUse(COMMAND, id=CALL_ID), Text("done")]) as api:
        run = run_claude(
            workdir,
            api=api,
            settings={},
            prompt="Run the command.",
            timeout=RUN_TIMEOUT,
            extra_args=["--permission-mode", "bypassPermissions"],
        )
    assert run.returncode == 1
    assert "cannot be used with root/sudo privileges" in run.stderr
    assert api.requests == []

    # IS_SANDBOX=1 lifts the refusal; the hook still decides (a deny holds in bypass mode).
    outcome = drive(
        tmp_path,
        settings_for(pre=handler(hook.command("deny", "still no"))),
        extra_args=("--permission-mode", "bypassPermissions"),
        extra_env={"IS_SANDBOX": "1"},
    )
    assert not outcome.ran()
    assert outcome.only_result() == (True, "PreToolUse:Bash hook error: still no")
    assert hook.calls()[0]["stdin"]["permission_mode"] == "bypassPermissions"
