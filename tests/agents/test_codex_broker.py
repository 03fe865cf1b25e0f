"""The real Codex CLI asks ``broker serve`` through ``broker hook codex`` (issue 34): offline,
against the scripted Responses API. Codex's ``PreToolUse`` can only refuse, so an allowed call
gets no objection and Codex runs it; a refusal reaches the model as the call's output; every
question is one audit pair in one log session per Codex thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from broker.serve import session_id_for
from tests.agents.codex import CompletedRun, hook_command, run_codex
from tests.agents.model_api_openai import (
    Parallel,
    ScriptedResponses,
    ShellCall,
    Text,
    Turn,
    function_call_outputs,
)
from tests.serve_support import BROKER, broker, log_events, service, wait_pending

pytestmark = pytest.mark.slow

COMMAND = "echo hi > out.txt"
ALLOW = f"""\
[[rules]]
decision = "allow"
tool = "Bash"
[rules.args]
command = "{COMMAND}"

[[rules]]
decision = "allow"
tool = "Bash"
[rules.args]
command = "echo there > two.txt"
"""


def hooks(sock: Path) -> dict[str, Any]:
    """The README's ``hooks.json``: every shell call asks the broker first."""
    command = hook_command(BROKER, "hook", "codex", "--socket", sock)
    hook = {"type": "command", "command": command, "timeout": 60}
    return {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}


def run(work: Path, api: ScriptedResponses, sock: Path) -> CompletedRun:
    work.mkdir(exist_ok=True)
    completed = run_codex(work, api=api, hooks=hooks(sock))
    context = f"stderr:\n{completed.stderr[-3000:]}\nstdout:\n{completed.stdout[-3000:]}"
    assert completed.returncode == 0, context
    assert completed.final_message == "done", context
    return completed


def told(api: ScriptedResponses, call_id: str = "call_t0_0") -> str:
    """What the model read about *call_id* (in its next request)."""
    return function_call_outputs(api.request_for_turn(1))[call_id]


def decided(store: Path, completed: CompletedRun) -> list[dict[str, Any]]:
    assert completed.thread_id is not None
    sid = session_id_for("codex", completed.thread_id)
    return [e["data"] for e in log_events(store, sid) if e["type"] == "approval/decided"]


def test_a_rule_allows_the_call_and_the_log_names_the_rule(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(ALLOW)
    work = tmp_path / "work"
    with service(tmp_path, "--rules", str(rules)) as running:
        with ScriptedResponses([ShellCall(COMMAND), Text("done")]) as api:
            completed = run(work, api, running.socket)
    assert (work / "out.txt").read_text() == "hi\n"
    [pair] = decided(running.store, completed)
    assert (pair["outcome"], pair["source"], pair["ruleIndex"]) == ("allowed-once", "rule", 1)
    assert broker("log", "verify", str(running.store)).returncode == 0


def test_a_reject_from_another_process_stops_the_call_and_the_model_reads_it(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    with service(tmp_path) as running:
        with ScriptedResponses([ShellCall(COMMAND), Text("done")]) as api:
            runs: list[CompletedRun] = []
            agent = threading.Thread(target=lambda: runs.append(run(work, api, running.socket)))
            agent.start()
            try:
                (row,) = wait_pending(running.store)
                assert row["displayReason"].startswith("Codex (session ")
                answered = broker("answer", str(running.store), row["id"], "reject", "--by", "al")
                assert answered.returncode == 0, answered.stderr
            finally:
                agent.join(90)
            [completed] = runs
            assert not (work / "out.txt").exists()
            assert told(api).startswith(
                "Command blocked by PreToolUse hook: broker: rejected by al"
            )
    [pair] = decided(running.store, completed)
    assert (pair["outcome"], pair["answeredBy"]) == ("rejected", "al")


def test_with_no_service_the_call_does_not_run_and_the_model_reads_why(tmp_path: Path) -> None:
    work = tmp_path / "work"
    missing = tmp_path / "no-service" / "serve.sock"
    with ScriptedResponses([ShellCall(COMMAND), Text("done")]) as api:
        run(work, api, missing)
        assert not (work / "out.txt").exists()
        assert f"broker: no approval service at {missing}" in told(api)


def test_two_calls_in_one_reply_are_two_questions_in_one_log_session(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(ALLOW)
    work = tmp_path / "work"
    turns: list[Turn] = [
        Parallel(ShellCall(COMMAND), ShellCall("echo there > two.txt")),
        Text("done"),
    ]
    with service(tmp_path, "--rules", str(rules)) as running:
        with ScriptedResponses(turns) as api:
            completed = run(work, api, running.socket)
    assert (work / "out.txt").exists()
    assert (work / "two.txt").exists()
    pairs = decided(running.store, completed)
    assert sorted(p["ruleIndex"] for p in pairs) == [1, 2]
    assert {p["outcome"] for p in pairs} == {"allowed-once"}
    listed = broker("log", "show", str(running.store)).stdout.splitlines()
    assert len(listed) == 2  # the header and the one Codex session
