"""Recorded ACP scenarios (spec 9) as snapshot tests, through the real wire.

Each wire scenario spawns ``broker acp`` as a child process (real bubblewrap, a SQLite store in
tmp) and drives it with :class:`ScriptedClient`, a minimal client written here: raw
newline-delimited JSON-RPC over the child's stdin/stdout, one request at a time, answering each
``session/request_permission`` from a script keyed by ``toolCallId``. A permission prompt the
script does not cover is answered ``{"outcome": "cancelled"}`` (it fails closed).

Two snapshots per scenario, in ``tests/snapshots/``:

* ``<name>.frames.jsonl`` — every JSON-RPC frame both ways, as ``--trace-frames`` wrote it;
* ``<name>.log.jsonl`` — the session log, as ``broker log export STORE --session ID`` printed it.

The runtime-context contributions (what the model sees, never on the wire) are snapshotted
in-process as ``context-<name>.json``: the context entries and notices of every scripted model
step of a :meth:`Composition.build_loop` session.

Normalisation (:class:`Normaliser`, text-level, so the comparison stays byte-for-byte): the tmp
workspace becomes ``<workspace>``, the rest of the tmp dir ``<tmp>``, and every UUID becomes
``<uuid-1>``, ``<uuid-2>``... in order of first appearance, one numbering per scenario across
its frames and log. Nothing else is nondeterministic: frames and exported logs carry no times.

Regenerate after an intended change, then review the diff::

    BROKER_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_acp_snapshots.py
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any, cast

import attrs
import pytest
import trio

from broker import (
    AnswerNext,
    ApprovalRequest,
    MemoryStore,
    Outcome,
    Policy,
    open_broker,
)
from broker._composition import Composition
from broker.agent import Scenario, ScriptedModel
from broker.scenarios import scenario_path
from broker.tools import BubblewrapExecutor, SandboxUnavailableError

from .acp_schema import validate_agent_traffic

SNAPSHOTS = pathlib.Path(__file__).parent / "snapshots"
FIXTURES = pathlib.Path(__file__).parent / "fixtures"
HOOK_SCENARIO = FIXTURES / "scenarios" / "hook-ask.json"
HOOK_SETTINGS = FIXTURES / "hooks" / "ask-echo.settings.json"
UPDATE_ENV = "BROKER_UPDATE_SNAPSHOTS"

ESCALATION_PROMPT = "Please write escalated.txt in the workspace."
HOOK_REASON = "ask_echo: echo commands need a human to confirm (echo hooked, call call_greet)"
REJECTED_TEXT = 'Error: the user rejected escalating this command to "workspace-write"'
CANCELLED_TEXT = 'Error: approval for escalating to "workspace-write" was cancelled'

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# -- normalisation and snapshots ----------------------------------------------------------------


@attrs.define(eq=False)
class Normaliser:
    """Replaces tmp paths and numbers UUIDs in order of first appearance (across every call)."""

    #: (real text, placeholder), most specific first.
    paths: list[tuple[str, str]]
    uuids: dict[str, str] = attrs.field(factory=dict, init=False)

    @classmethod
    def for_run(cls, workspace: pathlib.Path, tmp: pathlib.Path) -> Normaliser:
        pairs: list[tuple[str, str]] = []
        for real, placeholder in ((workspace, "<workspace>"), (tmp, "<tmp>")):
            for form in dict.fromkeys((str(real), str(real.resolve()))):
                pairs.append((form, placeholder))
        return cls(paths=pairs)

    def __call__(self, text: str) -> str:
        for real, placeholder in self.paths:
            text = text.replace(real, placeholder)
        return _UUID.sub(self._number, text)

    def _number(self, match: re.Match[str]) -> str:
        return self.uuids.setdefault(match[0], f"<uuid-{len(self.uuids) + 1}>")


def assert_snapshot(name: str, text: str) -> None:
    """Compare *text* byte-for-byte with ``tests/snapshots/<name>`` (or rewrite it)."""
    path = SNAPSHOTS / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_bytes(text.encode("utf-8"))
        return
    if not path.is_file():
        pytest.fail(f"snapshot {name} is missing: record it with {UPDATE_ENV}=1 and review it")
    expected = path.read_bytes().decode("utf-8")
    if expected != text:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"snapshots/{name}",
                "this run",
            )
        )
        pytest.fail(
            f"snapshot {name} differs (regenerate with {UPDATE_ENV}=1 if intended):\n{diff}"
        )


def test_normaliser_numbers_uuids_by_first_appearance_and_hides_tmp_paths(
    tmp_path: pathlib.Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    a, b = "0b7cbbd4-1a2b-4c3d-8e9f-0123456789ab", "ffffffff-0000-4000-8000-000000000000"
    normalise = Normaliser.for_run(ws, tmp_path)
    assert normalise(f'{{"cwd": "{ws}", "s": "{b}", "t": "{a}"}}') == (
        '{"cwd": "<workspace>", "s": "<uuid-1>", "t": "<uuid-2>"}'
    )
    assert normalise(f"{a} {b} {tmp_path}/store.sqlite") == "<uuid-2> <uuid-1> <tmp>/store.sqlite"


# -- the scripted client ------------------------------------------------------------------------

Json = dict[str, Any]


def selected(option_id: str) -> Json:
    return {"outcome": "selected", "optionId": option_id}


CANCELLED: Json = {"outcome": "cancelled"}


@attrs.define(eq=False)
class ScriptedClient:
    """A minimal ACP client over the child's pipes: newline-delimited JSON, one call at a time.

    ``answers`` maps a ``toolCallId`` to the permission outcome to send; a prompt it does not
    cover is answered :data:`CANCELLED`. Any other request from the agent fails the test.
    """

    stdin: trio.abc.SendStream
    stdout: trio.abc.ReceiveStream
    answers: dict[str, Json]
    updates: list[Json] = attrs.field(factory=list, init=False)
    #: (the permission request's params, the outcome we answered), in order.
    permissions: list[tuple[Json, Json]] = attrs.field(factory=list, init=False)
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)
    _next_id: int = attrs.field(default=0, init=False)

    async def send(self, message: Json) -> None:
        await self.stdin.send_all((json.dumps(message) + "\n").encode("utf-8"))

    async def receive(self) -> Json:
        while (newline := self._buffer.find(b"\n")) < 0:
            chunk = await self.stdout.receive_some(65536)
            if not chunk:
                raise AssertionError(f"the agent closed stdout; unread: {bytes(self._buffer)!r}")
            self._buffer += chunk
        line = bytes(self._buffer[:newline])
        del self._buffer[: newline + 1]
        return cast(Json, json.loads(line))

    async def call(self, method: str, params: Json) -> Json:
        """Send a request; serve the agent's messages until its response; return the result."""
        request_id = self._next_id
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            frame = await self.receive()
            if "method" in frame:
                await self._on_agent_message(frame)
                continue
            assert frame.get("id") == request_id, f"unexpected response {frame}"
            assert "error" not in frame, f"{method} failed: {frame['error']}"
            return cast(Json, frame["result"])

    async def _on_agent_message(self, frame: Json) -> None:
        method, params = frame["method"], frame.get("params", {})
        if method == "session/update" and "id" not in frame:
            self.updates.append(params)
        elif method == "session/request_permission" and "id" in frame:
            outcome = self.answers.get(params["toolCall"]["toolCallId"], CANCELLED)
            self.permissions.append((params, outcome))
            await self.send({"jsonrpc": "2.0", "id": frame["id"], "result": {"outcome": outcome}})
        else:
            raise AssertionError(f"the scripted client did not expect {frame}")

    def tool_results(self) -> list[str]:
        return [
            u["update"]["content"][0]["content"]["text"]
            for u in self.updates
            if u["update"]["sessionUpdate"] == "tool_call_update"
        ]


@attrs.frozen(kw_only=True)
class Recording:
    """One run of ``broker acp``: what the client saw, and the snapshots' raw text."""

    session_id: str
    stop_reason: str
    client: ScriptedClient
    workspace: pathlib.Path
    frames: list[Json]
    frames_text: str
    log: list[Json]
    log_text: str
    normalise: Normaliser

    def snapshot(self, name: str) -> None:
        # Frames first: the session id is <uuid-1> in both files.
        assert_snapshot(f"{name}.frames.jsonl", self.normalise(self.frames_text))
        assert_snapshot(f"{name}.log.jsonl", self.normalise(self.log_text))

    def decided(self) -> list[str]:
        return [e["data"]["outcome"] for e in self.log if e["type"] == "approval/decided"]


async def record(
    tmp_path: pathlib.Path, answers: dict[str, Json], *args: str, prompt: str = ESCALATION_PROMPT
) -> Recording:
    """Run ``broker acp *args`` with one session and one prompt, answered from *answers*."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store, trace = tmp_path / "store.sqlite", tmp_path / "frames.jsonl"
    env = {
        **os.environ,
        "BROKER_TEST_PYTHON": sys.executable,
        "BROKER_TEST_HOOKS": str(FIXTURES / "hooks"),
    }
    command = [sys.executable, "-m", "broker.cli", "acp", "--store", str(store)]
    command += ["--trace-frames", str(trace), *args]
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
        )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        client = ScriptedClient(stdin=process.stdin, stdout=process.stdout, answers=answers)
        init = await client.call("initialize", {"protocolVersion": 1})
        assert init["protocolVersion"] == 1
        new = await client.call("session/new", {"cwd": str(workspace), "mcpServers": []})
        session_id = cast(str, new["sessionId"])
        text = [{"type": "text", "text": prompt}]
        result = await client.call("session/prompt", {"sessionId": session_id, "prompt": text})
        await process.stdin.aclose()  # end of input: the agent closes its sessions and exits
        assert await process.wait() == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await trio.aclose_forcefully(stream)
    exporter = [sys.executable, "-m", "broker.cli", "log", "export", str(store)]
    export = await trio.run_process(
        [*exporter, "--session", session_id],
        capture_stdout=True,
        capture_stderr=True,
    )
    frames_text = trace.read_text(encoding="utf-8")
    log_text = export.stdout.decode("utf-8")
    frames = [json.loads(line) for line in frames_text.splitlines()]
    sent = [f["frame"] for f in frames if f["dir"] == "sent"]
    received = [f["frame"] for f in frames if f["dir"] == "received"]
    assert validate_agent_traffic(sent, received) == len(sent)
    return Recording(
        session_id=session_id,
        stop_reason=result["stopReason"],
        client=client,
        workspace=workspace,
        frames=frames,
        frames_text=frames_text,
        log=[json.loads(line) for line in log_text.splitlines()],
        log_text=log_text,
        normalise=Normaliser.for_run(workspace, tmp_path),
    )


@pytest.fixture
async def bwrap() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:  # only where bwrap cannot run; -ra prints why
        pytest.skip(f"bubblewrap cannot run here: {exc}")


# -- the recorded wire scenarios ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
async def test_escalation_approved(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(60):
        run = await record(tmp_path, {"call_escalate": selected("allow-once")})
    run.snapshot("escalation-approved")
    assert run.stop_reason == "end_turn"
    assert (run.workspace / "escalated.txt").read_text() == "escalated\n"
    first, final = run.client.tool_results()
    assert "[sandbox: file access denied under read-only mode]" in first
    assert final == "escalated"
    (asked,) = [p["toolCall"] for p, _ in run.client.permissions]
    # What the editor's prompt shows: the command, the wider mode and the justification.
    assert asked["toolCallId"] == "call_escalate"
    assert asked["title"] == "echo escalated > escalated.txt && cat escalated.txt"
    assert asked["rawInput"]["sandbox_permissions"] == "workspace-write"
    assert asked["content"][0]["content"]["text"].endswith(
        "with workspace-write access: the user asked to write escalated.txt in the workspace"
    )
    assert run.decided() == ["allowed-once"]


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
async def test_escalation_rejected(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(60):
        run = await record(tmp_path, {"call_escalate": selected("reject-once")})
    run.snapshot("escalation-rejected")
    assert run.stop_reason == "end_turn"
    assert list(run.workspace.iterdir()) == []
    assert run.client.tool_results()[1] == REJECTED_TEXT
    assert run.decided() == ["rejected"]
    assert run.log[-1] == {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
async def test_hook_driven_ask(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(60):
        run = await record(
            tmp_path,
            {"call_greet": selected("allow-once")},
            "--scenario",
            str(HOOK_SCENARIO),
            "--hooks",
            str(HOOK_SETTINGS),
            prompt="Please greet the workspace.",
        )
    run.snapshot("hook-ask")
    assert run.stop_reason == "end_turn"
    asked = [e["data"] for e in run.log if e["type"] == "approval/asked"]
    assert [(a["callId"], a["reason"]) for a in asked] == [("call_greet", HOOK_REASON)]
    assert run.decided() == ["allowed-once"]
    # Only the echo was asked about; the command the hook had no opinion on just ran.
    assert run.client.tool_results() == ["hooked", "no hook opinion"]


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
async def test_unscripted_permission_prompts_answer_cancelled_and_fail_closed(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(60):
        run = await record(tmp_path, {})
    run.snapshot("escalation-unscripted")
    assert [outcome for _, outcome in run.client.permissions] == [CANCELLED]
    assert run.decided() == ["cancelled"]
    assert run.client.tool_results()[1] == CANCELLED_TEXT
    assert list(run.workspace.iterdir()) == []
    assert run.stop_reason == "end_turn"


# -- the runtime-context contributions (in-process: what the model sees) -----------------------


async def _allow(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


def _dump_steps(model: ScriptedModel) -> str:
    steps = [
        {
            "step": i,
            "context": [{"key": c.key, "text": c.text} for c in request.context],
            "notices": [{"source": n.source, "text": n.text} for n in request.notices],
        }
        for i, request in enumerate(model.requests, start=1)
    ]
    return json.dumps({"steps": steps}, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("policy", [Policy.ASK, Policy.NEVER])
async def test_runtime_context_contribution(
    bwrap: BubblewrapExecutor, tmp_path: pathlib.Path, policy: Policy
) -> None:
    composition = Composition(
        policy=policy, scenario=Scenario.from_file(scenario_path("escalation"))
    )
    with trio.fail_after(30):
        async with open_broker(policy=composition.policy, store=MemoryStore()) as broker:
            async with broker.answerer(_allow), broker.open_session() as session:
                loop = composition.build_loop(
                    broker=broker, session=session, workspace=tmp_path, executor=bwrap
                )
                await loop.prompt(ESCALATION_PROMPT)
    model = cast(ScriptedModel, loop.model)
    text = _dump_steps(model)
    assert_snapshot(f"context-{policy.value}.json", text)
    first = model.requests[0].context
    assert [c.key for c in first] == ["approval:policy", "sandbox:mode"]
    assert first[0].text == broker.approval_context(session.agent)
    # Never repeated while unchanged.
    assert all(not r.context for r in model.requests[1:])


async def test_runtime_context_after_a_live_switch(
    bwrap: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    """ask, then the user switches to never while asked: the next step sees the notice and
    the never contribution, once."""
    composition = Composition(scenario=Scenario.from_file(scenario_path("escalation")))

    with trio.fail_after(30):
        async with open_broker(store=MemoryStore()) as broker:

            async def switch_and_reject(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
                assert await broker.set_policy(req.agent, Policy.NEVER)
                return Outcome.REJECTED

            async with broker.answerer(switch_and_reject), broker.open_session() as session:
                loop = composition.build_loop(
                    broker=broker, session=session, workspace=tmp_path, executor=bwrap
                )
                await loop.prompt(ESCALATION_PROMPT)
    model = cast(ScriptedModel, loop.model)
    assert_snapshot("context-ask-then-never.json", _dump_steps(model))
    keys = [[c.key for c in r.context] for r in model.requests]
    assert keys == [["approval:policy", "sandbox:mode"], [], ["approval:policy"]]
    assert [len(r.notices) for r in model.requests] == [0, 0, 1]
