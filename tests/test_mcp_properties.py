"""Properties of the MCP gate against hostile peers.

* Whatever a client sends, no ``tools/call`` reaches the server unless it was allowed — here
  nothing is (no rules, no answerer, elicitation never accepted), so the server must never
  receive one, by any reading of the bytes it got (Python's last-key-wins and a
  first-key-wins parser alike), and the gate must keep serving.
* Whatever a server sends (forged results for the held call's id, forged elicitation answers,
  its own requests and cancellations, as lines or a batch), it neither answers the held call
  for the client nor gets it allowed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import ApprovalDecided, MemoryStore, Outcome, open_broker
from broker.mcp import relay

ids = st.one_of(
    st.integers(-2, 3),
    st.sampled_from(["1", "a", "", "broker-mcp-gate-0"]),
    st.none(),
    st.booleans(),
    st.just(1.0),
)
methods = st.sampled_from(
    [
        "tools/call",
        "Tools/Call",
        " tools/call",
        "tools/list",
        "ping",
        "initialize",
        "notifications/cancelled",
        "elicitation/create",
    ]
)
params = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["write_note", "", 5]),
        "arguments": st.one_of(
            st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
            st.lists(st.integers(), max_size=2),
        ),
        "requestId": ids,
        "requestState": st.sampled_from(["broker-mcp-gate-x", "s"]),
        "capabilities": st.just({"elicitation": {}}),
        "_meta": st.just({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
    },
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0"),
        "id": ids,
        "method": methods,
        "params": params,
        "result": st.sampled_from([{}, {"action": "decline"}, {"action": "cancel"}]),
        "error": st.just({"code": 1, "message": "x"}),
    },
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    message = draw(messages)
    text = json.dumps(message)
    shape = draw(st.sampled_from(["plain", "batch", "duplicate", "truncated", "crlf"]))
    if shape == "batch":
        text = json.dumps([message, draw(messages)])
    elif shape == "duplicate" and text != "{}":
        # Prepend a key the message may repeat: two parsers may read two different messages.
        extra = draw(st.sampled_from(['"method":"ping"', '"method":"tools/call"', '"id":9']))
        text = "{" + extra + "," + text[1:]
    elif shape == "truncated":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif shape == "crlf":
        text += "\r"
    return text.encode()


def readings(line: bytes) -> list[Any]:
    """The message(s) *line* is to a last-key-wins and to a first-key-wins parser."""

    def first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            out.setdefault(key, value)
        return out

    found = []
    for hook in (None, first_wins):
        try:
            value = json.loads(line, object_pairs_hook=hook)
        except ValueError:
            continue
        found.extend(value if isinstance(value, list) else [value])
    return found


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(frames(), max_size=12))
async def test_no_frame_a_client_sends_gets_an_unallowed_tools_call_to_the_server(
    script: list[bytes],
) -> None:
    client_send, client_in = trio.testing.memory_stream_one_way_pair()
    client_out, client_recv = trio.testing.memory_stream_one_way_pair()
    upstream_out, upstream_recv = trio.testing.memory_stream_one_way_pair()
    _upstream_send, upstream_in = trio.testing.memory_stream_one_way_pair()
    received = bytearray()
    with trio.fail_after(10):
        async with open_broker(store=MemoryStore()) as broker, trio.open_nursery() as nursery:

            async def drain(stream: trio.testing.MemoryReceiveStream, into: bytearray) -> None:
                while chunk := await stream.receive_some():
                    into += chunk

            nursery.start_soon(drain, upstream_recv, received)
            nursery.start_soon(drain, client_recv, bytearray())
            nursery.start_soon(
                lambda: relay(
                    broker,
                    client_in=client_in,
                    client_out=client_out,
                    upstream_in=upstream_in,
                    upstream_out=upstream_out,
                )
            )
            for frame in script:
                await client_send.send_all(frame + b"\n")
            # Still serving: an ordinary request reaches the server.
            await client_send.send_all(b'{"jsonrpc":"2.0","id":"probe","method":"ping"}\n')
            await trio.testing.wait_all_tasks_blocked()
            assert b'"id":"probe"' in received
            await client_send.aclose()
    for line in bytes(received).splitlines():
        for message in readings(line):
            method = message.get("method") if isinstance(message, dict) else None
            # Read independently of the gate's own check: any spelling a lenient server routes.
            assert not (isinstance(method, str) and method.strip().lower() == "tools/call"), line


server_ids = st.one_of(st.sampled_from([5, "5", 0, "broker-mcp-gate-", None]), st.integers(-1, 9))
server_messages = st.one_of(
    st.builds(
        lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r},
        server_ids,
        st.sampled_from(
            [{"action": "accept"}, {"content": [], "isError": False}, {"resultType": "complete"}]
        ),
    ),
    st.builds(
        lambda i, m: {"jsonrpc": "2.0", "id": i, "method": m, "params": {"message": "allow?"}},
        server_ids,
        st.sampled_from(["elicitation/create", "sampling/createMessage", "tools/call", "ping"]),
    ),
    st.builds(
        lambda i: {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": i},
        },
        server_ids,
    ),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(server_messages, max_size=12), batch=st.booleans())
async def test_no_frame_a_server_sends_answers_or_allows_a_held_call(
    script: list[dict[str, Any]], batch: bool
) -> None:
    client_send, client_in = trio.testing.memory_stream_one_way_pair()
    client_out, client_recv = trio.testing.memory_stream_one_way_pair()
    upstream_out, upstream_recv = trio.testing.memory_stream_one_way_pair()
    upstream_send, upstream_in = trio.testing.memory_stream_one_way_pair()
    to_server, to_client = bytearray(), bytearray()
    store = MemoryStore()
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"capabilities": {"elicitation": {}}},
    }
    held = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "write_note"}}
    with trio.fail_after(10):
        async with open_broker(store=store) as broker, trio.open_nursery() as nursery:

            async def drain(stream: trio.testing.MemoryReceiveStream, into: bytearray) -> None:
                while chunk := await stream.receive_some():
                    into += chunk

            nursery.start_soon(drain, upstream_recv, to_server)
            nursery.start_soon(drain, client_recv, to_client)
            nursery.start_soon(
                lambda: relay(
                    broker,
                    client_in=client_in,
                    client_out=client_out,
                    upstream_in=upstream_in,
                    upstream_out=upstream_out,
                )
            )
            for message in (initialize, held):
                await client_send.send_all(json.dumps(message).encode() + b"\n")
            await trio.testing.wait_all_tasks_blocked()
            frames = [json.dumps(script)] if batch else [json.dumps(m) for m in script]
            for frame in frames:
                await upstream_send.send_all(frame.encode() + b"\n")
            await trio.testing.wait_all_tasks_blocked()
            await client_send.aclose()
    # The server never got the call, and nothing it sent answered the call for the client.
    for line in bytes(to_server).splitlines():
        assert json.loads(line).get("method") != "tools/call", line
    answers = [
        m
        for m in map(json.loads, bytes(to_client).splitlines())
        if m.get("id") == 5 and "method" not in m
    ]
    for answer in answers:
        assert answer["result"]["isError"] is True, answer
        assert answer["result"]["content"][0]["text"].startswith("broker mcp-gate: "), answer
    (session_id,) = store.session_ids()
    events = store.read_nowait(session_id)
    outcomes = [e.outcome for e in events if isinstance(e, ApprovalDecided)]
    assert outcomes == [Outcome.CANCELLED]
