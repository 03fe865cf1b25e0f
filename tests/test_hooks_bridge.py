"""Several PreToolUse hooks: matching, the stdin they get, concurrency, merging, cancellation."""

from __future__ import annotations

import json
import pathlib
import sys
import textwrap

import pytest
import trio

from broker.hooks import HookBridge, HookCall, HookSettings
from broker.tools._gate import Allow, Ask, Deny


def _bridge(*groups: dict[str, object]) -> HookBridge:
    return HookBridge(
        settings=HookSettings.from_json({"hooks": {"PreToolUse": list(groups)}}, source="test")
    )


def _cmd(command: str, **extra: object) -> dict[str, object]:
    return {"type": "command", "command": command, **extra}


def _call(cwd: pathlib.Path, tool_name: str = "Bash", **extra: str) -> HookCall:
    return HookCall(
        session_id="sess-9",
        cwd=cwd,
        tool_name=tool_name,
        tool_input={"command": "rm -rf build", "timeout": 5, "nested": {"a": [1, None]}},
        tool_use_id="toolu_42",
        **extra,
    )


def _decide(decision: str, reason: str | None = None, *, delay: float = 0) -> str:
    """A bash command that sleeps *delay* seconds and prints a permissionDecision."""
    out: dict[str, object] = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason is not None:
        out["permissionDecisionReason"] = reason
    return f"sleep {delay}; printf '%s' '{json.dumps({'hookSpecificOutput': out})}'"


def _gone(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_stdin_is_the_public_pre_tool_use_json(tmp_path: pathlib.Path) -> None:
    bridge = _bridge({"matcher": "Bash", "hooks": [_cmd("cat > stdin.json; pwd > cwd.txt")]})
    with trio.fail_after(15):
        assert await bridge.evaluate(_call(tmp_path)) == Allow()
    received = json.loads((tmp_path / "stdin.json").read_text())
    assert list(received) == [
        "session_id",
        "cwd",
        "hook_event_name",
        "tool_name",
        "tool_input",
        "tool_use_id",
    ]
    assert received == {
        "session_id": "sess-9",
        "cwd": str(tmp_path),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf build", "timeout": 5, "nested": {"a": [1, None]}},
        "tool_use_id": "toolu_42",
    }
    assert (tmp_path / "cwd.txt").read_text().strip() == str(tmp_path)


async def test_stdin_includes_transcript_path_when_known(tmp_path: pathlib.Path) -> None:
    bridge = _bridge({"hooks": [_cmd('cat > stdin.json; echo "$CLAUDE_PROJECT_DIR" > env.txt')]})
    with trio.fail_after(15):
        await bridge.evaluate(_call(tmp_path, transcript_path="/t/sess-9.jsonl"))
    received = json.loads((tmp_path / "stdin.json").read_text())
    assert list(received)[:2] == ["session_id", "transcript_path"]
    assert received["transcript_path"] == "/t/sess-9.jsonl"
    assert (tmp_path / "env.txt").read_text().strip() == str(tmp_path)


@pytest.mark.parametrize(
    ("group", "tool", "runs"),
    [
        ({"matcher": "*"}, "mcp__github__search", True),
        ({"matcher": ""}, "Read", True),
        ({}, "Read", True),
        ({"matcher": "Edit|Write"}, "Write", True),
        ({"matcher": "Edit|Write"}, "Edit", True),
        ({"matcher": "Edit|Write"}, "MultiEdit", False),
        ({"matcher": "mcp__.*"}, "mcp__fs__read", True),
        ({"matcher": "Bash"}, "Read", False),
    ],
)
async def test_matcher_selects_hooks(
    tmp_path: pathlib.Path, group: dict[str, object], tool: str, runs: bool
) -> None:
    bridge = _bridge({**group, "hooks": [_cmd("touch ran; exit 2")]})
    with trio.fail_after(15):
        decision = await bridge.evaluate(_call(tmp_path, tool))
    assert decision == (Deny(reason="blocked by PreToolUse hook") if runs else Allow())
    assert (tmp_path / "ran").exists() is runs


async def test_no_hooks_at_all_allows(tmp_path: pathlib.Path) -> None:
    bridge = HookBridge(settings=HookSettings.from_json({}, source="test"))
    with trio.fail_after(15):
        assert await bridge.evaluate_verbose(_call(tmp_path)) == (Allow(), ())


async def test_deny_beats_ask_beats_allow(tmp_path: pathlib.Path) -> None:
    allow, ask, deny = _decide("allow", "fine"), _decide("ask", "sure?"), _decide("deny", "no")
    with trio.fail_after(15):
        assert await _bridge({"hooks": [_cmd(allow), _cmd(ask), _cmd(deny)]}).evaluate(
            _call(tmp_path)
        ) == Deny(reason="no")
        assert await _bridge({"hooks": [_cmd(allow), _cmd(ask)]}).evaluate(_call(tmp_path)) == Ask(
            reason="sure?"
        )
        assert (
            await _bridge({"hooks": [_cmd(allow), _cmd("true")]}).evaluate(_call(tmp_path))
            == Allow()
        )


async def test_a_failing_hook_outweighs_an_allow(tmp_path: pathlib.Path) -> None:
    bridge = _bridge({"hooks": [_cmd(_decide("allow")), _cmd("echo garbage")]})
    with trio.fail_after(15):
        assert await bridge.evaluate(_call(tmp_path)) == Deny(
            reason='PreToolUse hook "echo garbage" printed malformed output: stdout is not json'
        )


async def test_reasons_join_in_config_order_not_completion_order(tmp_path: pathlib.Path) -> None:
    bridge = _bridge(
        {
            "matcher": "Bash",
            "hooks": [
                _cmd(_decide("deny", "first (slow)", delay=0.6)),
                _cmd(_decide("ask", "not shown")),
            ],
        },
        {"hooks": [_cmd(_decide("deny")), _cmd("echo 'second (fast)' >&2; exit 2")]},
    )
    with trio.fail_after(15):
        decision, verdicts = await bridge.evaluate_verbose(_call(tmp_path))
    assert decision == Deny(reason="first (slow)\n\nsecond (fast)")
    assert [(v.decision, v.reason) for v in verdicts] == [
        ("deny", "first (slow)"),
        ("ask", "not shown"),
        ("deny", None),
        ("deny", "second (fast)"),
    ]


async def test_ask_reasons_join_in_config_order(tmp_path: pathlib.Path) -> None:
    bridge = _bridge(
        {
            "hooks": [
                _cmd(_decide("ask", "slow", delay=0.6)),
                _cmd(_decide("ask")),
                _cmd(_decide("ask", "fast")),
                _cmd(_decide("allow", "ignored")),
            ]
        }
    )
    with trio.fail_after(15):
        assert await bridge.evaluate(_call(tmp_path)) == Ask(reason="slow\n\nfast")


async def test_hooks_run_concurrently(tmp_path: pathlib.Path) -> None:
    bridge = _bridge({"hooks": [_cmd("sleep 1"), _cmd("sleep 1; true")]})
    with trio.fail_after(15):
        start = trio.current_time()
        assert await bridge.evaluate(_call(tmp_path)) == Allow()
        elapsed = trio.current_time() - start
    assert 1 <= elapsed < 1.8


async def test_cancellation_kills_and_reaps_every_hook(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "hang.sh"
    # Host pids read from /proc/self ($$ and $! are namespace-local in the PID-namespace
    # fallback used where no cgroup can be made).
    script.write_text(
        'read -r p _ < /proc/self/stat; echo $p > "$1.pid"\n'
        'sh -c \'read -r p _ < /proc/self/stat; echo $p > "$0.child"; exec sleep 30\' "$1" &\n'
        "wait\n"
    )
    bridge = _bridge({"hooks": [_cmd("bash ./hang.sh a"), _cmd("bash ./hang.sh b")]})
    with trio.fail_after(15):
        start = trio.current_time()
        with trio.move_on_after(0.7) as scope:
            await bridge.evaluate(_call(tmp_path))
        assert scope.cancelled_caught
        assert trio.current_time() - start < 3
        pids = [int((tmp_path / f"{n}.{k}").read_text()) for n in "ab" for k in ("pid", "child")]
        for _ in range(250):
            if all(_gone(pid) for pid in pids):
                break
            await trio.sleep(0.02)
        assert all(_gone(pid) for pid in pids)


async def test_python_hook_script(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "guard.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            event = json.load(sys.stdin)
            if "rm " in event["tool_input"].get("command", ""):
                print("destructive command", file=sys.stderr)
                sys.exit(2)
            """
        )
    )
    bridge = _bridge({"matcher": "Bash", "hooks": [_cmd(f"'{sys.executable}' '{script}'")]})
    with trio.fail_after(15):
        assert await bridge.evaluate(_call(tmp_path)) == Deny(reason="destructive command")
