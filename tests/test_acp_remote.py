"""``broker acp --remote-answers``: the editor and the answer board race for each question."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import trio
import trio.testing

from broker import ApprovalDecided, Outcome, open_broker
from broker._composition import Composition
from broker.acp import JsonRpcConnection
from broker.acp._agent import serve_acp
from broker.agent import Scenario
from broker.scenarios import scenario_path
from broker.tools import BubblewrapExecutor, SandboxUnavailableError

from .conftest import log_of


@pytest.fixture
async def executor() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")


async def test_an_answer_from_the_board_wins_and_the_editor_is_withdrawn(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    asked = trio.Event()
    withdrawn: list[Any] = []

    async def never_answers(_params: dict[str, Any]) -> Any:
        asked.set()
        try:
            await trio.sleep_forever()
        finally:
            withdrawn.append("withdrawn")  # the agent's $/cancel_request cancels this handler

    composition = Composition(
        scenario=Scenario.from_file(scenario_path("escalation")), remote_answers=True
    )
    with trio.fail_after(60):
        async with open_broker() as broker:
            agent_side, client_side = trio.testing.memory_stream_pair()
            agent_conn = JsonRpcConnection(send_stream=agent_side, receive_stream=agent_side)
            client = JsonRpcConnection(send_stream=client_side, receive_stream=client_side)
            client.on_request("session/request_permission", never_answers)
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_acp, agent_conn, broker, composition, executor)
                await nursery.start(client.serve)
                await client.request("initialize", {"protocolVersion": 1})
                sid = (await client.request("session/new", {"cwd": str(ws), "mcpServers": []}))[
                    "sessionId"
                ]
                prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
                stops: list[str] = []
                done = trio.Event()

                async def run_prompt() -> None:
                    stops.append((await client.request("session/prompt", prompt))["stopReason"])
                    done.set()

                nursery.start_soon(run_prompt)
                await asked.wait()
                (question,) = await broker.pending()
                assert question.session_id == sid
                assert question.call_id == "call_escalate"
                await broker.answer(question.id, "allowed-once", by="terminal")
                await done.wait()
                session = broker.sessions[0]
                decided = [e for e in log_of(broker, session) if isinstance(e, ApprovalDecided)]
                await client.aclose()
    assert stops == ["end_turn"]
    assert [(d.outcome, d.answered_by) for d in decided] == [(Outcome.ALLOWED_ONCE, "terminal")]
    assert len(withdrawn) == 1  # the editor's request was withdrawn
    assert (ws / "escalated.txt").read_text() == "escalated\n"
