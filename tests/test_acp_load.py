"""``session/load``: an editor reattaches to a stored session and sees its history replayed.

The first connection runs a prompt and hangs up; a second connection on a broker reopened on the
same SQLite file (a restart) loads the session by id. Every frame the agent sends is checked
against the official ACP JSON Schema.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from broker import ApprovalDecided, Broker, Outcome, open_broker
from broker._composition import Composition
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
    broker: Broker, executor: BubblewrapExecutor, updates: list[dict[str, Any]]
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
    composition = Composition(scenario=Scenario.from_file(scenario_path("escalation")))
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_acp, agent_conn, broker, composition, executor)
        await nursery.start(client.serve)
        yield client
        await client.aclose()
    assert validate_agent_traffic(recorder.sent, recorder.received) > 0


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["update"]["sessionUpdate"] for u in updates]


async def test_load_replays_the_history_then_prompts_on_the_same_session(
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
        # A restart: a new broker on the same file, a new connection.
        replayed: list[dict[str, Any]] = []
        async with open_broker(store=store) as broker, connect(broker, executor, replayed) as c:
            await c.request("initialize", {"protocolVersion": 1})
            loaded = await c.request(
                "session/load", {"sessionId": sid, "cwd": str(ws), "mcpServers": []}
            )
            assert loaded == {}
            # The history arrived before the response, in the order it happened.
            history = list(replayed)
            assert history[0]["update"] == {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "write it"},
            }
            assert kinds(history) == [
                "user_message_chunk",
                *[k for k in kinds(first)],
            ]
            assert all(u["sessionId"] == sid for u in history)
            # The loaded session goes on: a new turn on the same id.
            again = await c.request("session/prompt", prompt)
            assert again["stopReason"] == "end_turn"
    async with open_sqlite_store(store) as reopened:
        assert reopened.session_ids() == [sid]
        events = await reopened.read(sid)
    decided = [e.outcome for e in events if isinstance(e, ApprovalDecided)]
    assert decided == [Outcome.ALLOWED_ONCE, Outcome.ALLOWED_ONCE]


async def test_load_of_an_unknown_session_is_invalid_params_naming_it(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with trio.fail_after(30):
        async with open_broker(store=tmp_path / "log.sqlite") as broker:
            async with connect(broker, executor, []) as c:
                await c.request("initialize", {"protocolVersion": 1})
                with pytest.raises(JsonRpcError) as info:
                    await c.request(
                        "session/load", {"sessionId": "nope", "cwd": str(ws), "mcpServers": []}
                    )
    assert info.value.code == -32602
    assert info.value.message.startswith("invalid params: session 'nope' is not in store file")
