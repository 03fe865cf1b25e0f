"""Shared machinery of the ACP interop tests (``test_acp_interop_ts.py``, ``..._py.py``).

Each test runs one client program (``tests/interop/ts/client.mjs`` on the official TypeScript
SDK, ``tests/interop/py_client.py`` on the official Python SDK) as a subprocess; the client
spawns ``broker acp`` itself, runs a case and prints a JSON report of what it observed. Here we
run it, load the agent's ``--trace-frames`` file and its SQLite session log, schema-check every
frame the agent sent, and hold the run to the case's expected outcome (spec 8.4).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from broker.store import open_sqlite_reader
from broker.store._logtools import verify_store
from broker.tools import BubblewrapExecutor, SandboxUnavailableError

from .acp_schema import validate_agent_traffic

INTEROP_DIR = pathlib.Path(__file__).parent / "interop"

CASES = (
    "allow",
    "reject",
    "cancelled",
    "unknown-option",
    "error",
    "session-cancel",
    "two-sessions",
    "never-answers",
)
#: ``--permission-deadline`` of the never-answers case (seconds); the other cases keep 300.
DEADLINE_CASE_SECONDS = 1
#: Bound of one client run (the slowest case takes ~3 s).
RUN_TIMEOUT = 60

PERMISSION_OPTIONS = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]
ESCALATE_COMMAND = "echo escalated > escalated.txt && cat escalated.txt"
ESCALATE_JUSTIFICATION = "the user asked to write escalated.txt in the workspace"
#: The permission request's toolCall as the SDK hands it to the editor: what is asked and why.
ESCALATE_TOOL_CALL = {
    "toolCallId": "call_escalate",
    "kind": "execute",
    "title": ESCALATE_COMMAND,
    "content": [
        {
            "type": "content",
            "content": {
                "type": "text",
                "text": f"run `{ESCALATE_COMMAND}` with workspace-write access: "
                f"{ESCALATE_JUSTIFICATION}",
            },
        }
    ],
    "rawInput": {
        "command": ESCALATE_COMMAND,
        "sandbox_permissions": "workspace-write",
        "justification": ESCALATE_JUSTIFICATION,
    },
}
REJECTED = 'Error: the user rejected escalating this command to "workspace-write"'
CANCELLED = 'Error: approval for escalating to "workspace-write" was cancelled'
UNAVAILABLE = (
    'Error: sandbox escalation to "workspace-write" requires approval, but no approval channel '
    "is available"
)


def require_sandbox() -> None:
    """Skip where bubblewrap cannot run (as ``test_acp_agent.py`` does); ``-ra`` prints why."""
    try:
        trio.run(BubblewrapExecutor.probe)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")


@attrs.frozen(kw_only=True)
class InteropRun:
    """One client run: its report, the agent's frames and session log, and the workspaces."""

    case: str
    report: dict[str, Any]
    sent: list[dict[str, Any]]
    received: list[dict[str, Any]]
    workspaces: list[pathlib.Path]
    store: pathlib.Path
    stderr: str
    agent_log: str

    def diagnostics(self) -> str:
        """What to print when an assertion fails."""
        return (
            f"--- case {self.case}: client report ---\n{json.dumps(self.report, indent=1)}\n"
            f"--- client stderr ---\n{self.stderr}\n--- agent log ---\n{self.agent_log}"
        )

    @property
    def session_ids(self) -> list[str]:
        return [s["sessionId"] for s in self.report["sessions"]]

    def stop_reasons(self) -> list[str | None]:
        return [s.get("stopReason") for s in self.report["sessions"]]

    def events(self, session_id: str) -> list[dict[str, Any]]:
        """The session's log, each event as its stored JSON object."""
        with open_sqlite_reader(self.store) as reader:
            return [json.loads(row.line) for row in reader.rows(session_id)]

    def decided(self, session_id: str) -> list[str]:
        """The outcomes of the session's ``approval/decided`` events."""
        return [
            e["data"]["outcome"] for e in self.events(session_id) if e["type"] == "approval/decided"
        ]

    def tool_results(self, session_id: str) -> list[str]:
        """The texts of the ``tool_call_update`` notifications the client got for the session."""
        return [
            block["content"]["text"]
            for u in self.report["updates"]
            if u["sessionId"] == session_id and u["update"]["sessionUpdate"] == "tool_call_update"
            for block in u["update"].get("content", [])
        ]

    def sent_with(self, method: str) -> list[dict[str, Any]]:
        """Frames the agent sent with *method* (requests and notifications)."""
        return [f for f in self.sent if f.get("method") == method]

    def permission_ids(self, session_id: str | None = None) -> list[Any]:
        """Ids of the agent's ``session/request_permission`` requests (of one session)."""
        return [
            f["id"]
            for f in self.sent_with("session/request_permission")
            if session_id is None or f["params"]["sessionId"] == session_id
        ]

    def answers_received(self, request_id: Any) -> list[dict[str, Any]]:
        """Responses the agent received for its request *request_id*."""
        return [f for f in self.received if "method" not in f and f.get("id") == request_id]


def node_client_command() -> list[str]:
    """``node client.mjs``, or a test failure that says how to install the TS SDK."""
    ts = INTEROP_DIR / "ts"
    node = shutil.which("node")
    if node is None:
        pytest.fail("the TypeScript interop tests need Node.js >= 20 (`node` on PATH)")
    sdk = ts / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    if not sdk.is_file():
        pytest.fail(
            f"the ACP TypeScript SDK is not installed in {ts}/node_modules: run "
            f"`npm ci --prefix {ts}` (Node.js >= 20; CI does this before the tests)",
            pytrace=False,
        )
    return [node, str(ts / "client.mjs")]


def python_client_command() -> list[str]:
    """``python py_client.py``, or a test failure that says how to install the Python SDK."""
    try:
        import acp  # noqa: F401
    except ImportError:
        pytest.fail(
            "the ACP Python SDK is not installed: pip install -e '.[test]' (it is the test "
            "dependency agent-client-protocol)",
            pytrace=False,
        )
    return [sys.executable, str(INTEROP_DIR / "py_client.py")]


def run_case(client: Sequence[str], case: str, tmp_path: pathlib.Path) -> InteropRun:
    """Run *client* (its command line) on *case* against a fresh ``broker acp``.

    Fails the test when the client cannot run, the report is not JSON, a frame the agent sent
    does not match the ACP schema, or the session log does not verify.
    """
    workspaces = [tmp_path / f"ws{i}" for i in range(2 if case == "two-sessions" else 1)]
    for ws in workspaces:
        ws.mkdir()
    store, trace, log = tmp_path / "log.sqlite", tmp_path / "trace.jsonl", tmp_path / "agent.log"
    agent = [sys.executable, "-m", "broker.cli", "acp", "--store", str(store)]
    agent += ["--trace-frames", str(trace), "--log-file", str(log), "--log-level", "INFO"]
    if case == "never-answers":
        agent += ["--permission-deadline", str(DEADLINE_CASE_SECONDS)]
    argv = [*client, case]
    for ws in workspaces:
        argv += ["--cwd", str(ws)]
    argv += ["--", *agent]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{argv[:2]} {case} did not finish within {RUN_TIMEOUT}s: {exc.stderr!r}")
    agent_log = log.read_text(encoding="utf-8") if log.exists() else ""
    if done.returncode != 0:
        pytest.fail(
            f"the client exited {done.returncode}\n--- stderr ---\n{done.stderr}\n"
            f"--- agent log ---\n{agent_log}"
        )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    frames = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    run = InteropRun(
        case=case,
        report=report,
        sent=[f["frame"] for f in frames if f["dir"] == "sent"],
        received=[f["frame"] for f in frames if f["dir"] == "received"],
        workspaces=workspaces,
        store=store,
        stderr=done.stderr,
        agent_log=agent_log,
    )
    assert validate_agent_traffic(run.sent, run.received) > 0, run.diagnostics()
    verify_store(store)
    return run


def check(condition: bool, run: InteropRun, what: str) -> None:
    """Assert with the run's diagnostics (this module is not assert-rewritten by pytest)."""
    if not condition:
        raise AssertionError(f"{what}\n{run.diagnostics()}")


def check_equal(actual: object, expected: object, run: InteropRun, what: str) -> None:
    check(actual == expected, run, f"{what}: got {actual!r}, expected {expected!r}")


def check_common(run: InteropRun) -> None:
    """What every run must show, whatever the case."""
    report = run.report
    check_equal(report["errors"], [], run, "client-side errors")
    check_equal(report["agentExit"]["code"], 0, run, "agent exit status after stdin EOF")
    # Real-client habit: request ids are integers counting from 0.
    ids = [f["id"] for f in run.received if "method" in f and "id" in f]
    check_equal(ids, list(range(len(ids))), run, "the client's request ids")
    init = report["initialize"]
    check(init is not None and init["protocolVersion"] == 1, run, "initialize result")
    # The agent answered every request with a result, never an error.
    errors = [f for f in run.sent if "error" in f]
    check_equal(errors, [], run, "error responses the agent sent")
    # The SDK parsed every session/update we sent (a failed parse is only logged by both SDKs).
    check_equal(
        len(report["updates"]),
        len(run.sent_with("session/update")),
        run,
        "session/update notifications the SDK delivered vs the agent sent",
    )
    # The permission request, as spec 8.4 words it plus what is asked, once per session.
    for session_id in run.session_ids:
        asked = [
            p["params"]
            for p in report["permissionRequests"]
            if p["params"]["sessionId"] == session_id
        ]
        check_equal(
            asked,
            [
                {
                    "sessionId": session_id,
                    "toolCall": ESCALATE_TOOL_CALL,
                    "options": PERMISSION_OPTIONS,
                }
            ],
            run,
            "permission requests the client got",
        )
        events = run.events(session_id)
        check_equal(events[-1]["type"], "turn/end", run, "the session log's last event")
        asks = [e for e in events if e["type"] == "approval/asked"]
        check_equal(len(asks), 1, run, "approval/asked events")
    # A permission request names a tool call the client already knows (a `tool_call` update
    # for the same id went out before it), so an editor can attach its prompt to that call.
    for index, frame in enumerate(run.sent):
        if frame.get("method") != "session/request_permission":
            continue
        tool_call_id = frame["params"]["toolCall"]["toolCallId"]
        announced = [
            f
            for f in run.sent[:index]
            if f.get("method") == "session/update"
            and f["params"]["sessionId"] == frame["params"]["sessionId"]
            and f["params"]["update"]["sessionUpdate"] == "tool_call"
            and f["params"]["update"]["toolCallId"] == tool_call_id
        ]
        check_equal(len(announced), 1, run, f"tool_call updates for {tool_call_id} before asking")
    seen_ids = [p["requestId"] for p in report["permissionRequests"]]
    check_equal(seen_ids, run.permission_ids(), run, "permission request ids the SDK saw")


def _check_one_session(
    run: InteropRun, stop: str, outcome: str, result_text: str, *, file: bool
) -> None:
    (session_id,) = run.session_ids
    (ws,) = run.workspaces
    check_equal(run.stop_reasons(), [stop], run, "stopReason")
    check_equal(run.decided(session_id), [outcome], run, "decided outcomes in the session log")
    if file:
        check_equal(
            (ws / "escalated.txt").read_text(encoding="utf-8"), "escalated\n", run, "the file"
        )
    else:
        check_equal(sorted(p.name for p in ws.iterdir()), [], run, "workspace contents")
    if result_text:
        results = run.tool_results(session_id)
        check(
            any(result_text in text for text in results),
            run,
            f"no tool_call_update carries {result_text!r}: {results!r}",
        )


def check_case(run: InteropRun) -> None:
    """The case's expected outcome (the same for every SDK)."""
    check_common(run)
    case = run.case
    if case == "allow":
        _check_one_session(run, "end_turn", "allowed-once", "escalated", file=True)
        check_equal(run.tool_results(run.session_ids[0])[-1], "escalated", run, "last result")
    elif case in ("reject", "unknown-option"):
        _check_one_session(run, "end_turn", "rejected", REJECTED, file=False)
    elif case == "cancelled":
        _check_one_session(run, "end_turn", "cancelled", CANCELLED, file=False)
    elif case == "error":
        _check_one_session(run, "end_turn", "unavailable", UNAVAILABLE, file=False)
    elif case == "session-cancel":
        _check_one_session(run, "cancelled", "cancelled", "", file=False)
        (request_id,) = run.permission_ids()
        cancels = run.sent_with("$/cancel_request")
        check_equal(cancels, [_cancel_request(request_id)], run, "$/cancel_request frames sent")
        check_equal(run.report["cancelRequestsSeen"], [request_id], run, "cancels the SDK saw")
        # The client's late `cancelled` answer reached the agent, which dropped it quietly.
        late = run.answers_received(request_id)
        check_equal(
            late,
            [{"jsonrpc": "2.0", "id": request_id, "result": {"outcome": {"outcome": "cancelled"}}}],
            run,
            "the late answer",
        )
        check(
            "response to unknown request id" not in run.agent_log,
            run,
            "the agent did not recognise the late answer as one to a withdrawn request",
        )
    elif case == "two-sessions":
        allowed_id, rejected_id = run.session_ids
        allowed_ws, rejected_ws = run.workspaces
        check_equal(run.stop_reasons(), ["end_turn", "end_turn"], run, "stopReasons")
        check_equal(run.decided(allowed_id), ["allowed-once"], run, "first session's outcome")
        check_equal(run.decided(rejected_id), ["rejected"], run, "second session's outcome")
        check_equal(
            (allowed_ws / "escalated.txt").read_text(encoding="utf-8"),
            "escalated\n",
            run,
            "the allowed session's file",
        )
        check_equal(list(rejected_ws.iterdir()), [], run, "the rejected session's workspace")
        check(
            any(REJECTED in text for text in run.tool_results(rejected_id)),
            run,
            "the rejected session's tool result",
        )
        check(
            not any(REJECTED in text for text in run.tool_results(allowed_id)),
            run,
            "the allowed session got the other session's rejection",
        )
    elif case == "never-answers":
        _check_one_session(run, "end_turn", "unavailable", UNAVAILABLE, file=False)
        (request_id,) = run.permission_ids()
        check_equal(
            run.sent_with("$/cancel_request"),
            [_cancel_request(request_id)],
            run,
            "$/cancel_request frames sent after the deadline",
        )
        check_equal(run.report["cancelRequestsSeen"], [request_id], run, "cancels the SDK saw")
        check_equal(run.answers_received(request_id), [], run, "answers to the permission request")
    else:
        raise AssertionError(f"no expectations for case {case!r}")


def _cancel_request(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}
