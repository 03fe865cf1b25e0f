"""The MCP gate's streamable-HTTP upstream (``broker/mcp/_streamable.py``) against an HTTP
server the test scripts byte by byte (h11 on trio, in this process): what each POST carries,
and that whatever the untrusted server does wrong becomes a JSON-RPC error for that request,
at once, with nothing of it passed on. The SSE parser is checked on its own first."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from broker import MemoryStore, open_broker
from broker.mcp import GateRules, UpstreamUrl, relay, serve_mcp_gate
from broker.mcp._http import MAX_IDLE
from broker.mcp._messages import canonical
from broker.mcp._sse import SseParser, TooLong
from broker.mcp._streamable import RESUME_ATTEMPTS, open_streamable_upstream

from .test_mcp_gate import Peer

WAIT = 10
STREAM = b"\r\n".join(
    [
        b": a comment",
        b"event: message",
        b"id: 1",
        b'data: {"a":',
        b"data: 1}",
        b"",
        b"event: other",
        b"data: skipped",
        b"",
        b"retry: 10",
        b"data:x",
        b"",
        b"data: ",
        b"",
        b"",
    ]
)


def test_sse_events_are_the_data_of_message_events() -> None:
    assert SseParser(limit=1024).feed(STREAM) == [b'{"a":\n1}', b"x", b""]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8), st.booleans())
def test_sse_events_do_not_depend_on_how_the_stream_is_cut(cuts: list[int], lf: bool) -> None:
    stream = STREAM.replace(b"\r\n", b"\n" if lf else b"\r")
    events: list[bytes] = []
    parser = SseParser(limit=1024)
    edges = [0, *sorted(cuts), len(stream)]
    for start, end in itertools.pairwise(edges):
        events += parser.feed(stream[start:end])
    assert events == [b'{"a":\n1}', b"x", b""]


def test_sse_keeps_the_cursor_for_resuming() -> None:
    parser = SseParser(limit=1024)
    assert parser.feed(STREAM) == [b'{"a":\n1}', b"x", b""]
    assert (parser.last_id, parser.retry) == (b"1", 0.01)  # an id holds until another one
    # An id counts once its event is dispatched; a half-read event is dropped on reconnecting.
    assert parser.feed(b"id: 2\ndata: a\n\nid: 3\ndata: half") == [b"a"]
    assert parser.last_id == b"2"
    parser.reconnected()
    assert parser.feed(b"\n\ndata: b\n\n") == [b"b"]
    assert parser.last_id == b"2"
    assert parser.feed(b"id: x\0y\ndata: c\n\nretry: 1e3\n\n") == [b"c"]  # both ignored
    assert (parser.last_id, parser.retry) == (b"2", 0.01)
    assert parser.feed(b"id\n\n") == []  # an empty id: nothing to resume from
    assert parser.last_id is None


@pytest.mark.parametrize("stream", [b"data: " + b"x" * 100, b"data: " + b"x" * 50 + b"\n" * 2])
def test_an_sse_event_over_the_limit_is_refused(stream: bytes) -> None:
    with pytest.raises(TooLong, match="longer than 40 bytes"):
        SseParser(limit=40).feed(stream)


@attrs.define
class Seen:
    method: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    raw: bytes = b""


Reply = Callable[[Seen], bytes]


def http(status: int, body: bytes, kind: str, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"content-type: {kind}", f"content-length: {len(body)}"]
    return ("\r\n".join([*head, *extra, "connection: close", "", ""])).encode() + body


def sse(*messages: dict[str, Any]) -> bytes:
    body = b"".join(b"data: " + json.dumps(m).encode() + b"\n\n" for m in messages)
    return http(200, body, "text/event-stream")


def ok(message: dict[str, Any], *extra: str) -> bytes:
    return http(200, json.dumps(message).encode(), "application/json", *extra)


ACCEPTED = http(202, b"", "application/json")


@asynccontextmanager
async def scripted_server(reply: Reply) -> AsyncIterator[tuple[str, list[Seen]]]:
    """An HTTP/1.1 server on a free port answering each request with ``reply(seen)``."""
    seen: list[Seen] = []

    async def handle(stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            else:
                break
        if request is None:
            return  # the gate connected and left (closing): nothing was asked
        headers = {k.decode(): v.decode() for k, v in request.headers}
        entry = Seen(request.method.decode(), headers, json.loads(body) if body else None, body)
        seen.append(entry)
        with contextlib.suppress(trio.BrokenResourceError):
            # The gate may hang up first: on a message over its limit, it stops reading.
            await stream.send_all(reply(entry))
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        port = listener.socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp", seen
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def gated(url: str, *, limit: int = 4096, allow: tuple[str, ...] = ()) -> AsyncIterator[Peer]:
    """The relay with the upstream at *url*; yields the client's side."""
    client_send, client_in = trio.testing.memory_stream_one_way_pair()
    client_out, client_recv = trio.testing.memory_stream_one_way_pair()
    async with open_broker(store=MemoryStore()) as broker, trio.open_nursery() as nursery:
        upstream_cm = open_streamable_upstream(UpstreamUrl.parse(url), max_message_bytes=limit)
        async with upstream_cm as upstream:
            nursery.start_soon(
                lambda: relay(
                    broker,
                    client_in=client_in,
                    client_out=client_out,
                    upstream_in=upstream.receive_stream,
                    upstream_out=upstream.send_stream,
                    max_line_bytes=limit,
                    rules=GateRules(allow=allow),
                )
            )
            with trio.fail_after(WAIT):
                yield Peer(client_send, client_recv)
                await client_send.aclose()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
INITIALIZED = {"jsonrpc": "2.0", "result": {"protocolVersion": "2025-06-18"}, "id": 1}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def test_each_message_is_one_post_and_the_session_goes_with_the_rest() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    listed = {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}

    def reply(seen: Seen) -> bytes:
        if seen.method == "GET":
            return http(405, b"", "text/plain")  # no stream of its own
        method = seen.body["method"] if seen.body and "method" in seen.body else None
        if method == "initialize":
            return ok(INITIALIZED, "mcp-session-id: s-1")
        if method == "tools/list":
            return sse(progress, listed)
        return ACCEPTED

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(INIT)
        assert await client.message() == INITIALIZED
        await client.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await client.write(LIST)
        assert await client.message() == progress
        assert await client.message() == listed
    assert [s.method for s in seen].count("GET") <= 1  # 405: not asked again
    init, note, listing, *end = [s for s in seen if s.method != "GET"]
    assert [s.method for s in [init, note, listing, *end]] == ["POST", "POST", "POST", "DELETE"]
    assert init.body == INIT
    assert init.headers["accept"] == "application/json, text/event-stream"
    assert init.headers["content-type"] == "application/json"
    assert "mcp-session-id" not in init.headers
    for later in (note, listing, *end):
        assert later.headers["mcp-session-id"] == "s-1"
        assert later.headers["mcp-protocol-version"] == "2025-06-18"
    assert listing.body == LIST


@pytest.mark.parametrize(
    ("response", "said"),
    [
        (http(500, b"oops", "text/plain"), "answered HTTP 500: see its log"),
        (http(302, b"", "text/plain", "location: http://elsewhere/"), "answered HTTP 302"),
        (http(200, b"<html>", "text/html"), "answered with content type 'text/html'"),
        (sse(), "ended its response without answering the request"),
        # A forged answer (to an id nobody asked) is dropped; the request is still unanswered.
        (sse({"jsonrpc": "2.0", "id": 99, "result": {}}), "ended its response without answering"),
        (ok({"jsonrpc": "2.0", "id": 2, "result": {"x": "y" * 5000}}), "dropped: a response"),
        (sse({"jsonrpc": "2.0", "id": 2, "result": {"x": "y" * 5000}}), "dropped: an event"),
        # Its body ends where the connection does: complete, but no answer in it.
        (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {", "ended its"),
        (http(200, b"{}", "application/json").replace(b"length: 2", b"length: 9"), "mid-resp"),
        (b"nonsense\r\n\r\n", "failed the request: not HTTP/1.1"),
    ],
)
async def test_a_request_the_server_fails_gets_an_error_at_once(response: bytes, said: str) -> None:
    def reply(seen: Seen) -> bytes:
        return response if seen.body and seen.body.get("id") == 2 else ACCEPTED

    async with scripted_server(reply) as (url, _), gated(url) as client:
        await client.write(LIST)
        answer = await client.message()
    assert answer["id"] == 2
    assert answer["error"]["code"] == -32000
    assert answer["error"]["message"].startswith(f"the MCP server at {url} ")
    assert said in answer["error"]["message"]


async def test_a_server_that_cannot_be_reached_is_an_error_per_request() -> None:
    async with scripted_server(lambda seen: ACCEPTED) as (url, _):
        pass  # closed: nothing listens on its port any more
    async with gated(url) as client:
        await client.write(LIST)
        answer = await client.message()
        await client.write({**LIST, "id": 3})
        again = await client.message()
    assert "cannot connect" in answer["error"]["message"]
    assert again["id"] == 3


async def test_a_session_id_that_is_not_visible_ascii_is_not_sent_back() -> None:
    def reply(seen: Seen) -> bytes:
        if seen.body and seen.body.get("method") == "initialize":
            return ok(INITIALIZED, "mcp-session-id: a b")
        return ok({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(INIT)
        await client.message()
        await client.write(LIST)
        await client.message()
    assert all("mcp-session-id" not in s.headers for s in seen)


async def test_a_tools_call_nobody_allowed_is_never_posted() -> None:
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "write"}}
    async with scripted_server(lambda seen: ACCEPTED) as (url, seen), gated(url) as client:
        await client.write(call)
        answer = await client.message()
    assert answer["result"]["isError"] is True
    assert seen == []


@pytest.mark.parametrize(("name", "header"), [("greet", "greet"), ("é x", "=?base64?w6kgeA==?=")])
async def test_a_stateless_request_carries_its_envelope_as_routing_headers(
    name: str, header: str
) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    get = {"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": name}}
    get["params"]["_meta"] = meta  # type: ignore[index]
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"messages": []}}
    async with scripted_server(lambda seen: ok(answer)) as (url, seen), gated(url) as client:
        await client.write(get)
        assert await client.message() == answer
    (post,) = seen
    assert post.headers["mcp-protocol-version"] == "2026-07-28"
    assert post.headers["mcp-method"] == "prompts/get"
    assert post.headers["mcp-name"] == header


async def test_the_servers_own_stream_is_relayed_once_the_client_is_initialized() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    roots = {"jsonrpc": "2.0", "id": "s1", "method": "roots/list"}
    answer = {"jsonrpc": "2.0", "id": "s1", "result": {"roots": []}}
    gets: list[Seen] = []
    asked_again, answered = trio.Event(), trio.Event()

    def reply(seen: Seen) -> bytes:
        if seen.method == "GET":
            gets.append(seen)
            if len(gets) == 1:
                return sse(changed, roots)
            asked_again.set()  # its stream ended: the gate asks again; now it has none
            return http(405, b"", "text/plain")
        if seen.body == answer:
            answered.set()
        if seen.body and seen.body.get("method") == "initialize":
            return ok(INITIALIZED, "mcp-session-id: s-1")
        return ACCEPTED

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(INIT)
        await client.message()
        assert gets == []  # not before the client is initialized
        await client.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert await client.message() == changed
        assert await client.message() == roots
        await client.write(answer)
        with trio.fail_after(WAIT):
            await answered.wait()  # the client's answer to the server's request, POSTed
            await asked_again.wait()
    first, _ = gets
    assert first.headers["accept"] == "text/event-stream"
    assert first.headers["mcp-session-id"] == "s-1"
    assert [s.method for s in seen].count("GET") == 2


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
SQL_SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "target": {
            "type": "object",
            "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}},
        },
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "rows": {"type": "integer", "x-mcp-header": "Rows"},
        "note": {"type": "string", "x-mcp-header": "Note"},
        "query": {"type": "string"},
    },
}
#: Annotations the specification makes invalid: the tool is left out of tools/list.
INVALID_SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}},
    },
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}}},
    {"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A B"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": ""}}},
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "x-mcp-header": "Same"},
            "b": {"type": "string", "x-mcp-header": "same"},
        },
    },
]


def listing(*tools: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "result": {"tools": list(tools), "resultType": "complete"}}


def tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "inputSchema": schema}


def call(arguments: dict[str, Any], name: str = "sql") -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": META}
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}


DONE = {"jsonrpc": "2.0", "id": 3, "result": {"content": [], "resultType": "complete"}}


async def listed_then_called(
    tools: list[dict[str, Any]], arguments: dict[str, Any], name: str = "sql"
) -> tuple[dict[str, Any], dict[str, Any], list[Seen]]:
    """A 2026-07-28 tools/list of *tools*, then an allowed call of *name*: what the client got
    for each, and what the server saw."""
    listed = listing(*tools)

    def reply(seen: Seen) -> bytes:
        assert seen.body is not None
        return ok(listed if seen.body["method"] == "tools/list" else DONE)

    async with (
        scripted_server(reply) as (url, seen),
        gated(url, limit=65536, allow=("*",)) as client,
    ):
        await client.write({**LIST, "params": {"_meta": META}})
        got_list = await client.message()
        await client.write(call(arguments, name))
        got_call = await client.message()
    return got_list, got_call, seen


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {
                "region": "us-west1",
                "target": {"zone": "é x"},
                "dry": True,
                "rows": 42,
                "query": "q",
            },
            {"region": "us-west1", "zone": "=?base64?w6kgeA==?=", "dry": "true", "rows": "42"},
        ),
        (
            # The specification's own examples; a missing or null value sends no header.
            {"region": "Hello, 世界", "target": {"zone": " padded "}, "dry": False, "note": None},
            {
                "region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
                "zone": "=?base64?IHBhZGRlZCA=?=",
                "dry": "false",
            },
        ),
        (
            {"region": "line1\nline2", "target": {}, "rows": -7.0, "note": "=?base64?literal?="},
            {
                "region": "=?base64?bGluZTEKbGluZTI=?=",
                "rows": "-7",
                "note": "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=",
            },
        ),
    ],
)
async def test_a_stateless_tools_call_mirrors_annotated_arguments_as_param_headers(
    arguments: dict[str, Any], expected: dict[str, str]
) -> None:
    got_list, got_call, seen = await listed_then_called([tool("sql", SQL_SCHEMA)], arguments)
    assert got_list == listing(tool("sql", SQL_SCHEMA))  # valid: passed on as it came
    assert got_call == DONE
    _, posted = seen
    params = {
        k.removeprefix("mcp-param-"): v
        for k, v in posted.headers.items()
        if k.startswith("mcp-param-")
    }
    assert params == expected
    assert posted.headers["mcp-name"] == "sql"
    # The body is the call the gate allowed, byte for byte: the headers only mirror it.
    line, _ = canonical(call(arguments), arguments)
    assert posted.raw == line.rstrip(b"\n")


@pytest.mark.parametrize("schema", INVALID_SCHEMAS)
async def test_a_tool_with_an_invalid_annotation_is_left_out_and_never_called(
    schema: dict[str, Any],
) -> None:
    good = tool("sql", SQL_SCHEMA)
    got_list, got_call, seen = await listed_then_called(
        [tool("bad", schema), good], {"a": "x"}, name="bad"
    )
    assert got_list == listing(good)
    assert "the gate did not send the call" in got_call["error"]["message"]
    assert "is invalid" in got_call["error"]["message"]
    assert [s.body["method"] for s in seen if s.body] == ["tools/list"]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"region": {"x": 1}}, "argument 'region' is an object"),
        ({"target": {"zone": ["a"]}}, "argument 'target.zone' is an array"),
        ({"rows": 1.5}, "argument 'rows' is a fraction"),
        ({"rows": 2**53}, "argument 'rows' is an integer beyond"),
        ({"region": "x" * 20000}, "take over 16384 bytes"),
    ],
)
async def test_an_argument_no_header_can_carry_fails_the_call_closed(
    arguments: dict[str, Any], said: str
) -> None:
    _, got_call, seen = await listed_then_called([tool("sql", SQL_SCHEMA)], arguments)
    assert got_call["id"] == 3
    assert said in got_call["error"]["message"]
    assert [s.body["method"] for s in seen if s.body] == ["tools/list"]  # never POSTed


PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
LISTED = {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}


def event(message: dict[str, Any] | None, event_id: str, retry: int | None = None) -> bytes:
    data = json.dumps(message).encode() if message is not None else b""
    extra = f"retry: {retry}\n".encode() if retry is not None else b""
    return f"id: {event_id}\n".encode() + extra + b"data: " + data + b"\n\n"


def stream_head(length: int | None = None) -> bytes:
    size = f"content-length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{size}\r\n".encode()


@pytest.mark.parametrize("broken", [False, True], ids=["ended", "broken"])
async def test_a_broken_event_stream_is_resumed_with_last_event_id(broken: bool) -> None:
    """The POST's stream ends (or breaks mid-body) after events with ids and before the
    answer: the gate waits the server's retry, then GETs with Last-Event-ID and relays the
    rest; the request is never POSTed again."""
    first = event(None, "e1", retry=300) + event(PROGRESS, "e2") + b"data: {half"
    times: dict[str, float] = {}

    def reply(seen: Seen) -> bytes:
        times[seen.method] = trio.current_time()
        if seen.method == "GET":
            return stream_head() + event(LISTED, "e3")
        return stream_head(len(first) + 100 if broken else None) + first

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(LIST)
        assert await client.message() == PROGRESS
        assert await client.message() == LISTED
    post, get = seen
    assert post.method == "POST"
    assert get.method == "GET"
    assert get.headers["last-event-id"] == "e2"
    assert get.headers["accept"] == "text/event-stream"
    assert times["GET"] - times["POST"] >= 0.3  # the server's retry: 300 ms


async def test_a_stream_the_server_does_not_resume_fails_the_request() -> None:
    def reply(seen: Seen) -> bytes:
        if seen.method == "GET":
            return http(405, b"", "text/plain")
        return stream_head() + event(PROGRESS, "e1", retry=10)

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(LIST)
        assert await client.message() == PROGRESS
        answer = await client.message()
    assert "did not resume it (GET with Last-Event-ID: HTTP 405)" in answer["error"]["message"]
    assert [s.method for s in seen] == ["POST", "GET"]


async def test_resuming_a_stream_that_brings_nothing_stops_after_bounded_attempts() -> None:
    def reply(seen: Seen) -> bytes:
        if seen.method == "GET":
            return stream_head()  # an empty stream, ended at once
        return stream_head() + event(None, "e1", retry=10)

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write(LIST)
        answer = await client.message()
    assert "5 attempts in a row to resume it" in answer["error"]["message"]
    assert [s.method for s in seen] == ["POST"] + ["GET"] * RESUME_ATTEMPTS


async def test_a_stateless_requests_stream_is_not_resumed() -> None:
    """2026-07-28: "Resumable SSE streams via Last-Event-ID are not supported"."""

    def reply(seen: Seen) -> bytes:
        return stream_head() + event(None, "e1", retry=10)

    async with scripted_server(reply) as (url, seen), gated(url) as client:
        await client.write({**LIST, "params": {"_meta": META}})
        answer = await client.message()
    assert "ended its response without answering" in answer["error"]["message"]
    assert [s.method for s in seen] == ["POST"]


async def test_the_servers_own_stream_is_resumed_with_last_event_id() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    gets: list[Seen] = []
    done = trio.Event()

    def reply(seen: Seen) -> bytes:
        if seen.method == "GET":
            gets.append(seen)
            if len(gets) == 1:
                return stream_head() + event(changed, "g1", retry=20)
            done.set()
            return http(405, b"", "text/plain")
        if seen.body and seen.body.get("method") == "initialize":
            return ok(INITIALIZED, "mcp-session-id: s-1")
        return ACCEPTED

    async with scripted_server(reply) as (url, _), gated(url) as client:
        await client.write(INIT)
        await client.message()
        await client.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert await client.message() == changed
        await done.wait()
    first, second = gets
    assert "last-event-id" not in first.headers
    assert second.headers["last-event-id"] == "g1"
    assert second.headers["mcp-session-id"] == "s-1"


@asynccontextmanager
async def keepalive_server(
    reply: Reply,
    *,
    hang_up: Callable[[Seen], bool] = lambda seen: False,
    hold: int = 0,
    nagle: bool = False,
) -> AsyncIterator[tuple[str, list[tuple[int, Seen]], trio.Event]]:
    """An HTTP/1.1 server that keeps connections open (``content-length``, no ``connection:
    close``); yields its URL, each request with the number of its connection, and an event set
    whenever it hung up silently after a response (``hang_up(seen)``: an idle timeout). With
    *hold*, no request is answered before that many arrived. A reply is written in parts,
    split at ``PAUSE`` (20 ms apart); with *nagle*, Nagle's algorithm is on, and the head and
    the body of a reply are written separately."""
    seen: list[tuple[int, Seen]] = []
    hung_up, all_in = trio.Event(), trio.Event()
    numbers = itertools.count()

    async def handle(stream: trio.SocketStream) -> None:
        number = next(numbers)
        if nagle:
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        while True:
            await trio.lowlevel.checkpoint()
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                connection.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                headers = {k.decode(): v.decode() for k, v in request.headers}
                parsed = json.loads(body) if body else None
                entry = Seen(request.method.decode(), headers, parsed, body)
                seen.append((number, entry))
                if len(seen) >= hold:
                    all_in.set()
                await all_in.wait()
                answer = reply(entry).replace(b"connection: close\r\n", b"")
                if nagle:
                    answer = answer.replace(b"\r\n\r\n", b"\r\n\r\n" + PAUSE, 1)
                for n, part in enumerate(answer.split(PAUSE)):
                    if n and not nagle:
                        await trio.sleep(0.02)
                    await stream.send_all(part)
                if hang_up(entry):
                    await stream.aclose()
                    hung_up.set()
                    return
                # The reply went out as bytes, not through h11: mirror its states by hand.
                connection = h11.Connection(h11.SERVER)
                request, body = None, b""
            else:
                return

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        port = listener.socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp", seen, hung_up
        nursery.cancel_scope.cancel()


PAUSE = b"<pause>"


def listed(seen: Seen) -> bytes:
    assert seen.body is not None
    return ok({"jsonrpc": "2.0", "id": seen.body["id"], "result": {"tools": []}})


def listed_as_events(seen: Seen) -> bytes:
    """An event stream whose end is in the same segment as the answer: read to its end."""
    assert seen.body is not None
    return sse({"jsonrpc": "2.0", "id": seen.body["id"], "result": {"tools": []}})


@pytest.mark.parametrize("reply", [listed, listed_as_events], ids=["json", "event-stream"])
async def test_requests_reuse_an_idle_connection(reply: Reply) -> None:
    async with keepalive_server(reply) as (url, seen, _), gated(url) as client:
        for n in range(2, 6):
            await client.write({**LIST, "id": n})
            assert (await client.message())["id"] == n
    assert [number for number, _ in seen] == [0, 0, 0, 0]
    assert all("connection" not in s.headers for _, s in seen)


async def test_an_idle_connection_the_server_closed_is_not_used() -> None:
    """The server hangs up after its first response, as on an idle timeout: the probe sees
    it and the next request goes on a new connection; nothing is sent twice."""
    async with keepalive_server(
        listed, hang_up=lambda s: s.body is not None and s.body["id"] == 2
    ) as (
        url,
        seen,
        hung_up,
    ):
        async with gated(url) as client:
            await client.write(LIST)
            assert (await client.message())["id"] == 2
            await hung_up.wait()
            await trio.sleep(0.05)  # its FIN reaches the gate's socket
            await client.write({**LIST, "id": 3})
            answer = await client.message()
    assert answer == {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}
    assert [(number, s.body["id"] if s.body else None) for number, s in seen] == [(0, 2), (1, 3)]


async def test_the_pool_keeps_a_bounded_number_of_idle_connections_for_a_bounded_time() -> None:
    requests = MAX_IDLE + 4
    async with keepalive_server(listed, hold=requests) as (url, seen, _):
        async with open_streamable_upstream(UpstreamUrl.parse(url), max_message_bytes=4096) as up:
            with trio.fail_after(WAIT):
                for n in range(requests):  # all in flight at once: one connection each
                    await up.send_stream.send_all(json.dumps({**LIST, "id": n}).encode() + b"\n")
                answers = [
                    json.loads(await up.receive_stream.receive_some()) for _ in range(requests)
                ]
                assert sorted(a["id"] for a in answers) == list(range(requests))
                await trio.testing.wait_all_tasks_blocked(0.01)  # the POSTs' tasks are done
                assert not up.posts
                assert (up.pool.opened, up.pool.idle) == (requests, MAX_IDLE)
                assert len({number for number, _ in seen}) == requests
                # One more: an idle one carries it.
                await up.send_stream.send_all(json.dumps({**LIST, "id": 99}).encode() + b"\n")
                assert json.loads(await up.receive_stream.receive_some())["id"] == 99
                assert (up.pool.opened, up.pool.reused) == (requests, 1)
                # Idle for longer than the pool keeps them: a new connection.
                up.pool.max_age = -1.0
                await up.send_stream.send_all(json.dumps({**LIST, "id": 100}).encode() + b"\n")
                assert json.loads(await up.receive_stream.receive_some())["id"] == 100
                assert up.pool.opened == requests + 1
                await trio.testing.wait_all_tasks_blocked(0.01)
                assert up.pool.idle == 1  # the old ones were closed when passed over


async def test_a_kept_alive_connection_does_not_wait_for_a_delayed_acknowledgement() -> None:
    """A server with Nagle's algorithm on writes a response's head, then its body: the body
    waits until the head is acknowledged, which a delayed acknowledgement holds for ~40 ms
    on every reused connection unless the gate acknowledges at once (TCP_QUICKACK)."""
    async with keepalive_server(listed, nagle=True) as (url, seen, _), gated(url) as client:
        await client.write(LIST)
        await client.message()
        start = time.monotonic()
        for n in range(3, 23):
            await client.write({**LIST, "id": n})
            assert (await client.message())["id"] == n
        took = time.monotonic() - start
    assert {number for number, _ in seen} == {0}
    assert took < 0.4, f"20 requests took {took:.3f} s"  # 0.8 s or more when each waits


async def test_an_answered_stream_frees_its_id_and_keeps_its_connection() -> None:
    """The answer passes at once; the stream's end comes later: the connection is kept for
    the next request, and the id is free again as soon as it was answered."""

    def reply(seen: Seen) -> bytes:
        assert seen.body is not None
        answer = {"jsonrpc": "2.0", "id": seen.body["id"], "result": {"tools": []}}
        stream = b"data: " + json.dumps(answer).encode() + b"\n\n"
        head = stream_head(len(stream) + 2)
        return head + stream + PAUSE + b"\n\n"  # the stream ends 20 ms later

    answer = {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}
    async with keepalive_server(reply) as (url, seen, _), gated(url) as client:
        await client.write(LIST)
        assert await client.message() == answer
        await client.write(LIST)  # the same id at once: free (its first stream has not ended)
        assert await client.message() == answer
        await trio.sleep(0.1)  # both streams ended: their connections are idle
        await client.write(LIST)
        assert await client.message() == answer
    assert [number for number, _ in seen] in ([0, 1, 0], [0, 1, 1])


@pytest.mark.parametrize("parsed", [False, True], ids=["string", "UpstreamUrl"])
async def test_serve_mcp_gate_takes_a_url_as_its_upstream(parsed: bool) -> None:
    client_send, client_in = trio.testing.memory_stream_one_way_pair()
    client_out, client_recv = trio.testing.memory_stream_one_way_pair()
    statuses: list[int | None] = []
    with trio.fail_after(WAIT):
        async with scripted_server(lambda seen: ok(LISTED)) as (url, seen):
            upstream = UpstreamUrl.parse(url) if parsed else url
            async with open_broker(store=MemoryStore()) as broker, trio.open_nursery() as nursery:

                async def serve() -> None:
                    gate = serve_mcp_gate(
                        broker, upstream, client_in=client_in, client_out=client_out
                    )
                    statuses.append(await gate)

                nursery.start_soon(serve)
                client = Peer(client_send, client_recv)
                await client.write(LIST)
                assert await client.message() == LISTED
                await client_send.aclose()
    assert statuses == [None]
    assert [s.body for s in seen] == [LIST]


@pytest.mark.parametrize(
    ("upstream", "said"),
    [([], "command must name the MCP server to start"), ("ftp://x/", "http:// or https://")],
)
async def test_serve_mcp_gate_refuses_an_upstream_that_names_no_server(
    upstream: list[str] | str, said: str
) -> None:
    async with open_broker(store=MemoryStore()) as broker:
        with pytest.raises(ValueError, match=said):
            await serve_mcp_gate(
                broker,
                upstream,
                client_in=trio.testing.MemoryReceiveStream(),
                client_out=trio.testing.MemorySendStream(),
            )
