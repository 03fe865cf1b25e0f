"""``broker mcp-gate`` between two real peers: the official MCP Python SDK (``mcp`` 2.x) as the
client, in this process under trio (the SDK runs on anyio), and as the upstream server
(``tests/mcp/upstream.py``, an ``MCPServer`` with a read tool and a write tool that records
every call that reaches it), over real stdio: the client starts
``python -m broker.cli mcp-gate … -- python -m tests.mcp.upstream RECORD``. The client speaks
its handshake revision (``initialize``, ``ClientSession``) and, where said, the stateless
2026-07-28 revision (``server/discover``, a per-request envelope; the SDK's ``Client``)."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.context import ClientRequestContext

from broker import Outcome
from broker.inbox._auth import InboxKeys
from broker.mcp import refusal_text

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIMEOUT = 60

Elicit = Any  # the SDK's ElicitationFnT: (context, params) -> ElicitResult | ErrorData


def upstream_argv(record: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "tests.mcp.upstream", str(record)]


@asynccontextmanager
async def connect(
    argv: Sequence[str], *, elicit: Elicit | None = None
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(ROOT))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def through_gate(
    tmp_path: pathlib.Path, *gate_args: str, elicit: Elicit | None = None
) -> AsyncIterator[ClientSession]:
    argv = [sys.executable, "-m", "broker.cli", "mcp-gate", *gate_args, "--"]
    async with connect([*argv, *upstream_argv(tmp_path / "record.jsonl")], elicit=elicit) as s:
        yield s


def recorded(tmp_path: pathlib.Path) -> list[dict[str, Any]]:
    path = tmp_path / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def text_of(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


def broker_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        cwd=ROOT,
    )


def audit_pairs(
    store: pathlib.Path, out: pathlib.Path
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every approval pair of the store's sessions, read back with ``broker log export``."""
    exported = broker_cli("log", "export", str(store), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = [
        json.loads(line) for path in out.glob("*.jsonl") for line in path.read_text().splitlines()
    ]
    asked = {e["data"]["id"]: e["data"] for e in lines if e["type"] == "approval/asked"}
    decided = [e["data"] for e in lines if e["type"] == "approval/decided"]
    assert sorted(asked) == sorted(d["id"] for d in decided)
    return [(asked[d["id"]], d) for d in decided]


def rules_file(tmp_path: pathlib.Path, text: str) -> str:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return str(path)


def answering(action: str) -> Elicit:
    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.message.startswith("MCP tool call: write_note, arguments: {")
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return elicit


async def test_tools_list_is_the_servers_own(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(upstream_argv(tmp_path / "direct.jsonl")) as direct:
            expected = (await direct.list_tools()).model_dump()
        async with through_gate(tmp_path, "--store", ":memory:") as gated:
            assert (await gated.list_tools()).model_dump() == expected
    names = [tool["name"] for tool in expected["tools"]]
    assert names == ["read_note", "write_note", "ask_user", "hang_forever", "crash_now"]


#: The older handshake revision the pinned tests speak (elicitation advertised as ``{}``).
PINNED = "2025-06-18"


@asynccontextmanager
async def connect_pinned(
    argv: Sequence[str], *, elicit: Elicit | None = None
) -> AsyncIterator[ClientSession]:
    """The SDK's client on the 2025-06-18 handshake: ``ClientSession.initialize`` always
    offers the latest revision, so the handshake is the SDK's own requests with the pinned
    version and that revision's capabilities (``elicitation: {}``), then ``adopt``."""
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(ROOT))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            capabilities = types.ClientCapabilities(
                elicitation=types.ElicitationCapability() if elicit is not None else None
            )
            request = types.InitializeRequest(
                params=types.InitializeRequestParams(
                    protocol_version=PINNED,
                    capabilities=capabilities,
                    client_info=types.Implementation(name="pinned-client", version="1"),
                )
            )
            result = await session.send_request(request, types.InitializeResult)
            assert result.protocol_version == PINNED  # the server took the pin
            session.adopt(result)
            await session.send_notification(types.InitializedNotification())
            yield session


async def test_pinned_to_2025_06_18_tools_list_is_the_servers_own(tmp_path: pathlib.Path) -> None:
    gate = [sys.executable, "-m", "broker.cli", "mcp-gate", "--store", ":memory:", "--"]
    with trio.fail_after(TIMEOUT):
        async with connect_pinned(upstream_argv(tmp_path / "direct.jsonl")) as direct:
            expected = (await direct.list_tools()).model_dump()
        async with connect_pinned([*gate, *upstream_argv(tmp_path / "record.jsonl")]) as gated:
            assert (await gated.list_tools()).model_dump() == expected
    assert [tool["name"] for tool in expected["tools"]][:2] == ["read_note", "write_note"]


@pytest.mark.parametrize(("action", "runs"), [("accept", True), ("decline", False)])
async def test_pinned_to_2025_06_18_the_allow_list_runs_and_a_write_asks(
    tmp_path: pathlib.Path, action: str, runs: bool
) -> None:
    store = tmp_path / "log.sqlite"
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    argv = [sys.executable, "-m", "broker.cli", "mcp-gate", "--store", str(store)]
    argv += ["--rules", rules, "--no-remote-answers", "--"]
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    with trio.fail_after(TIMEOUT):
        async with connect_pinned(
            [*argv, *upstream_argv(tmp_path / "record.jsonl")], elicit=elicit
        ) as gated:
            read = await gated.call_tool("read_note", {"name": "a"})
            assert asked == []  # the allow-listed tool ran without a question
            write = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    assert not read.is_error
    assert text_of(read) == "contents of a"
    (message,) = asked
    assert message.startswith('MCP tool call: write_note, arguments: {"name":"a","text":"x"}')
    calls = [{"tool": "read_note", "arguments": {"name": "a"}}]
    if runs:
        assert not write.is_error
        calls.append({"tool": "write_note", "arguments": {"name": "a", "text": "x"}})
    else:
        assert text_of(write) == refusal_text("write_note", Outcome.REJECTED)
    assert recorded(tmp_path) == calls
    outcomes = [(a["toolName"], d["outcome"]) for a, d in audit_pairs(store, tmp_path / "export")]
    assert sorted(outcomes) == [
        ("read_note", "allowed-once"),
        ("write_note", "allowed-once" if runs else "rejected"),
    ]


async def test_a_denied_call_never_reaches_the_server(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "log.sqlite"
    rules = rules_file(tmp_path, 'allow = ["*"]\ndeny = ["write_*"]\n')
    with trio.fail_after(TIMEOUT):
        async with through_gate(
            tmp_path, "--store", str(store), "--rules", rules, elicit=answering("accept")
        ) as gated:
            result = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    assert result.is_error
    assert text_of(result) == refusal_text("write_note", Outcome.REJECTED)
    assert recorded(tmp_path) == []
    ((asked, decided),) = audit_pairs(store, tmp_path / "export")
    assert asked["toolName"] == "write_note"
    assert asked["reason"] == 'MCP tool call: write_note {"name":"a","text":"x"}'
    assert decided["outcome"] == "rejected"
    assert "answeredBy" not in decided  # no person: the rule decided, and the log names it
    assert (decided["source"], decided["ruleLayer"], decided["ruleIndex"]) == ("rule", "project", 1)
    assert decided["ruleFile"] == rules


async def test_an_allowed_call_reaches_the_server_with_its_exact_arguments(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    name = 'é "quoted" \\ \u202e\u0007 🙂\nline'
    with trio.fail_after(TIMEOUT):
        async with through_gate(tmp_path, "--store", ":memory:", "--rules", rules) as gated:
            result = await gated.call_tool("read_note", {"name": name})
    assert not result.is_error
    assert text_of(result) == f"contents of {name}"
    assert recorded(tmp_path) == [{"tool": "read_note", "arguments": {"name": name}}]


@pytest.mark.parametrize(
    ("action", "outcome"),
    [("accept", "allowed-once"), ("decline", "rejected"), ("cancel", "cancelled")],
)
async def test_the_clients_user_answers_by_elicitation(
    tmp_path: pathlib.Path, action: str, outcome: str
) -> None:
    store = tmp_path / "log.sqlite"
    with trio.fail_after(TIMEOUT):
        async with through_gate(
            tmp_path, "--store", str(store), "--no-remote-answers", elicit=answering(action)
        ) as gated:
            result = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    if outcome == "allowed-once":
        assert not result.is_error
        assert recorded(tmp_path) == [
            {"tool": "write_note", "arguments": {"name": "a", "text": "x"}}
        ]
    else:
        assert result.is_error
        assert text_of(result) == refusal_text("write_note", Outcome(outcome))
        assert recorded(tmp_path) == []
    ((_, decided),) = audit_pairs(store, tmp_path / "export")
    assert decided["outcome"] == outcome
    assert decided["answeredBy"] == "the MCP client's user (elicitation)"


async def test_no_answerer_means_unavailable_and_nothing_runs(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with through_gate(tmp_path, "--store", ":memory:") as gated:
            result = await gated.call_tool("write_note", {"name": "a", "text": "x"})
            # The connection goes on: the next call is gated the same way.
            again = await gated.call_tool("read_note", {"name": "a"})
    assert text_of(result) == refusal_text("write_note", Outcome.UNAVAILABLE)
    assert text_of(again) == refusal_text("read_note", Outcome.UNAVAILABLE)
    assert recorded(tmp_path) == []


async def wait_pending(store: pathlib.Path) -> dict[str, Any]:
    while True:
        listed = await trio.run_process(
            [sys.executable, "-m", "broker.cli", "pending", str(store), "--json"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if listed.returncode == 0:
            rows: list[dict[str, Any]] = json.loads(listed.stdout)
            if rows:
                (row,) = rows
                return row
        await trio.sleep(0.1)


async def test_a_call_answered_from_another_terminal(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "log.sqlite"
    results: list[types.CallToolResult] = []
    with trio.fail_after(TIMEOUT):
        async with through_gate(tmp_path, "--store", str(store)) as gated:
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(await gated.call_tool("write_note", {"name": "n", "text": "t"}))

                nursery.start_soon(call)
                row = await wait_pending(store)
                assert row["tool"] == "write_note"
                assert row["displayReason"] == (
                    'MCP tool call: write_note, arguments: {"name":"n","text":"t"}'
                )
                assert recorded(tmp_path) == []  # held while it waits
                answered = await trio.run_process(
                    [
                        sys.executable,
                        "-m",
                        "broker.cli",
                        "answer",
                        str(store),
                        row["id"],
                        "allow",
                        "--by",
                        "alice",
                    ],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
                assert answered.returncode == 0, answered.stderr
    (result,) = results
    assert not result.is_error
    assert recorded(tmp_path) == [{"tool": "write_note", "arguments": {"name": "n", "text": "t"}}]
    ((asked, decided),) = audit_pairs(store, tmp_path / "export")
    assert decided == {**decided, "outcome": "allowed-once", "answeredBy": "alice"}
    assert asked["id"] == row["id"]
    shown = broker_cli("log", "show", str(store))
    assert shown.returncode == 0, shown.stderr


async def test_the_client_cancelling_a_waiting_call_withdraws_the_question(
    tmp_path: pathlib.Path,
) -> None:
    store = tmp_path / "log.sqlite"
    with trio.fail_after(TIMEOUT):
        async with through_gate(tmp_path, "--store", str(store)) as gated:
            with trio.move_on_after(30) as waiting:
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        await gated.call_tool("write_note", {"name": "n", "text": "t"})

                    nursery.start_soon(call)
                    await wait_pending(store)
                    nursery.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            assert not waiting.cancelled_caught
            # The question leaves the board once the gate settles it.
            while True:
                listed = broker_cli("pending", str(store), "--json")
                if listed.stdout == "[]\n":
                    break
                await trio.sleep(0.1)
    assert recorded(tmp_path) == []
    ((_, decided),) = audit_pairs(store, tmp_path / "export")
    assert decided["outcome"] == "cancelled"


async def test_a_hung_server_gets_the_client_an_error_within_the_bound(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["hang_*", "read_*"]\n')
    with trio.fail_after(TIMEOUT):
        async with through_gate(
            tmp_path, "--store", ":memory:", "--rules", rules, "--server-deadline", "2"
        ) as gated:
            start = time.monotonic()
            with pytest.raises(MCPError, match=r"^the MCP server did not answer within 2 seconds"):
                await gated.call_tool("hang_forever", {})
            assert time.monotonic() - start < 10
            # The server was told to stop, and the connection goes on.
            assert not (await gated.call_tool("read_note", {"name": "a"})).is_error
    assert [r["tool"] for r in recorded(tmp_path)] == ["hang_forever", "read_note"]


async def test_a_server_that_crashes_mid_call_gets_the_client_an_error(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["crash_*"]\n')
    with trio.fail_after(TIMEOUT):
        async with through_gate(tmp_path, "--store", ":memory:", "--rules", rules) as gated:
            with pytest.raises(MCPError, match=r"^the MCP server exited before answering"):
                await gated.call_tool("crash_now", {})
    assert [r["tool"] for r in recorded(tmp_path)] == ["crash_now"]


@asynccontextmanager
async def stateless_client(argv: Sequence[str]) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(ROOT))
    async with Client(params) as client:
        assert client.protocol_version == "2026-07-28"
        yield client


async def test_the_stateless_revision_passes_through_and_its_calls_are_gated(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    gate = [sys.executable, "-m", "broker.cli", "mcp-gate", "--store", ":memory:"]
    with trio.fail_after(TIMEOUT):
        async with stateless_client(upstream_argv(tmp_path / "direct.jsonl")) as direct:
            expected = (await direct.list_tools()).model_dump()
        argv = [*gate, "--rules", rules, "--", *upstream_argv(tmp_path / "record.jsonl")]
        async with stateless_client(argv) as gated:
            assert (await gated.list_tools()).model_dump() == expected
            allowed = await gated.call_tool("read_note", {"name": "a"})
            refused = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    assert not allowed.is_error
    assert refused.is_error
    assert text_of(refused) == refusal_text("write_note", Outcome.UNAVAILABLE)
    assert recorded(tmp_path) == [{"tool": "read_note", "arguments": {"name": "a"}}]


async def test_the_servers_own_elicitation_passes_through_after_the_gates(
    tmp_path: pathlib.Path,
) -> None:
    seen: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        seen.append(params.message)
        content: dict[str, str | int | float | bool | list[str] | None] | None = (
            {"sure": True} if len(seen) == 2 else None
        )
        return types.ElicitResult(action="accept", content=content)

    with trio.fail_after(TIMEOUT):
        async with through_gate(
            tmp_path, "--store", ":memory:", "--no-remote-answers", elicit=elicit
        ) as gated:
            result = await gated.call_tool("ask_user", {"question": "Really?"})
    assert text_of(result) == "the user said accept"
    gates, servers = seen
    assert gates.startswith('MCP tool call: ask_user, arguments: {"question":"Really?"}')
    assert servers == "Really?"
    assert recorded(tmp_path) == [{"tool": "ask_user", "arguments": {"question": "Really?"}}]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_settles_the_waiting_call_cancelled_and_exits(
    tmp_path: pathlib.Path, signum: int, status: int
) -> None:
    store = tmp_path / "log.sqlite"
    argv = [sys.executable, "-m", "broker.cli", "mcp-gate", "--store", str(store), "--"]
    with subprocess.Popen(
        [*argv, *upstream_argv(tmp_path / "record.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    ) as gate:
        try:
            assert gate.stdin is not None
            request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            request["params"] = {"name": "write_note", "arguments": {"name": "a", "text": "x"}}
            gate.stdin.write(json.dumps(request).encode() + b"\n")
            gate.stdin.flush()
            deadline = time.monotonic() + TIMEOUT
            while broker_cli("pending", str(store), "--json").stdout in ("", "[]\n"):
                assert time.monotonic() < deadline, "the call never waited on the board"
                time.sleep(0.1)
            gate.send_signal(signum)
            _, err = gate.communicate(timeout=TIMEOUT)
        finally:
            if gate.poll() is None:
                gate.kill()
    assert gate.returncode == status, err
    assert err.decode().endswith(
        f"broker mcp-gate: {signal.Signals(signum).name} received: pending questions settled "
        "as cancelled, the session log was closed\n"
    )
    assert recorded(tmp_path) == []
    ((_, decided),) = audit_pairs(store, tmp_path / "export")
    assert decided["outcome"] == "cancelled"
    verified = broker_cli("log", "verify", str(store))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize(
    ("action", "outcome"), [("accept", "allowed-once"), ("decline", "rejected")]
)
async def test_a_stateless_client_is_asked_by_input_required(
    tmp_path: pathlib.Path, action: str, outcome: str
) -> None:
    store = tmp_path / "log.sqlite"
    seen: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    gate = [sys.executable, "-m", "broker.cli", "mcp-gate", "--store", str(store)]
    argv = [*gate, "--no-remote-answers", "--", *upstream_argv(tmp_path / "record.jsonl")]
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(ROOT))
    with trio.fail_after(TIMEOUT):
        async with Client(params, elicitation_callback=elicit) as client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("write_note", {"name": "a", "text": "x"})
    (message,) = seen
    assert message.startswith('MCP tool call: write_note, arguments: {"name":"a","text":"x"}')
    if outcome == "allowed-once":
        assert not result.is_error
        assert recorded(tmp_path) == [
            {"tool": "write_note", "arguments": {"name": "a", "text": "x"}}
        ]
    else:
        assert text_of(result) == refusal_text("write_note", Outcome.REJECTED)
        assert recorded(tmp_path) == []
    ((_, decided),) = audit_pairs(store, tmp_path / "export")
    assert decided["outcome"] == outcome
    assert decided["answeredBy"] == "the MCP client's user (elicitation)"


def inbox_call(url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers |= {"Content-Type": "application/json", "X-CSRF-Token": InboxKeys(token=token).csrf}
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return json.loads(response.read())


async def test_a_call_answered_in_the_gates_own_web_inbox(tmp_path: pathlib.Path) -> None:
    errlog = tmp_path / "gate.stderr"
    record = tmp_path / "record.jsonl"
    argv = ["-m", "broker.cli", "mcp-gate", "--store", ":memory:", "--inbox", "0", "--"]
    params = StdioServerParameters(
        command=sys.executable, args=[*argv, *upstream_argv(record)], cwd=str(ROOT)
    )
    results: list[types.CallToolResult] = []
    with trio.fail_after(TIMEOUT), errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                (line,) = [
                    x for x in errlog.read_text().splitlines() if x.startswith("broker inbox: ")
                ]
                url, token = line.removeprefix("broker inbox: ").split("/?token=")
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        arguments = {"name": "n", "text": "t"}
                        results.append(await session.call_tool("write_note", arguments))

                    nursery.start_soon(call)
                    questions: list[dict[str, Any]] = []
                    for _ in range(TIMEOUT * 20):  # bounded by fail_after too
                        listed = await trio.to_thread.run_sync(
                            inbox_call, f"{url}/api/pending", token
                        )
                        questions = listed["questions"]
                        if questions:
                            break
                        await trio.sleep(0.05)
                    (question,) = questions
                    assert question["toolName"] == "write_note"
                    answer = {"id": question["id"], "outcome": "allowed-once", "by": "alice"}
                    await trio.to_thread.run_sync(inbox_call, f"{url}/api/answer", token, answer)
    (result,) = results
    assert not result.is_error
    assert recorded(tmp_path) == [{"tool": "write_note", "arguments": {"name": "n", "text": "t"}}]
