"""``session/load`` as an editor meets it: the official ACP Python SDK driving ``broker acp``
processes on one session store, across clean restarts and kill -9.

``tests/interop/py_load_client.py`` runs each case in its own process (the SDK is asyncio-only)
and reports what the client saw; here we hold that to issue 21: a faithful replay, the
conversation restored, bad ids refused as invalid params.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from broker.scenarios import scenario_path

from .interop_support import INTEROP_DIR, python_client_command, require_sandbox

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 120

CONVERSATION = {
    "name": "two-turns",
    "steps": [
        {"text": "running it", "toolCalls": [{"name": "bash", "arguments": {"command": "true"}}]},
        {"text": "first done"},
        {
            # Fails the prompt (an error response) unless the model was given turn one.
            "expect": [
                {"role": "user", "text": "first"},
                {"role": "assistant", "text": "running it"},
                {"role": "tool", "callId": "call_1"},
                {"role": "assistant", "text": "first done"},
                {"role": "user", "text": "second"},
            ],
            "toolCalls": [{"name": "bash", "arguments": {"command": "true"}}],
        },
        {"text": "second done"},
    ],
}


@pytest.fixture(scope="module", autouse=True)
def _sandbox() -> None:
    require_sandbox()


def run_case(case: str, tmp_path: pathlib.Path, scenario: pathlib.Path | None = None) -> Any:
    python_client_command()  # fails the test with an install hint when the SDK is missing
    ws = tmp_path / "ws"
    ws.mkdir()
    store = tmp_path / "log.sqlite"
    agent = [sys.executable, "-m", "broker.cli", "acp", "--store", str(store)]
    agent += ["--log-file", str(tmp_path / "agent.log")]
    if scenario is not None:
        agent += ["--scenario", str(scenario)]
    argv = [sys.executable, str(INTEROP_DIR / "py_load_client.py"), case, "--cwd", str(ws)]
    done = subprocess.run(
        [*argv, "--", *agent], capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if case != "bad-ids":
        verified = subprocess.run(
            [sys.executable, "-m", "broker.cli", "log", "verify", str(store)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
    return report


def final_statuses(updates: list[dict[str, Any]]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for entry in updates:
        update = entry["update"]
        if update["sessionUpdate"] in ("tool_call", "tool_call_update") and "status" in update:
            shown[update["toolCallId"]] = update["status"]
    return shown


def test_a_failed_call_replays_failed_and_two_loads_are_identical(tmp_path: pathlib.Path) -> None:
    report = run_case("failed", tmp_path, scenario_path("escalation"))
    assert report["firstStop"] == "end_turn"
    # The sandbox refused the first write: failed live, failed on replay.
    expected = {"call_write": "failed", "call_escalate": "completed"}
    assert final_statuses(report["live"]) == expected
    first, second = report["loads"]
    assert final_statuses(first["replayed"]) == expected
    assert json.dumps(first["replayed"]) == json.dumps(second["replayed"])
    # The permission question shows on its call.
    texts = [
        block["content"]["text"]
        for entry in first["replayed"]
        for block in entry["update"].get("content", [])
        if entry["update"]["sessionUpdate"] == "tool_call_update"
    ]
    assert any(t.startswith("Permission asked: escalate sandbox to workspace-write") for t in texts)


def test_kill_9_during_a_pending_question_replays_every_call_terminal(
    tmp_path: pathlib.Path,
) -> None:
    report = run_case("killed", tmp_path, scenario_path("escalation"))
    assert report["permissionRequests"] == 1
    load = report["loads"][0]
    statuses = final_statuses(load["replayed"])
    assert statuses == {"call_write": "failed", "call_escalate": "failed"}
    last = load["replayed"][-1]["update"]
    assert last["toolCallId"] == "call_escalate"
    assert last["content"][0]["content"]["text"].startswith("interrupted: the broker stopped")
    # The loaded session runs a second turn.
    assert load["stopReason"] == "end_turn"


def test_the_second_turn_model_receives_the_first_turn(tmp_path: pathlib.Path) -> None:
    scenario = tmp_path / "two-turns.json"
    scenario.write_text(json.dumps(CONVERSATION))
    report = run_case("conversation", tmp_path, scenario)
    assert report["firstStop"] == "end_turn"
    load = report["loads"][0]
    assert load["stopReason"] == "end_turn"
    calls = [
        e["update"]["toolCallId"]
        for e in load["after"]
        if e["update"]["sessionUpdate"] == "tool_call"
    ]
    assert calls == ["call_2"]  # never call_1 again in this session


def test_malformed_ids_are_invalid_params(tmp_path: pathlib.Path) -> None:
    errors = run_case("bad-ids", tmp_path)["errors"]
    assert [e["code"] for e in errors] == [-32602] * 5
    for error in errors:
        assert len(error["message"]) < 300
        assert "sessionId" in error["message"]
