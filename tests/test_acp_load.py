"""``session/load``: an editor reattaches to a stored session and sees its history replayed.

The first connection runs a prompt and hangs up; a second connection on a broker reopened on the
same SQLite file (a restart) loads the session by id. Every frame the agent sends is checked
against the official ACP JSON Schema.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from broker import ApprovalDecided, Broker, Outcome, open_broker
from broker._composition import Composition
from broker._events import (
    ApprovalAsked,
    ToolCalled,
    ToolResulted,
    TurnStart,
    UserMessage,
)
from broker.acp import FrameRecorder, JsonRpcConnection, JsonRpcError
from broker.acp._agent import serve_acp
from broker.agent import Scenario
from broker.scenarios import scenario_path
from broker.store import open_sqlite_store
from broker.tools import BubblewrapExecutor, SandboxUnavailableError

from .acp_schema import validate_agent_traffic

ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}


@pytest.fixture
async def executor() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")


@asynccontextmanager
async def connect(
    broker: Broker,
    executor: BubblewrapExecutor,
    updates: list[dict[str, Any]],
    scenario: Scenario | None = None,
) -> AsyncIterator[JsonRpcConnection]:
    agent_side, client_side = trio.testing.memory_stream_pair()
    recorder = FrameRecorder()
    agent_conn = JsonRpcConnection(
        send_stream=agent_side, receive_stream=agent_side, on_frame=recorder
    )
    client = JsonRpcConnection(send_stream=client_side, receive_stream=client_side)

    async def permission(_params: dict[str, Any]) -> Any:
        await trio.lowlevel.checkpoint()
        return ALLOW

    client.on_request("session/request_permission", permission)
    client.on_notification("session/update", updates.append)
    script = scenario or Scenario.from_file(scenario_path("escalation"))
    composition = Composition(scenario=script)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_acp, agent_conn, broker, composition, executor)
        await nursery.start(client.serve)
        yield client
        await client.aclose()
    assert validate_agent_traffic(recorder.sent, recorder.received) > 0


async def load(c: JsonRpcConnection, sid: str, ws: pathlib.Path) -> Any:
    await c.request("initialize", {"protocolVersion": 1})
    return await c.request("session/load", {"sessionId": sid, "cwd": str(ws), "mcpServers": []})


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["update"]["sessionUpdate"] for u in updates]


def statuses(updates: list[dict[str, Any]]) -> dict[str, str]:
    """Each tool call's last status, as a client folding the updates would show it."""
    shown: dict[str, str] = {}
    for u in updates:
        update = u["update"]
        if update["sessionUpdate"] in ("tool_call", "tool_call_update") and "status" in update:
            shown[update["toolCallId"]] = update["status"]
    return shown


PERMISSION = (
    "Permission asked: escalate sandbox to workspace-write: the user asked to write "
    "escalated.txt in the workspace\nAnswer: allowed once"
)


async def test_load_replays_what_happened_then_prompts_on_the_same_session(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite"
    ws = tmp_path / "ws"
    ws.mkdir()
    first: list[dict[str, Any]] = []
    with trio.fail_after(60):
        async with open_broker(store=store) as broker, connect(broker, executor, first) as c:
            init = await c.request("initialize", {"protocolVersion": 1})
            assert init["agentCapabilities"] == {"loadSession": True}
            created = await c.request("session/new", {"cwd": str(ws), "mcpServers": []})
            sid = created["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "write it"}]}
            assert (await c.request("session/prompt", prompt))["stopReason"] == "end_turn"
        # The read-only sandbox refused the first write: the call failed live.
        assert statuses(first) == {"call_write": "failed", "call_escalate": "completed"}
        # A restart: a new broker on the same file, a new connection.
        replayed: list[dict[str, Any]] = []
        async with open_broker(store=store) as broker, connect(broker, executor, replayed) as c:
            assert await load(c, sid, ws) == {}
            # The history arrived before the response, in the order it happened: the live
            # updates, the prompt first, and the permission question on its call.
            history = list(replayed)
            permission = {
                "sessionId": sid,
                "update": {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call_escalate",
                    "content": [
                        {"type": "content", "content": {"type": "text", "text": PERMISSION}}
                    ],
                },
            }
            prompt_chunk = {
                "sessionId": sid,
                "update": {
                    "sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "write it"},
                },
            }
            assert history == [prompt_chunk, *first[:5], permission, *first[5:]]
            # The loaded session goes on: a new turn on the same id. Its scripted model
            # continues its script (all of it was answered), as it would without the restart.
            again = await c.request("session/prompt", prompt)
            assert again["stopReason"] == "end_turn"
    async with open_sqlite_store(store) as reopened:
        assert reopened.session_ids() == [sid]
        events = await reopened.read(sid)
    decided = [e.outcome for e in events if isinstance(e, ApprovalDecided)]
    assert decided == [Outcome.ALLOWED_ONCE]
    assert [type(e).__name__ for e in events[-3:]] == ["TurnStart", "UserMessage", "TurnEnd"]


async def test_two_loads_replay_the_same_bytes(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite"
    ws = tmp_path / "ws"
    ws.mkdir()
    with trio.fail_after(60):
        async with open_broker(store=store) as broker, connect(broker, executor, []) as c:
            await c.request("initialize", {"protocolVersion": 1})
            sid = (await c.request("session/new", {"cwd": str(ws), "mcpServers": []}))["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "write it"}]}
            await c.request("session/prompt", prompt)
        loads: list[list[dict[str, Any]]] = [[], []]
        for updates in loads:
            async with open_broker(store=store) as broker, connect(broker, executor, updates) as c:
                await load(c, sid, ws)
    assert loads[0]
    assert [json.dumps(u) for u in loads[0]] == [json.dumps(u) for u in loads[1]]


async def crash_tail(store: pathlib.Path) -> str:
    """A session log as kill -9 during a pending question leaves it: the turn open, the
    question asked and not decided, the call without a result."""
    async with open_sqlite_store(store) as writer:
        sid = "crashed-session"
        await writer.create_session(sid, None)
        await writer.append(
            sid,
            [
                TurnStart(turn=1),
                UserMessage(text="write it"),
                ToolCalled(call_id="call_done", tool_name="bash", input={"command": "true"}),
                ToolResulted(call_id="call_done", output="ok"),
                ToolCalled(call_id="call_pending", tool_name="bash", input={"command": "rm x"}),
                ApprovalAsked(id="q1", tool_name="bash", call_id="call_pending", reason="why"),
            ],
        )
    return sid


async def test_a_call_cut_short_by_a_crash_replays_failed_saying_so(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite"
    ws = tmp_path / "ws"
    ws.mkdir()
    sid = await crash_tail(store)
    replayed: list[dict[str, Any]] = []
    with trio.fail_after(60):
        # Opening the store recovers the tail (cancelled + recovered, turn interrupted).
        async with open_broker(store=store) as broker, connect(broker, executor, replayed) as c:
            await load(c, sid, ws)
    assert statuses(replayed) == {"call_done": "completed", "call_pending": "failed"}
    last = replayed[-1]["update"]
    assert last["toolCallId"] == "call_pending"
    assert last["content"][0]["content"]["text"] == (
        "interrupted: the broker stopped before this tool call finished; it may or may not have run"
    )
    question = replayed[-2]["update"]
    assert question["content"][0]["content"]["text"] == (
        "Permission asked: why\nAnswer: cancelled (when the session was recovered)"
    )


SCRIPT = {
    "name": "two-turns",
    "steps": [
        {
            "text": "running it",
            "toolCalls": [{"name": "bash", "arguments": {"command": "echo hi"}}],
        },
        {"text": "first done"},
        {
            "expect": [
                {"role": "user", "text": "first"},
                {"role": "assistant", "text": "running it"},
                {"role": "tool", "callId": "call_1"},
                {"role": "assistant", "text": "first done"},
                {"role": "user", "text": "second"},
            ],
            "text": "I remember",
            "toolCalls": [{"name": "bash", "arguments": {"command": "echo again"}}],
        },
        {"text": "second done"},
    ],
}


async def test_a_loaded_session_model_receives_the_earlier_turns(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = Scenario.from_data(SCRIPT)
    seen: list[dict[str, Any]] = []
    with trio.fail_after(60):
        async with open_broker(store=store) as broker, connect(broker, executor, [], script) as c:
            await c.request("initialize", {"protocolVersion": 1})
            sid = (await c.request("session/new", {"cwd": str(ws), "mcpServers": []}))["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "first"}]}
            assert (await c.request("session/prompt", prompt))["stopReason"] == "end_turn"
        async with open_broker(store=store) as broker, connect(broker, executor, seen, script) as c:
            await load(c, sid, ws)
            del seen[:]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "second"}]}
            # The third step's expectations hold only if the model was given turn one.
            assert (await c.request("session/prompt", prompt))["stopReason"] == "end_turn"
    # Tool call ids stay unique within the session.
    assert [
        u["update"]["toolCallId"] for u in seen if u["update"]["sessionUpdate"] == "tool_call"
    ] == ["call_2"]


BAD_IDS = [
    pytest.param("", "sessionId must not be empty (got '')", id="empty"),
    pytest.param(
        "x" * 10_000,
        f"sessionId is 10000 characters long, more than 256 (got '{'x' * 40}… (10000 characters)')",
        id="10KB",
    ),
    pytest.param("a\nb", "sessionId contains control or other unprintable characters", id="ctl"),
    pytest.param(7, "expected a string, got number @ $.sessionId", id="number"),
    pytest.param(None, "expected a string, got null @ $.sessionId", id="null"),
    pytest.param({"id": "x"}, "expected a string, got object @ $.sessionId", id="object"),
]


@pytest.mark.parametrize(("session_id", "problem"), BAD_IDS)
async def test_a_malformed_session_id_is_invalid_params_naming_the_problem(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path, session_id: object, problem: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with trio.fail_after(30):
        async with open_broker(store=tmp_path / "log.sqlite") as broker:
            async with connect(broker, executor, []) as c:
                with pytest.raises(JsonRpcError) as info:
                    await load(c, session_id, ws)  # type: ignore[arg-type]
                # The connection still serves.
                assert await c.request("session/new", {"cwd": str(ws), "mcpServers": []})
    assert info.value.code == -32602
    assert info.value.message.startswith(f"invalid params: {problem}")
    assert len(info.value.message) < 300


async def test_an_unknown_or_open_session_is_refused_in_the_clients_words(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with trio.fail_after(30):
        async with open_broker(store=tmp_path / "log.sqlite") as broker:
            async with connect(broker, executor, []) as c, connect(broker, executor, []) as other:
                with pytest.raises(JsonRpcError) as unknown:
                    await load(c, "nope", ws)
                sid = (await c.request("session/new", {"cwd": str(ws), "mcpServers": []}))[
                    "sessionId"
                ]
                with pytest.raises(JsonRpcError) as here:
                    await c.request(
                        "session/load", {"sessionId": sid, "cwd": str(ws), "mcpServers": []}
                    )
                with pytest.raises(JsonRpcError) as elsewhere:
                    await load(other, sid, ws)
    assert unknown.value.code == here.value.code == elsewhere.value.code == -32602
    assert unknown.value.message == (
        "invalid params: sessionId 'nope' is not a session this agent can load (not in its "
        "store, or not closed cleanly): create one with session/new"
    )
    assert here.value.message == (
        f"invalid params: sessionId {sid!r} is already loaded on this connection: send "
        "session/prompt to it"
    )
    assert elsewhere.value.message == (
        f"invalid params: sessionId {sid!r} is in use by another connection to this agent: "
        "close that connection first, then load it"
    )
