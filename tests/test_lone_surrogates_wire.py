"""A lone surrogate (``json.loads('"\\ud800"')`` makes one from any client's or model's JSON)
reaching a writer: the web inbox's JSON, ``broker pending``, ``broker log show`` and the
terminal answerer each wrote it as UTF-8, which no codec can do, and crashed (the inbox's
stream for every page, the command, the question). Each now writes it escaped; text without
one is written as before. The store's side: ``test_lone_surrogates.py``."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import trio
from mcp import types

from broker import ApprovalRequest, MemoryStore, Outcome, open_broker
from broker._display import printable
from broker.cli._terminal import TerminalAnswerer
from broker.inbox import InboxKeys
from broker.inbox._wire import AnswerReply, dumps
from broker.mcp import GatedTools
from broker.store.board import MemoryBoard, PendingQuestion
from broker.store.sqlite._board import SqliteBoard
from broker.testing import ScriptedAnswerer

from .inbox_support import TOKEN, http, open_events, open_inbox

REASON = "x \ud800 y \udfff é 😀"
TOOL = "bash\udc80"
BEARER = {"authorization": f"Bearer {TOKEN}"}
TIMEOUT = 30


def question(
    qid: str, *, reason: str = REASON, tool: str = TOOL, session: str = "s\ud800"
) -> PendingQuestion:
    return PendingQuestion(
        id=qid,
        session_id=session,
        agent="agent\udfff",
        tool_name=tool,
        call_id="call\ud800",
        reason=reason,
        display_reason=reason,
        asked_at_ms=1,
        owner="me",
    )


def test_printable_escapes_a_lone_surrogate_visibly_and_keeps_pairs() -> None:
    assert printable(REASON) == "x \\ud800 y \\udfff é 😀"
    assert printable("\udc80", keep_newlines=True) == "\\udc80"
    printable(REASON).encode()


def test_the_inbox_json_escapes_them_and_is_unchanged_without() -> None:
    body = dumps(AnswerReply(id="q\ud800", error="é 😀"))
    assert body == '{"id":"q\\ud800","error":"é 😀"}'.encode()
    assert json.loads(body)["id"] == "q\ud800"
    assert dumps(AnswerReply(id="q", error="é 😀")) == '{"id":"q","error":"é 😀"}'.encode()


async def test_the_inbox_lists_streams_and_answers_around_them() -> None:
    board = MemoryBoard()
    await board.publish(question("q1"))
    csrf = InboxKeys(token=TOKEN).csrf
    with trio.fail_after(10):
        async with open_inbox(board, poll_interval=0.01) as inbox:
            listed = await http(inbox.port, "GET", "/api/pending", headers=BEARER)
            assert listed.status == 200
            (shown,) = json.loads(listed.body)["questions"]
            assert (shown["reason"], shown["toolName"]) == (printable(REASON), printable(TOOL))
            async with open_events(inbox.port, BEARER) as events:
                name, data = await events.next()
                assert name == "snapshot"
                assert [q["id"] for q in json.loads(data)["questions"]] == ["q1"]
                await board.publish(question("q2", reason="\udbff"))
                name, data = await events.next()
                assert name == "change"
                assert [q["reason"] for q in json.loads(data)["added"]] == ["\\udbff"]
            # An answer naming such an id is refused as unknown, the id echoed escaped.
            refused = await http(
                inbox.port,
                "POST",
                "/api/answer",
                headers={"content-type": "application/json", "x-csrf-token": csrf, **BEARER},
                body=b'{"id":"\\ud800","outcome":"allowed-once","by":"alice"}',
            )
            assert refused.status == 404
            assert json.loads(refused.body)["id"] == "\ud800"
            # The inbox keeps serving.
            again = await http(inbox.port, "GET", "/api/pending", headers=BEARER)
            assert [q["id"] for q in json.loads(again.body)["questions"]] == ["q1", "q2"]


def broker_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    # A strict UTF-8 stdout, as on a UTF-8 terminal or pipe.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="strict",
        timeout=TIMEOUT,
        check=False,
        env=env,
    )


@pytest.mark.slow
async def test_broker_pending_lists_them(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    with trio.fail_after(TIMEOUT):
        async with open_broker(store=store):
            pass  # the store file, for the board
        board = SqliteBoard(path=store)
        # The session id is the broker's (a client's is refused unless printable).
        await board.publish(question("q1", session="s1"))
        await board.publish(question("q2", reason="plain", tool="bash", session="s1"))
        await board.aclose()
        listed = await trio.to_thread.run_sync(broker_cli, "pending", store, "--json")
        assert listed.returncode == 0, listed.stderr
        rows: list[dict[str, Any]] = json.loads(listed.stdout)
        assert [(r["reason"], r["tool"], r["session"]) for r in rows] == [
            (REASON, TOOL, "s1"),
            ("plain", "bash", "s1"),
        ]
        assert '"reason":"plain"' not in listed.stdout  # json.dumps' default separators
        text = await trio.to_thread.run_sync(broker_cli, "pending", store)
    assert text.returncode == 0, text.stderr
    assert f"  reason: {printable(REASON)}\n" in text.stdout
    assert "  tool: bash\\udc80\n" in text.stdout


@pytest.mark.slow
async def test_broker_log_show_shows_them(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    with trio.fail_after(TIMEOUT):
        async with open_broker(store=store, policy="never") as broker:
            async with broker.open_session() as session:
                async with session.turn():
                    req = ApprovalRequest(agent=session.agent, tool_name=TOOL, reason=REASON)
                    assert await broker.request(req) is Outcome.REJECTED
                session_id = session.id
        shown = await trio.to_thread.run_sync(broker_cli, "log", "show", store, session_id)
    assert shown.returncode == 0, shown.stderr
    assert "bash\\udc80" in shown.stdout
    assert "x \\ud800 y \\udfff é 😀" in shown.stdout


async def test_the_terminal_answerer_shows_them(capsys: pytest.CaptureFixture[str]) -> None:
    # capsys's stdout is strict UTF-8, like a terminal's.
    answerer = TerminalAnswerer(stdin=io.StringIO("a\n"))

    async def unreachable() -> Outcome:
        raise AssertionError("the terminal answerer must not delegate")

    with trio.fail_after(5):
        async with open_broker() as broker, broker.open_session() as session:
            req = ApprovalRequest(
                agent=session.agent, tool_name=TOOL, call_id="c\ud800", reason=REASON
            )
            assert await answerer(req, unreachable) is Outcome.ALLOWED_ONCE
    out = capsys.readouterr().out
    assert "tool:    bash\\udc80  (call c\\ud800)" in out
    assert "reason:  x \\ud800 y \\udfff é 😀" in out


class Recorder:
    """An MCP client's ``call_tool`` that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any] | None]] = []
        self.result = types.CallToolResult(content=[])

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        await trio.lowlevel.checkpoint()
        self.calls.append((name, arguments))
        return self.result


async def test_gated_tools_ask_and_forward_them_as_given() -> None:
    # Not a writer: GatedTools shows the arguments in the question (whose writers escape) and
    # forwards the same values; nothing here encodes them.
    store = MemoryStore()
    answerer = ScriptedAnswerer()
    answerer.push(Outcome.ALLOWED_ONCE)
    arguments = {"path\ud800": ["\udfff", "é"]}
    client = Recorder()
    with trio.fail_after(5):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            tools = GatedTools(broker=broker, agent=session.agent, client=client)
            async with broker.answerer(answerer), session.turn():
                assert await tools.call_tool(TOOL, arguments) is client.result
    assert client.calls == [(TOOL, arguments)]
    (req,) = answerer.asked
    assert (
        req.display_reason == f'MCP tool call: {TOOL}, arguments: {{"path\ud800":["\udfff","é"]}}'
    )
