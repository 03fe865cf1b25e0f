"""The real Claude Code CLI asks ``broker serve`` through ``broker hook claude-code`` (issue 34):
offline, against the scripted model API. The model runs ``echo hi > out.txt``; what the broker
decides is what happens, the model reads why, and every question is one audit pair in one log
session per Claude Code session."""

from __future__ import annotations

import pathlib
import shlex
import threading
from typing import Any

import pytest

from broker.serve import session_id_for
from tests.agents.claude_code import CompletedRun, run_claude
from tests.agents.model_api import (
    Parallel,
    ScriptedAnthropic,
    Text,
    ToolUse,
    Turn,
    result_text,
    tool_results,
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


def settings(sock: pathlib.Path) -> dict[str, Any]:
    """The README's settings file: every tool call asks the broker, and a hook that fails
    blocks (``onFailure``) — though ``broker hook`` never fails without answering."""
    command = f"{shlex.quote(BROKER)} hook claude-code --socket {shlex.quote(str(sock))}"
    hook = {"type": "command", "command": command, "timeout": 60, "onFailure": "block"}
    return {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}


def run(work: pathlib.Path, api: ScriptedAnthropic, sock: pathlib.Path) -> CompletedRun:
    completed = run_claude(work, api=api, settings=settings(sock), prompt="write the file")
    assert completed.returncode == 0, completed.describe()
    return completed


def first_result(api: ScriptedAnthropic) -> str:
    """What the model read as the first tool call's result (in its next request)."""
    results = tool_results(api.request_for_turn(1))
    return result_text(results[0])


def decided(store: pathlib.Path, completed: CompletedRun) -> list[dict[str, Any]]:
    sid = session_id_for("claude-code", completed.result["session_id"])
    return [e["data"] for e in log_events(store, sid) if e["type"] == "approval/decided"]


def test_a_rule_allows_the_call_and_the_log_names_the_rule(tmp_path: pathlib.Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(ALLOW)
    work = tmp_path / "work"
    with service(tmp_path, "--rules", str(rules)) as running:
        with ScriptedAnthropic([ToolUse(COMMAND), Text("done")]) as api:
            completed = run(work, api, running.socket)
    assert (work / "out.txt").read_text() == "hi\n"
    [pair] = decided(running.store, completed)
    assert (pair["outcome"], pair["source"], pair["ruleIndex"]) == ("allowed-once", "rule", 1)
    assert broker("log", "verify", str(running.store)).returncode == 0


def test_a_reject_from_another_process_stops_the_call_and_the_model_reads_it(
    tmp_path: pathlib.Path,
) -> None:
    work = tmp_path / "work"
    with service(tmp_path) as running:
        with ScriptedAnthropic([ToolUse(COMMAND), Text("done")]) as api:
            runs: list[CompletedRun] = []
            agent = threading.Thread(target=lambda: runs.append(run(work, api, running.socket)))
            agent.start()
            try:
                (row,) = wait_pending(running.store)
                assert row["displayReason"].startswith("Claude Code (session ")
                assert row["displayReason"].endswith(f"asks to run Bash: {COMMAND}")
                answered = broker(
                    "answer", str(running.store), row["id"], "reject", "--by", "al",
                    "--message", "write it under notes/",
                )  # fmt: skip
                assert answered.returncode == 0, answered.stderr
            finally:
                agent.join(90)
            [completed] = runs
            assert not (work / "out.txt").exists()
            told = first_result(api)
            assert "broker: rejected by al" in told
            assert told.endswith("they said: write it under notes/")
    [pair] = decided(running.store, completed)
    assert (pair["outcome"], pair["answeredBy"]) == ("rejected", "al")


def test_with_no_service_the_call_does_not_run_and_the_model_reads_why(
    tmp_path: pathlib.Path,
) -> None:
    work = tmp_path / "work"
    missing = tmp_path / "no-service" / "serve.sock"
    with ScriptedAnthropic([ToolUse(COMMAND), Text("done")]) as api:
        run(work, api, missing)
        assert not (work / "out.txt").exists()
        told = first_result(api)
    assert f"broker: no approval service at {missing}" in told
    assert "start it with 'broker serve'" in told


def test_two_calls_in_one_reply_are_two_questions_in_one_log_session(
    tmp_path: pathlib.Path,
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(ALLOW)
    work = tmp_path / "work"
    turns: list[Turn] = [Parallel(ToolUse(COMMAND), ToolUse("echo there > two.txt")), Text("done")]
    with service(tmp_path, "--rules", str(rules)) as running:
        with ScriptedAnthropic(turns) as api:
            completed = run(work, api, running.socket)
    assert (work / "out.txt").exists()
    assert (work / "two.txt").exists()
    pairs = decided(running.store, completed)
    assert [
        (p["outcome"], p["ruleIndex"]) for p in sorted(pairs, key=lambda p: p["ruleIndex"])
    ] == [
        ("allowed-once", 1),
        ("allowed-once", 2),
    ]
    listed = broker("log", "show", str(running.store)).stdout.splitlines()
    assert len(listed) == 2  # the header and the one Claude Code session
    sid = session_id_for("claude-code", completed.result["session_id"])
    shown = broker("log", "show", str(running.store), sid)
    assert shown.returncode == 0
    assert shown.stdout.count("allowed-once") == 2
