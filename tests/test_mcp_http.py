"""``broker mcp-gate --upstream-url``: the gate in front of a real MCP server over streamable
HTTP. The upstream is the official MCP Python SDK's ``MCPServer`` (``tests/mcp/upstream.py
--http``) served by uvicorn in a subprocess on a free port, answering requests with event
streams (its default) or with JSON bodies (``--json``); the client is the SDK's, on stdio, in
this process under trio. The same gating assertions as the stdio tests."""

from __future__ import annotations

import functools
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.context import ClientRequestContext

from broker import Outcome
from broker.mcp import refusal_text

from .test_mcp_interop import (
    Elicit,
    audit_pairs,
    connect,
    recorded,
    rules_file,
    stateless_client,
    text_of,
    upstream_argv,
)

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIMEOUT = 60


@asynccontextmanager
async def http_upstream(
    tmp_path: pathlib.Path, *, json: bool = False, extra: tuple[str, ...] = ()
) -> AsyncIterator[str]:
    """The SDK's server on streamable HTTP in a subprocess; yields its URL; killed on exit."""
    argv = [sys.executable, "-m", "tests.mcp.upstream", str(tmp_path / "record.jsonl"), "--http"]
    argv += extra
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process,
            [*argv, *(["--json"] if json else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            check=False,
            cwd=ROOT,
        )
        process: trio.Process = await nursery.start(run)
        assert process.stdout is not None
        first = b""
        with trio.fail_after(TIMEOUT):
            while not first.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "the upstream exited before listening"
                first += chunk
        port = int(first.decode().removeprefix("port "))
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.kill()


@asynccontextmanager
async def through_gate(
    url: str, *gate_args: str, elicit: Elicit | None = None
) -> AsyncIterator[ClientSession]:
    argv = ["-m", "broker.cli", "mcp-gate", *gate_args, "--upstream-url", url]
    params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(ROOT))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            yield session


def answering(action: str, seen: list[str]) -> Elicit:
    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return elicit


@pytest.mark.parametrize("json", [False, True], ids=["event-stream", "json"])
async def test_tools_list_is_the_servers_own(tmp_path: pathlib.Path, json: bool) -> None:
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path, json=json) as url:
            # The same server's list, asked directly (on stdio: the SDK's streamable-HTTP
            # client leaves async generators to the garbage collector under trio, which
            # -W error turns into failures).
            async with connect(upstream_argv(tmp_path / "direct.jsonl")) as direct:
                expected = (await direct.list_tools()).model_dump()
            async with through_gate(url, "--store", ":memory:") as gated:
                assert (await gated.list_tools()).model_dump() == expected
    names = [tool["name"] for tool in expected["tools"]]
    assert names == ["read_note", "write_note", "ask_user", "hang_forever", "crash_now"]


@pytest.mark.parametrize("json", [False, True], ids=["event-stream", "json"])
@pytest.mark.parametrize(("action", "runs"), [("accept", True), ("decline", False)])
async def test_the_allow_list_runs_and_a_write_asks(
    tmp_path: pathlib.Path, json: bool, action: str, runs: bool
) -> None:
    store = tmp_path / "log.sqlite"
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    seen: list[str] = []
    args = ["--store", str(store), "--rules", rules, "--no-remote-answers"]
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path, json=json) as url:
            async with through_gate(url, *args, elicit=answering(action, seen)) as gated:
                read = await gated.call_tool("read_note", {"name": "a"})
                assert seen == []  # the allow-listed tool ran without a question
                write = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    assert text_of(read) == "contents of a"
    (message,) = seen
    assert message.startswith('MCP tool call: write_note, arguments: {"name":"a","text":"x"}')
    calls: list[dict[str, Any]] = [{"tool": "read_note", "arguments": {"name": "a"}}]
    if runs:
        assert not write.is_error
        assert text_of(write) == "wrote 1 characters to a"
        calls.append({"tool": "write_note", "arguments": {"name": "a", "text": "x"}})
    else:
        assert write.is_error
        assert text_of(write) == refusal_text("write_note", Outcome.REJECTED)
    assert recorded(tmp_path) == calls
    outcomes = sorted((a["toolName"], d["outcome"]) for a, d in audit_pairs(store, tmp_path / "x"))
    assert outcomes == [
        ("read_note", "allowed-once"),
        ("write_note", "allowed-once" if runs else "rejected"),
    ]


async def test_no_answerer_means_unavailable_and_nothing_runs(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path) as url, through_gate(url, "--store", ":memory:") as g:
            result = await g.call_tool("write_note", {"name": "a", "text": "x"})
    assert text_of(result) == refusal_text("write_note", Outcome.UNAVAILABLE)
    assert recorded(tmp_path) == []


async def test_the_servers_own_elicitation_comes_through_its_event_stream(
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
        async with http_upstream(tmp_path) as url:
            args = ["--store", ":memory:", "--no-remote-answers"]
            async with through_gate(url, *args, elicit=elicit) as gated:
                result = await gated.call_tool("ask_user", {"question": "Really?"})
    assert text_of(result) == "the user said accept"
    gates, servers = seen
    assert gates.startswith('MCP tool call: ask_user, arguments: {"question":"Really?"}')
    assert servers == "Really?"


async def test_a_server_that_dies_gets_the_client_errors_within_the_bound(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["crash_*", "read_*"]\n')
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path) as url:
            async with through_gate(url, "--store", ":memory:", "--rules", rules) as gated:
                start = time.monotonic()
                with pytest.raises(MCPError, match=r"^the MCP server at http://127\.0\.0\.1:"):
                    await gated.call_tool("crash_now", {})
                # Gone: the next call fails too, at once, and nothing hangs (cannot connect; or,
                # while the dying process still holds its socket, connected and then reset).
                with pytest.raises(MCPError, match=r"^the MCP server at http://127\.0\.0\.1:"):
                    await gated.call_tool("read_note", {"name": "a"})
                assert time.monotonic() - start < 10
    assert [r["tool"] for r in recorded(tmp_path)] == ["crash_now"]


async def test_a_hung_server_gets_the_client_an_error_within_the_bound(
    tmp_path: pathlib.Path,
) -> None:
    rules = rules_file(tmp_path, 'allow = ["hang_*", "read_*"]\n')
    args = ["--store", ":memory:", "--rules", rules, "--server-deadline", "2"]
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path) as url, through_gate(url, *args) as gated:
            start = time.monotonic()
            with pytest.raises(MCPError, match=r"^the MCP server did not answer within 2 seconds"):
                await gated.call_tool("hang_forever", {})
            assert time.monotonic() - start < 10
            assert not (await gated.call_tool("read_note", {"name": "a"})).is_error
    assert [r["tool"] for r in recorded(tmp_path)] == ["hang_forever", "read_note"]


@pytest.mark.parametrize(("action", "runs"), [(None, False), ("accept", True), ("decline", False)])
async def test_the_stateless_revision_reaches_an_http_server_with_its_routing_headers(
    tmp_path: pathlib.Path, action: str | None, runs: bool
) -> None:
    """2026-07-28 over HTTP: no session, each POST carries MCP-Protocol-Version, Mcp-Method
    and Mcp-Name mirroring its envelope (the server refuses a request without them); the gate
    asks by an input-required result."""
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    seen: list[str] = []
    elicit = answering(action, seen) if action is not None else None
    with trio.fail_after(TIMEOUT):
        async with stateless_client(upstream_argv(tmp_path / "direct.jsonl")) as direct:
            expected = (await direct.list_tools()).model_dump()
        async with http_upstream(tmp_path) as url:
            argv = ["-m", "broker.cli", "mcp-gate", "--store", ":memory:", "--rules", rules]
            argv += ["--no-remote-answers", "--upstream-url", url]
            params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(ROOT))
            async with Client(params, elicitation_callback=elicit) as gated:
                assert gated.protocol_version == "2026-07-28"
                assert (await gated.list_tools()).model_dump() == expected
                read = await gated.call_tool("read_note", {"name": "a"})
                write = await gated.call_tool("write_note", {"name": "a", "text": "x"})
    assert text_of(read) == "contents of a"
    calls: list[dict[str, Any]] = [{"tool": "read_note", "arguments": {"name": "a"}}]
    if runs:
        assert text_of(write) == "wrote 1 characters to a"
        calls.append({"tool": "write_note", "arguments": {"name": "a", "text": "x"}})
    else:
        outcome = Outcome.UNAVAILABLE if action is None else Outcome.REJECTED
        assert text_of(write) == refusal_text("write_note", outcome)
    assert len(seen) == (action is not None)
    assert recorded(tmp_path) == calls


@pytest.mark.parametrize("region", ["us-west1", "Zürich 1 "])
async def test_a_stateless_call_carries_its_annotated_arguments_as_param_headers(
    tmp_path: pathlib.Path, region: str
) -> None:
    """2026-07-28: ``read_regional``'s schema marks ``region`` with ``x-mcp-header``; the SDK's
    server refuses the call unless ``Mcp-Param-Region`` mirrors it (base64 when not plain
    ASCII), so the allowed call runs only if the gate sends it."""
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path, extra=("--param-tool",)) as url:
            argv = ["-m", "broker.cli", "mcp-gate", "--store", ":memory:", "--rules", rules]
            argv += ["--no-remote-answers", "--upstream-url", url]
            params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(ROOT))
            async with Client(params) as gated:
                assert gated.protocol_version == "2026-07-28"
                listed = {t.name: t for t in (await gated.list_tools()).tools}
                schema = listed["read_regional"].input_schema
                assert schema["properties"]["region"]["x-mcp-header"] == "Region"
                result = await gated.call_tool("read_regional", {"region": region, "name": "a"})
    assert text_of(result) == f"contents of a in {region}"
    assert recorded(tmp_path) == [
        {"tool": "read_regional", "arguments": {"region": region, "name": "a"}}
    ]


async def test_a_call_whose_event_stream_the_server_closes_is_resumed_and_runs_once(
    tmp_path: pathlib.Path,
) -> None:
    """The SDK's server (an event store, ``retry: 100``) closes ``poll_note``'s event stream
    before it answers: the answer comes only on a GET with ``Last-Event-ID``; the call ran
    once (never POSTed again)."""
    rules = rules_file(tmp_path, 'allow = ["poll_*"]\n')
    args = ["--store", ":memory:", "--rules", rules]
    with trio.fail_after(TIMEOUT):
        async with http_upstream(tmp_path, extra=("--resumable",)) as url:
            async with through_gate(url, *args) as gated:
                result = await gated.call_tool("poll_note", {"name": "a"})
                again = await gated.call_tool("poll_note", {"name": "b"})
    assert text_of(result) == "polled a"
    assert text_of(again) == "polled b"
    assert recorded(tmp_path) == [
        {"tool": "poll_note", "arguments": {"name": "a"}},
        {"tool": "poll_note", "arguments": {"name": "b"}},
    ]


@pytest.mark.parametrize("json", [False, True], ids=["event-stream", "json"])
async def test_calls_reuse_kept_alive_connections(tmp_path: pathlib.Path, json: bool) -> None:
    """uvicorn keeps connections alive: ten calls in a row take one or two of them (the gate's
    count, logged when it stops), each call still answered and run once."""
    rules = rules_file(tmp_path, 'allow = ["read_*"]\n')
    log_path = tmp_path / "gate.log"
    argv = ["-m", "broker.cli", "mcp-gate", "--store", ":memory:", "--rules", rules]
    with trio.fail_after(TIMEOUT), log_path.open("w") as errlog:
        async with http_upstream(tmp_path, json=json) as url:
            argv += ["--log-level", "INFO", "--upstream-url", url]
            params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(ROOT))
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as gated:
                    await gated.initialize()
                    for n in range(10):
                        result = await gated.call_tool("read_note", {"name": f"n{n}"})
                        assert text_of(result) == f"contents of n{n}"
    assert len(recorded(tmp_path)) == 10
    (line,) = [x for x in log_path.read_text().splitlines() if "HTTP connections" in x]
    opened, reused = map(int, re.findall(r"(\d+) opened, (\d+) requests", line)[0])
    assert opened <= 3, line
    assert reused >= 10, line
