"""``GatedTools`` (``broker/mcp/_client.py``): the MCP Python SDK's ``ClientSession`` in this
process, under trio (the SDK runs on anyio; no asyncio loop), its ``call_tool`` asked about
first; the server is the SDK's ``MCPServer`` over real stdio (``tests/mcp/upstream.py``)."""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import sniffio
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from broker import ApprovalAsked, ApprovalDecided, MemoryStore, Outcome, open_broker
from broker.mcp import GatedTools, refusal_text
from broker.testing import ScriptedAnswerer

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent


@asynccontextmanager
async def sdk_client(record: pathlib.Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.mcp.upstream", str(record)], cwd=str(ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def recorded(record: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.parametrize("outcome", [Outcome.ALLOWED_ONCE, Outcome.REJECTED])
async def test_call_tool_runs_only_when_allowed(tmp_path: pathlib.Path, outcome: Outcome) -> None:
    assert sniffio.current_async_library() == "trio"
    record = tmp_path / "record.jsonl"
    store = MemoryStore()
    answerer = ScriptedAnswerer()
    answerer.push(outcome)
    arguments = {"name": "todo.md", "text": "buy milk"}
    with trio.fail_after(30):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            async with sdk_client(record) as client:
                tools = GatedTools(broker=broker, agent=session.agent, client=client)
                async with broker.answerer(answerer), session.turn():
                    result = await tools.call_tool("write_note", arguments)
            events = store.read_nowait(session.id)
    (req,) = answerer.asked
    assert req.display_reason == (
        'MCP tool call: write_note, arguments: {"name":"todo.md","text":"buy milk"}'
    )
    asked = [e for e in events if isinstance(e, ApprovalAsked)]
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(a.tool_name, a.call_id) for a in asked] == [("write_note", "mcp-1")]
    assert [d.outcome for d in decided] == [outcome]
    if outcome is Outcome.ALLOWED_ONCE:
        assert not result.is_error
        assert recorded(record) == [{"tool": "write_note", "arguments": arguments}]
    else:
        assert result.is_error
        (block,) = result.content
        assert isinstance(block, types.TextContent)
        assert block.text == refusal_text("write_note", outcome)
        assert recorded(record) == []


async def test_no_answerer_is_unavailable_and_nothing_runs(tmp_path: pathlib.Path) -> None:
    record = tmp_path / "record.jsonl"
    with trio.fail_after(30):
        async with open_broker() as broker, broker.open_session() as session:
            async with sdk_client(record) as client:
                tools = GatedTools(broker=broker, agent=session.agent, client=client)
                async with session.turn():
                    result = await tools.call_tool("read_note", {"name": "a"})
    assert result.is_error
    assert recorded(record) == []


async def test_arguments_that_are_not_json_are_refused_before_asking(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(30):
        async with open_broker() as broker, broker.open_session() as session:
            tools = GatedTools(broker=broker, agent=session.agent, client=None)  # type: ignore[arg-type]
            async with session.turn():
                with pytest.raises(ValueError, match=r"^arguments must be JSON values \("):
                    await tools.call_tool("write_note", {"x": float("nan")})
                with pytest.raises(ValueError, match=r"^arguments must be a dict of JSON values"):
                    await tools.call_tool("write_note", [1])  # type: ignore[arg-type]
            assert store_is_empty(broker, session.id)


def store_is_empty(broker: Any, session_id: str) -> bool:
    events = broker.store.read_nowait(session_id)
    return not any(isinstance(e, ApprovalAsked) for e in events)
