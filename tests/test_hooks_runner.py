"""One PreToolUse command hook, run as a real subprocess: its verdict, and fail-closed failures."""

from __future__ import annotations

import pathlib
import sys
import textwrap

import pytest
import trio

from broker.hooks import (
    CommandHook,
    HookBridge,
    HookCall,
    HookMatcher,
    HookSettings,
    HookVerdict,
)
from broker.tools._gate import Allow, Ask, Deny, GateDecision

DEFAULT_DENY = "blocked by PreToolUse hook"


def _write(directory: pathlib.Path, name: str, body: str) -> str:
    """Write a hook script into *directory*; return the command that runs it from there."""
    (directory / name).write_text(textwrap.dedent(body).lstrip())
    return f"./py ./{name}" if name.endswith(".py") else f"bash ./{name}"


@pytest.fixture
def hooks_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """The hooks' cwd; ``./py`` in it is this interpreter (``sys.executable``)."""
    (tmp_path / "py").symlink_to(sys.executable)
    return tmp_path


async def _run(cwd: pathlib.Path, hook: str | CommandHook) -> tuple[GateDecision, HookVerdict]:
    if isinstance(hook, str):
        hook = CommandHook(command=hook, timeout=10.0)
    bridge = HookBridge(
        settings=HookSettings(pre_tool_use=(HookMatcher(matcher="Bash", hooks=(hook,)),))
    )
    call = HookCall(
        session_id="s-1",
        cwd=cwd,
        tool_name="Bash",
        tool_input={"command": "ls"},
        tool_use_id="toolu_1",
    )
    with trio.fail_after(15):
        decision, (verdict,) = await bridge.evaluate_verbose(call)
    assert verdict.hook == hook
    return decision, verdict


def _gone(pid: int) -> bool:
    """Whether *pid* has exited (absent, or a zombie awaiting its reaper)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def _assert_gone(*pids: int) -> None:
    for _ in range(250):
        if all(_gone(pid) for pid in pids):
            return
        await trio.sleep(0.02)
    raise AssertionError(f"still running: {[pid for pid in pids if not _gone(pid)]}")


def _json_hook(body: str) -> str:
    return f"printf '%s' '{body}'"


async def test_exit_zero_and_no_output_is_no_opinion(hooks_dir: pathlib.Path) -> None:
    decision, verdict = await _run(hooks_dir, _write(hooks_dir, "ok.sh", "cat >/dev/null\n"))
    assert decision == Allow()
    assert (verdict.decision, verdict.reason) == (None, None)


async def test_json_allow(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "allow.sh",
        """
        cat >/dev/null
        echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse",
               "permissionDecision": "allow", "permissionDecisionReason": "looks fine"}}'
        """,
    )
    decision, verdict = await _run(hooks_dir, script)
    assert decision == Allow()
    assert (verdict.decision, verdict.reason) == ("allow", "looks fine")


async def test_json_without_decision_is_no_opinion(hooks_dir: pathlib.Path) -> None:
    body = '{"suppressOutput": true, "hookSpecificOutput": {"additionalContext": "fyi"}}'
    decision, verdict = await _run(hooks_dir, _json_hook(body))
    assert decision == Allow()
    assert verdict.decision is None


async def test_json_deny_with_reason(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "deny.sh",
        """
        echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse",
               "permissionDecision": "deny", "permissionDecisionReason": "no rm here"}}'
        """,
    )
    decision, verdict = await _run(hooks_dir, script)
    assert decision == Deny(reason="no rm here")
    assert (verdict.decision, verdict.reason) == ("deny", "no rm here")


async def test_json_deny_without_reason(hooks_dir: pathlib.Path) -> None:
    decision, _ = await _run(
        hooks_dir, _json_hook('{"hookSpecificOutput": {"permissionDecision": "deny"}}')
    )
    assert decision == Deny(reason=DEFAULT_DENY)


async def test_json_ask_with_and_without_reason(hooks_dir: pathlib.Path) -> None:
    decision, _ = await _run(
        hooks_dir,
        _json_hook(
            '{"hookSpecificOutput": {"permissionDecision": "ask",'
            ' "permissionDecisionReason": "touches prod"}}'
        ),
    )
    assert decision == Ask(reason="touches prod")
    decision, _ = await _run(
        hooks_dir, _json_hook('{"hookSpecificOutput": {"permissionDecision": "ask"}}')
    )
    assert decision == Ask(reason=None)


async def test_legacy_top_level_decision(hooks_dir: pathlib.Path) -> None:
    decision, _ = await _run(hooks_dir, _json_hook('{"decision": "block", "reason": "legacy no"}'))
    assert decision == Deny(reason="legacy no")
    decision, verdict = await _run(hooks_dir, _json_hook('{"decision": "approve"}'))
    assert decision == Allow()
    assert verdict.decision == "allow"
    # hookSpecificOutput wins over the deprecated field.
    decision, _ = await _run(
        hooks_dir,
        _json_hook('{"decision": "block", "hookSpecificOutput": {"permissionDecision": "ask"}}'),
    )
    assert decision == Ask(reason=None)


async def test_continue_false_denies(hooks_dir: pathlib.Path) -> None:
    decision, _ = await _run(hooks_dir, _json_hook('{"continue": false, "stopReason": "halt"}'))
    assert decision == Deny(reason="halt")


async def test_exit_2_denies_with_stderr(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "exit2.sh",
        """
        echo 'ignored stdout'
        printf '  rm -rf is not allowed\\n  use trash instead\\n' >&2
        exit 2
        """,
    )
    decision, verdict = await _run(hooks_dir, script)
    assert decision == Deny(reason="rm -rf is not allowed\n  use trash instead")
    assert verdict.decision == "deny"
    decision, _ = await _run(hooks_dir, "exit 2")
    assert decision == Deny(reason=DEFAULT_DENY)


async def test_timeout_denies_and_kills_the_process_group(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "slow.sh",
        # Host pids, read from /proc/self by the process itself: inside the PID namespace
        # fallback (no cgroup) $$ and $! are namespace-local numbers.
        """
        read -r pid _ < /proc/self/stat; echo $pid > shell.pid
        sh -c 'read -r pid _ < /proc/self/stat; echo $pid > child.pid; exec sleep 30' &
        sleep 30
        """,
    )
    start = trio.current_time()
    decision, _ = await _run(hooks_dir, CommandHook(command=script, timeout=0.5))
    assert trio.current_time() - start < 5
    assert decision == Deny(reason='PreToolUse hook "bash ./slow.sh" timed out after 0.5s')
    await _assert_gone(
        int((hooks_dir / "shell.pid").read_text()), int((hooks_dir / "child.pid").read_text())
    )


async def test_leftover_background_processes_are_killed(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "bg.sh",
        """
        sh -c 'read -r pid _ < /proc/self/stat; echo $pid > child.pid; exec sleep 30' &
        while [ ! -s child.pid ]; do sleep 0.01; done
        exit 0
        """,
    )
    start = trio.current_time()
    decision, _ = await _run(hooks_dir, script)
    assert decision == Allow()
    assert trio.current_time() - start < 5  # not held up by the child's copy of stdout
    await _assert_gone(int((hooks_dir / "child.pid").read_text()))


async def test_other_exit_status_denies_with_first_stderr_line(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "crash.sh",
        """
        printf '\\n  jq: command not found  \\nsecond line\\n' >&2
        exit 1
        """,
    )
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(
        reason='PreToolUse hook "bash ./crash.sh" exited with status 1: jq: command not found'
    )
    decision, _ = await _run(hooks_dir, "exit 7")
    assert decision == Deny(reason='PreToolUse hook "exit 7" exited with status 7')


async def test_python_hook_that_raises_denies(hooks_dir: pathlib.Path) -> None:
    script = _write(hooks_dir, "boom.py", "raise RuntimeError('boom')\n")
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(
        reason='PreToolUse hook "./py ./boom.py" exited with status 1: '
        "Traceback (most recent call last):"
    )


async def test_python_hook_reads_stdin_and_decides(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "guard.py",
        """
        import json, sys
        event = json.load(sys.stdin)
        command = event["tool_input"]["command"]
        json.dump({"hookSpecificOutput": {"hookEventName": event["hook_event_name"],
                   "permissionDecision": "deny",
                   "permissionDecisionReason": f"{event['tool_name']} {command!r} denied"}},
                  sys.stdout)
        """,
    )
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(reason="Bash 'ls' denied")


async def test_killed_by_signal_denies(hooks_dir: pathlib.Path) -> None:
    script = _write(hooks_dir, "kill.sh", "kill -9 $$\n")
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(reason='PreToolUse hook "bash ./kill.sh" was killed by signal SIGKILL')


@pytest.mark.parametrize(
    ("stdout", "why"),
    [
        ("not json at all", "stdout is not json"),
        ("[1, 2]", "stdout is json list, not an object"),
        ('"allow"', "stdout is json str, not an object"),
        ('{"hookSpecificOutput": "deny"}', "hookSpecificOutput is not an object"),
        (
            '{"hookSpecificOutput": {"permissionDecision": "maybe"}}',
            'hookSpecificOutput.permissionDecision "maybe" is not one of "allow", "deny", "ask"',
        ),
        (
            '{"hookSpecificOutput": {"permissionDecision": true}}',
            'hookSpecificOutput.permissionDecision true is not one of "allow", "deny", "ask"',
        ),
        (
            '{"hookSpecificOutput": {"permissionDecision": "deny",'
            ' "permissionDecisionReason": 42}}',
            "hookSpecificOutput.permissionDecisionReason is not a string",
        ),
        (
            '{"hookSpecificOutput": {"hookEventName": "PostToolUse",'
            ' "permissionDecision": "allow"}}',
            'hookSpecificOutput.hookEventName is "PostToolUse"',
        ),
        ('{"decision": "allow"}', 'decision "allow" is not one of "approve", "block"'),
        ('{"decision": "block", "reason": ["x"]}', "reason is not a string"),
    ],
)
async def test_malformed_output_denies(hooks_dir: pathlib.Path, stdout: str, why: str) -> None:
    (hooks_dir / "out.txt").write_text(stdout)
    decision, verdict = await _run(hooks_dir, "cat out.txt")
    expected = f'PreToolUse hook "cat out.txt" printed malformed output: {why}'
    assert decision == Deny(reason=expected)
    assert (verdict.decision, verdict.reason) == ("deny", expected)


async def test_oversized_stdout_is_malformed(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "chatty.py",
        """
        import json, sys
        pad = "x" * (10 * 1024 * 1024)
        json.dump({"hookSpecificOutput": {"permissionDecision": "allow"}, "pad": pad}, sys.stdout)
        """,
    )
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(
        reason='PreToolUse hook "./py ./chatty.py" printed malformed output: '
        "stdout is longer than 65536 bytes"
    )


async def test_oversized_stderr_is_capped(hooks_dir: pathlib.Path) -> None:
    script = _write(
        hooks_dir,
        "loud.py",
        """
        import sys
        sys.stderr.write("y" * (10 * 1024 * 1024))
        sys.exit(2)
        """,
    )
    decision, _ = await _run(hooks_dir, script)
    assert decision == Deny(reason="y" * 65536)


async def test_long_command_is_shortened_in_the_reason(hooks_dir: pathlib.Path) -> None:
    command = "exit 5 # " + "abcdefghij" * 10
    decision, _ = await _run(hooks_dir, command)
    shown = "exit 5 # abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij…"
    assert len(shown) == 60
    assert decision == Deny(reason=f'PreToolUse hook "{shown}" exited with status 5')


async def test_hook_that_cannot_start_denies(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no-such-dir"
    decision, _ = await _run(missing, "true")
    assert decision == Deny(
        reason=f'PreToolUse hook "true" could not be started: no such file or directory: {missing}'
    )


async def test_hook_that_ignores_a_large_stdin_is_fine(hooks_dir: pathlib.Path) -> None:
    hook = CommandHook(command="exit 0")
    bridge = HookBridge(
        settings=HookSettings(pre_tool_use=(HookMatcher(matcher=None, hooks=(hook,)),))
    )
    call = HookCall(
        session_id="s",
        cwd=hooks_dir,
        tool_name="Write",
        tool_input={"content": "z" * (4 * 1024 * 1024)},
        tool_use_id="t",
    )
    with trio.fail_after(15):
        assert await bridge.evaluate(call) == Allow()
