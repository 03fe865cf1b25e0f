"""The ACP agent and answerer (spec 8.4), driven over an in-process wire by a JSON-RPC client.

Real bubblewrap runs the escalation scenario; every frame the agent sends is checked against the
official ACP JSON Schema.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from broker import (
    AnswerNext,
    ApprovalDecided,
    ApprovalRequest,
    Broker,
    MemoryStore,
    Outcome,
    open_broker,
)
from broker._composition import Composition
from broker.acp import ErrorCode, FrameRecorder, JsonRpcConnection, JsonRpcError
from broker.acp._agent import AcpAgent, serve_acp
from broker.acp._answerer import AcpAnswerer
from broker.agent import Scenario
from broker.scenarios import scenario_path
from broker.tools import BubblewrapExecutor, SandboxUnavailableError

from .acp_schema import validate_agent_traffic
from .interop_support import (
    ESCALATE_TOOL_CALL,
    PERMISSION_OPTIONS,
)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
REJECT = {"outcome": {"outcome": "selected", "optionId": "reject-once"}}


@pytest.fixture
async def executor() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:  # only where bwrap cannot run; -ra prints why
        pytest.skip(f"bubblewrap cannot run here: {exc}")


def composition(**overrides: Any) -> Composition:
    return Composition(scenario=Scenario.from_file(scenario_path("escalation")), **overrides)


def answering(result: Any) -> Handler:
    async def handler(params: dict[str, Any]) -> Any:
        await trio.lowlevel.checkpoint()
        return result

    return handler


@attrs.define(eq=False)
class Client:
    """The test's ACP client: a JSON-RPC connection plus what it has seen."""

    conn: JsonRpcConnection
    broker: Broker
    recorder: FrameRecorder
    agent: AcpAgent | None = None
    permission_params: list[dict[str, Any]] = attrs.field(factory=list)
    updates: list[dict[str, Any]] = attrs.field(factory=list)

    async def new_session(self, cwd: pathlib.Path) -> str:
        result = await self.conn.request("session/new", {"cwd": str(cwd), "mcpServers": []})
        return cast(str, result["sessionId"])

    async def prompt(self, session_id: str, text: str = "write escalated.txt") -> str:
        result = await self.conn.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )
        return cast(str, result["stopReason"])

    def tool_results(self, session_id: str) -> list[str]:
        out = []
        for update in self.updates:
            body = update["update"]
            if update["sessionId"] == session_id and body["sessionUpdate"] == "tool_call_update":
                out.append(body["content"][0]["content"]["text"])
        return out

    def log(self, session_id: str) -> list[Any]:
        return cast(MemoryStore, self.broker.store).read_nowait(session_id)

    def decided(self, session_id: str) -> list[Outcome]:
        return [e.outcome for e in self.log(session_id) if isinstance(e, ApprovalDecided)]


@asynccontextmanager
async def acp(
    executor: BubblewrapExecutor, handler: Handler, comp: Composition | None = None
) -> AsyncIterator[Client]:
    agent_side, client_side = trio.testing.memory_stream_pair()
    recorder = FrameRecorder()
    agent_conn = JsonRpcConnection(
        send_stream=agent_side, receive_stream=agent_side, on_frame=recorder
    )
    client_conn = JsonRpcConnection(send_stream=client_side, receive_stream=client_side)
    async with open_broker(store=MemoryStore()) as broker:
        client = Client(conn=client_conn, broker=broker, recorder=recorder)

        async def permission(params: dict[str, Any]) -> Any:
            client.permission_params.append(params)
            return await handler(params)

        client_conn.on_request("session/request_permission", permission)
        client_conn.on_notification("session/update", client.updates.append)
        async with trio.open_nursery() as nursery:
            client.agent = await nursery.start(
                serve_acp, agent_conn, broker, comp or composition(), executor
            )
            await nursery.start(client_conn.serve)
            init = await client_conn.request("initialize", {"protocolVersion": 1})
            assert init["protocolVersion"] == 1
            yield client
            await client_conn.aclose()
    checked = validate_agent_traffic(recorder.sent, recorder.received)
    assert checked > 0


def workspace(tmp_path: pathlib.Path, name: str = "ws") -> pathlib.Path:
    ws = tmp_path / name
    ws.mkdir()
    return ws


async def test_allow_once_runs_the_escalated_write(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, answering(ALLOW)) as client:
            sid = await client.new_session(ws)
            assert await client.prompt(sid) == "end_turn"
    assert client.permission_params == [
        {
            "sessionId": sid,
            "toolCall": ESCALATE_TOOL_CALL,
            "options": PERMISSION_OPTIONS,
        }
    ]
    assert (ws / "escalated.txt").read_text() == "escalated\n"
    assert client.tool_results(sid)[-1] == "escalated"
    assert client.decided(sid) == [Outcome.ALLOWED_ONCE]
    kinds = [u["update"]["sessionUpdate"] for u in client.updates]
    assert kinds[:3] == ["agent_message_chunk", "tool_call", "tool_call_update"]
    statuses = [
        u["update"]["status"]
        for u in client.updates
        if u["update"]["sessionUpdate"] == "tool_call_update"
    ]
    assert statuses == ["failed", "completed"]  # the denied write exited 1; the escalated ran


@pytest.mark.parametrize(
    ("answer", "outcome", "text"),
    [
        (
            REJECT,
            Outcome.REJECTED,
            'Error: the user rejected escalating this command to "workspace-write"',
        ),
        (
            {"outcome": {"outcome": "selected", "optionId": "maybe-later"}},
            Outcome.REJECTED,
            'Error: the user rejected escalating this command to "workspace-write"',
        ),
        (
            {"outcome": {"outcome": "cancelled"}},
            Outcome.CANCELLED,
            'Error: approval for escalating to "workspace-write" was cancelled',
        ),
        (
            # The schema leaves the answer open: a newer client's extra keys are ignored.
            {
                "outcome": {"outcome": "selected", "optionId": "allow-once", "scope": "cmd"},
                "remember": False,
            },
            Outcome.ALLOWED_ONCE,
            "escalated",
        ),
        (
            {"outcome": {"outcome": "cancelled", "reason": "window closed"}},
            Outcome.CANCELLED,
            'Error: approval for escalating to "workspace-write" was cancelled',
        ),
        (
            # Closed where the schema is closed: an unknown tag or a wrong type fails closed.
            {"outcome": {"outcome": "approved", "optionId": "allow-once"}},
            Outcome.UNAVAILABLE,
            'Error: sandbox escalation to "workspace-write" requires approval, but no approval '
            "channel is available",
        ),
        (
            {"outcome": {"outcome": "selected", "optionId": 1}},
            Outcome.UNAVAILABLE,
            'Error: sandbox escalation to "workspace-write" requires approval, but no approval '
            "channel is available",
        ),
        (
            {"outcome": "bogus"},
            Outcome.UNAVAILABLE,
            'Error: sandbox escalation to "workspace-write" requires approval, but no approval '
            "channel is available",
        ),
    ],
)
async def test_answers_map_to_outcomes(
    executor: BubblewrapExecutor,
    tmp_path: pathlib.Path,
    answer: Any,
    outcome: Outcome,
    text: str,
) -> None:
    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, answering(answer)) as client:
            sid = await client.new_session(ws)
            assert await client.prompt(sid) == "end_turn"
    assert client.decided(sid) == [outcome]
    assert client.tool_results(sid)[1] == text
    landed = [p.name for p in ws.iterdir()]
    assert landed == (["escalated.txt"] if outcome is Outcome.ALLOWED_ONCE else [])


async def test_client_error_is_unavailable(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    async def refuse(params: dict[str, Any]) -> Any:
        raise JsonRpcError(ErrorCode.INTERNAL_ERROR, "no UI attached")

    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, refuse) as client:
            sid = await client.new_session(ws)
            await client.prompt(sid)
    assert client.decided(sid) == [Outcome.UNAVAILABLE]
    assert list(ws.iterdir()) == []


async def test_session_cancel_while_asking_cancels_and_ends_the_prompt(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    asked = trio.Event()
    withdrawn = trio.Event()
    client_saw: list[str] = []

    async def hold(params: dict[str, Any]) -> Any:
        asked.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            client_saw.append("our request was cancelled by $/cancel_request")
            withdrawn.set()
            raise
        return ALLOW

    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, hold) as client:
            sid = await client.new_session(ws)
            stop: list[str] = []
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    stop.append(await client.prompt(sid))

                nursery.start_soon(run)
                await asked.wait()
                await client.conn.notify("session/cancel", {"sessionId": sid})
            assert stop == ["cancelled"]
            with trio.fail_after(5):
                await withdrawn.wait()
    assert client.decided(sid) == [Outcome.CANCELLED]
    assert client_saw == ["our request was cancelled by $/cancel_request"]
    cancels = [f for f in client.recorder.sent if f.get("method") == "$/cancel_request"]
    assert len(cancels) == 1
    assert list(ws.iterdir()) == []


async def test_two_sessions_on_one_connection_answered_differently(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    allowed: set[str] = set()

    async def by_session(params: dict[str, Any]) -> Any:
        await trio.lowlevel.checkpoint()
        return ALLOW if params["sessionId"] in allowed else REJECT

    a, b = workspace(tmp_path, "a"), workspace(tmp_path, "b")
    with trio.fail_after(30):
        async with acp(executor, by_session) as client:
            sid_a, sid_b = await client.new_session(a), await client.new_session(b)
            allowed.add(sid_a)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.prompt, sid_a)
                nursery.start_soon(client.prompt, sid_b)
    assert client.decided(sid_a) == [Outcome.ALLOWED_ONCE]
    assert client.decided(sid_b) == [Outcome.REJECTED]
    assert (a / "escalated.txt").exists()
    assert list(b.iterdir()) == []


async def test_a_client_that_never_answers_hits_the_deadline(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    async def silent(params: dict[str, Any]) -> Any:
        await trio.sleep_forever()

    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, silent, composition(permission_deadline=0.3)) as client:
            sid = await client.new_session(ws)
            assert await client.prompt(sid) == "end_turn"
    assert client.decided(sid) == [Outcome.UNAVAILABLE]
    cancels = [f for f in client.recorder.sent if f.get("method") == "$/cancel_request"]
    permission_ids = [
        f["id"] for f in client.recorder.sent if f.get("method") == "session/request_permission"
    ]
    assert [c["params"]["requestId"] for c in cancels] == permission_ids


async def test_allow_always_is_offered_only_when_enabled_and_is_remembered(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    always = {"outcome": {"outcome": "selected", "optionId": "allow-always"}}
    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, answering(always), composition(allow_always=True)) as client:
            sid = await client.new_session(ws)
            await client.prompt(sid)
    assert client.permission_params[0]["options"][-1] == {
        "optionId": "allow-always",
        "name": "Always allow bash (this session)",  # the escalation carries no command
        "kind": "allow_always",
    }
    assert client.decided(sid) == [Outcome.ALLOWED_ONCE]
    assert [e.TYPE for e in client.log(sid)].count("approval/grant") == 1
    # Not offered (and so not honoured) when the composition does not enable it.
    ws2 = workspace(tmp_path, "ws2")
    with trio.fail_after(30):
        async with acp(executor, answering(always)) as client:
            sid = await client.new_session(ws2)
            await client.prompt(sid)
    assert [o["optionId"] for o in client.permission_params[0]["options"]] == [
        "allow-once",
        "reject-once",
    ]
    assert client.decided(sid) == [Outcome.REJECTED]


async def test_a_dead_connection_resolves_pending_asks_unavailable_and_audited(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    asked = trio.Event()

    async def hold(params: dict[str, Any]) -> Any:
        asked.set()
        await trio.sleep_forever()

    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, hold) as client:
            sid = await client.new_session(ws)
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    with pytest.raises(Exception):  # noqa: B017, PT011 - the connection dies
                        await client.prompt(sid)

                nursery.start_soon(run)
                await asked.wait()
                await client.conn.aclose()
    assert client.decided(sid) == [Outcome.UNAVAILABLE]
    types = [e.TYPE for e in client.log(sid)]
    assert types[-1] == "turn/end"
    assert list(ws.iterdir()) == []


async def test_protocol_errors(executor: BubblewrapExecutor, tmp_path: pathlib.Path) -> None:
    with trio.fail_after(30):
        async with acp(executor, answering(ALLOW)) as client:
            with pytest.raises(JsonRpcError, match=r"cwd must be an absolute path") as bad_cwd:
                await client.conn.request("session/new", {"cwd": "relative", "mcpServers": []})
            assert bad_cwd.value.code == ErrorCode.INVALID_PARAMS
            with pytest.raises(JsonRpcError, match=r"unknown sessionId 'nope'") as unknown:
                await client.prompt("nope")
            assert unknown.value.code == ErrorCode.INVALID_PARAMS


# -- the answerer alone -----------------------------------------------------------------------


async def test_the_answerer_delegates_foreign_and_callless_questions() -> None:
    calls: list[str] = []

    class NoConnection:
        async def request(self, method: str, params: Any) -> Any:
            calls.append(method)
            raise AssertionError("must not ask the client")

    async def terminal(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.REJECTED

    async with open_broker() as broker:
        async with broker.open_session() as mine, broker.open_session() as other:
            answerer = AcpAnswerer(
                connection=cast(JsonRpcConnection, NoConnection()),
                acp_session_id=mine.id,
                agent=mine.agent,
                broker=broker,
                deadline=5,
            )
            async with broker.answerer(answerer), broker.answerer(terminal):
                async with mine.turn(), other.turn():
                    foreign = ApprovalRequest(agent=other.agent, tool_name="bash", call_id="c")
                    callless = ApprovalRequest(agent=mine.agent, tool_name="bash")
                    assert await broker.request(foreign) is Outcome.REJECTED
                    assert await broker.request(callless) is Outcome.REJECTED
    assert calls == []


async def test_a_question_about_an_unknown_call_still_says_why() -> None:
    """Without the call's arguments the prompt still carries the tool and the reason."""
    sent: list[Any] = []

    class Recording:
        async def request(self, method: str, params: Any) -> Any:
            await trio.lowlevel.checkpoint()
            sent.append(params)
            return ALLOW

    async with open_broker() as broker, broker.open_session() as session:
        answerer = AcpAnswerer(
            connection=cast(JsonRpcConnection, Recording()),
            acp_session_id=session.id,
            agent=session.agent,
            broker=broker,
            deadline=5,
        )
        async with broker.answerer(answerer), session.turn():
            req = ApprovalRequest(
                agent=session.agent, tool_name="deploy", call_id="c1", reason="ship it"
            )
            assert await broker.request(req) is Outcome.ALLOWED_ONCE
    assert [p["toolCall"] for p in sent] == [
        {
            "toolCallId": "c1",
            "title": "deploy",
            "content": [{"type": "content", "content": {"type": "text", "text": "ship it"}}],
        }
    ]


async def test_a_prompt_cancelled_mid_question_forgets_its_tool_calls(
    executor: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    """The answerer's map of running calls does not keep a call whose prompt was cancelled."""
    asked = trio.Event()

    async def hold(params: dict[str, Any]) -> Any:
        asked.set()
        await trio.sleep_forever()

    ws = workspace(tmp_path)
    with trio.fail_after(30):
        async with acp(executor, hold) as client:
            sid = await client.new_session(ws)
            async with trio.open_nursery() as nursery:

                async def prompt() -> None:
                    await client.prompt(sid)

                nursery.start_soon(prompt)
                await asked.wait()
                assert client.agent is not None
                running = client.agent.sessions[sid].calls
                assert list(running) == ["call_escalate"]
                # Our request is cancelled: the client connection sends $/cancel_request.
                nursery.cancel_scope.cancel(reason="the test withdraws the prompt")
            await trio.testing.wait_all_tasks_blocked()
            assert client.agent.sessions[sid].prompt_signal is None  # the handler has ended
            assert running == {}
            assert client.agent.sessions[sid].session.is_open
    # The client is told the call ended failed, in the words a later session/load replays.
    last = client.updates[-1]["update"]
    assert last == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_escalate",
        "status": "failed",
        "content": [
            {
                "type": "content",
                "content": {
                    "type": "text",
                    "text": "not finished: the turn ended (cancelled) before this tool call "
                    "produced a result",
                },
            }
        ],
    }
