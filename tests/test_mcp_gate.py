"""The MCP gate's relay (``broker/mcp/_gate.py``) driven frame by frame in one process: the test
plays the MCP client and the MCP server over memory streams, so every byte each side receives
is checked, and the attacks (frames that try to smuggle a ``tools/call`` past the gate, forged
answers, reused ids) are exact."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    Event,
    MemoryStore,
    Outcome,
    Source,
    open_broker,
)
from broker.mcp import GateRules, refusal_text, relay
from broker.mcp._gate import MAX_HELD

WAIT = 5


@attrs.define(eq=False)
class Peer:
    """One side of the gate as the test plays it: writes lines, reads whole lines."""

    send: trio.testing.MemorySendStream
    recv: trio.testing.MemoryReceiveStream
    buf: bytearray = attrs.field(factory=bytearray)
    wait: float = WAIT

    async def write(self, frame: bytes | dict[str, Any]) -> None:
        data = frame if isinstance(frame, bytes) else json.dumps(frame).encode()
        await self.send.send_all(data + b"\n")

    async def line(self) -> bytes:
        with trio.fail_after(self.wait):
            while b"\n" not in self.buf:
                chunk = await self.recv.receive_some()
                if not chunk:
                    raise EOFError("the gate closed this side")
                self.buf += chunk
        end = self.buf.index(b"\n")
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        return line

    async def message(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(await self.line())
        return value

    async def rest(self) -> list[bytes]:
        """Every line until the gate closes this side."""
        lines = []
        with contextlib.suppress(EOFError):
            for _ in range(10_000):
                lines.append(await self.line())
        return lines


@attrs.define(eq=False)
class Wire:
    store: MemoryStore
    client: Peer
    server: Peer
    done: trio.Event

    def events(self) -> list[Event]:
        (session_id,) = self.store.session_ids()
        return self.store.read_nowait(session_id)

    def pairs(self) -> list[tuple[ApprovalAsked, ApprovalDecided]]:
        events = self.events()
        asked = {e.id: e for e in events if isinstance(e, ApprovalAsked)}
        decided = [e for e in events if isinstance(e, ApprovalDecided)]
        assert sorted(asked) == sorted(d.id for d in decided), "every question is a pair"
        return [(asked[d.id], d) for d in decided]

    async def hang_up(self) -> list[bytes]:
        """The client closes its stream; returns what the server received after that."""
        await self.client.send.aclose()
        with trio.fail_after(WAIT):
            await self.done.wait()
        return await self.server.rest()


@asynccontextmanager
async def gate(
    rules: GateRules | None = None,
    *,
    max_line_bytes: int = 64 * 1024,
    deadline: float = 60,
    server_deadline: float = 600,
    wait: float = WAIT,
) -> AsyncIterator[Wire]:
    store = MemoryStore()
    client_send, client_in = trio.testing.memory_stream_one_way_pair()
    client_out, client_recv = trio.testing.memory_stream_one_way_pair()
    upstream_out, upstream_recv = trio.testing.memory_stream_one_way_pair()
    upstream_send, upstream_in = trio.testing.memory_stream_one_way_pair()
    done = trio.Event()
    async with open_broker(store=store) as broker, trio.open_nursery() as nursery:

        async def run() -> None:
            await relay(
                broker,
                client_in=client_in,
                client_out=client_out,
                upstream_in=upstream_in,
                upstream_out=upstream_out,
                rules=rules,
                deadline=deadline,
                server_deadline=server_deadline,
                max_line_bytes=max_line_bytes,
            )
            done.set()

        nursery.start_soon(run)
        wire = Wire(
            store=store,
            client=Peer(client_send, client_recv, wait=wait),
            server=Peer(upstream_send, upstream_recv, wait=wait),
            done=done,
        )
        with trio.fail_after(wait * 2):
            yield wire
            if not done.is_set():
                await wire.hang_up()


def call(request_id: object, name: str, arguments: object = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def refused(request_id: object, name: str, outcome: Outcome) -> dict[str, Any]:
    text = refusal_text(name, outcome)
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": text}], "isError": True},
    }


INITIALIZE_ELICITING = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


async def test_messages_pass_both_ways_as_the_bytes_received() -> None:
    odd = b'{ "method" : "ping",  "id":7 ,"jsonrpc":"2.0", "params":{"z":1,"a":"\\u00e9"}}'
    async with gate() as wire:
        await wire.client.write(odd)
        assert await wire.server.line() == odd
        answer = b'{"id":7,"jsonrpc":"2.0","result":{ }}'
        await wire.server.write(answer)
        assert await wire.client.line() == answer
        # A notification and a request from the server pass unchanged too, and the client's
        # answer to that request goes back.
        note = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\\u001b[2J"}}'
        await wire.server.write(note)
        assert await wire.client.line() == note
        ask = b'{"jsonrpc":"2.0","id":"s1","method":"roots/list"}'
        await wire.server.write(ask)
        assert await wire.client.line() == ask
        reply = b'{"jsonrpc":"2.0","id":"s1","result":{"roots":[]}}'
        await wire.client.write(reply)
        assert await wire.server.line() == reply
        assert await wire.hang_up() == []
    assert wire.events()[0].TYPE == "turn/start"
    assert wire.pairs() == []


async def test_a_call_no_one_answers_is_refused_and_never_reaches_the_server() -> None:
    async with gate() as wire:
        await wire.client.write(call(3, "write_note", {"name": "a", "text": "x"}))
        assert await wire.client.message() == refused(3, "write_note", Outcome.UNAVAILABLE)
        assert await wire.hang_up() == []
    ((asked, decided),) = wire.pairs()
    assert asked.tool_name == "write_note"
    assert asked.call_id == "3"
    assert asked.reason == 'MCP tool call: write_note {"name":"a","text":"x"}'
    assert decided.outcome is Outcome.UNAVAILABLE


async def test_an_allowed_call_is_forwarded_with_the_argument_bytes_that_were_asked_about() -> None:
    arguments = {"text": 'é "q" \u202e evil\ncmd', "n": 1.5, "nested": {"b": [1, None]}}
    async with gate(GateRules(allow=["read_*", "write_*"])) as wire:
        await wire.client.write(call("c-1", "write_note", arguments))
        forwarded = await wire.server.line()
        await wire.server.write({"jsonrpc": "2.0", "id": "c-1", "result": {"content": []}})
        assert await wire.client.message() == {
            "jsonrpc": "2.0",
            "id": "c-1",
            "result": {"content": []},
        }
        assert await wire.hang_up() == []
    ((asked, decided),) = wire.pairs()
    assert decided.outcome is Outcome.ALLOWED_ONCE
    assert (decided.source, decided.answered_by, decided.rule_layer) == (
        Source.RULE,
        None,
        "session",
    )
    assert asked.call_id == "c-1"
    assert asked.reason is not None
    shown = asked.reason.removeprefix("MCP tool call: write_note ")
    assert shown.encode() in forwarded  # byte for byte, as the server reads them
    assert json.loads(forwarded)["params"]["arguments"] == arguments


async def test_a_denied_call_is_rejected_by_the_rules_before_any_question_reaches_a_person() -> (
    None
):
    async with gate(GateRules(allow=["*"], deny=["write_*"], source="rules file gate.toml")) as w:
        await w.client.write(INITIALIZE_ELICITING)
        await w.server.line()
        await w.client.write(call(4, "write_note", {}))
        assert await w.client.message() == refused(4, "write_note", Outcome.REJECTED)
        assert await w.hang_up() == []
    ((_, decided),) = w.pairs()
    assert decided.outcome is Outcome.REJECTED
    assert (decided.source, decided.rule_index, decided.answered_by) == (Source.RULE, 1, None)


SMUGGLED = [
    pytest.param(
        b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"write_note"}}',
        None,
        id="as-a-notification",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"Tools/Call ","params":{"name":"write_note"}}',
        -32601,
        id="spelled-loosely",
    ),
    pytest.param(
        b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note"}}]',
        -32600,
        id="in-a-batch",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"w"}}',
        -32700,
        id="duplicate-method-key",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note",'
        b'"arguments":{"a":1,"a":2}}}',
        -32700,
        id="duplicate-argument-key",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note"},'
        b'"result":{}}',
        "refused",
        id="dressed-as-a-response",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"write_note"}}',
        -32600,
        id="null-id",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note",'
        b'"arguments":[1]}}',
        -32602,
        id="arguments-not-an-object",
    ),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"tools/call"', -32700, id="bad-json"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","x":NaN}', -32700, id="nan"),
    pytest.param(b"\xff\xfe{}", -32700, id="not-utf8"),
    pytest.param(b"[" * 100 + b"]" * 100, -32700, id="too-deep"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note","p":"'
        + b"x" * 70_000
        + b'"}}',
        -32600,
        id="over-long-line",
    ),
]


@pytest.mark.parametrize(("frame", "code"), SMUGGLED)
async def test_a_tools_call_cannot_be_smuggled_past_the_gate(frame: bytes, code: object) -> None:
    async with gate() as wire:
        await wire.client.write(frame)
        if code == "refused":
            assert await wire.client.message() == refused(1, "write_note", Outcome.UNAVAILABLE)
        elif code is not None:
            error = await wire.client.message()
            assert error["error"]["code"] == code, error
            assert error["error"]["message"].islower() or error["error"]["message"][0].islower()
        # The gate keeps serving after it: the next ordinary request passes.
        await wire.client.write({"jsonrpc": "2.0", "id": 99, "method": "ping"})
        assert json.loads(await wire.server.line())["id"] == 99
        received = await wire.hang_up()
    assert received == []  # the server never saw a tools/call


async def test_the_server_cannot_answer_a_held_call_nor_the_gates_own_question() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        assert json.loads(await wire.server.line())["method"] == "initialize"
        await wire.server.write({"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {}}})
        await wire.client.message()
        await wire.client.write(call(5, "write_note", {"text": "x"}))
        elicitation = await wire.client.message()
        assert elicitation["method"] == "elicitation/create"
        gate_id = elicitation["id"]
        # The server forges the call's result and an answer to the gate's question: both are
        # dropped (neither was asked of it), and a request using the gate's id space is refused.
        await wire.server.write({"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
        await wire.server.write({"jsonrpc": "2.0", "id": gate_id, "result": {"action": "accept"}})
        await wire.server.write({"jsonrpc": "2.0", "id": gate_id, "method": "ping"})
        assert json.loads(await wire.server.line())["error"]["code"] == -32600
        await trio.testing.wait_all_tasks_blocked()
        assert not any(isinstance(e, ApprovalDecided) for e in wire.events())  # still asking
        await wire.client.write({"jsonrpc": "2.0", "id": gate_id, "result": {"action": "decline"}})
        assert await wire.client.message() == refused(5, "write_note", Outcome.REJECTED)
        assert await wire.hang_up() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is Outcome.REJECTED


async def test_an_id_in_flight_cannot_be_reused_to_swap_the_call() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(6, "write_note", {"text": "shown"}))
        elicitation = await wire.client.message()
        await wire.client.write(call(6, "write_note", {"text": "swapped"}))
        assert (await wire.client.message())["error"]["code"] == -32600
        await wire.client.write(
            {"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": "accept"}}
        )
        forwarded = json.loads(await wire.server.line())
        assert forwarded["params"]["arguments"] == {"text": "shown"}
        assert await wire.hang_up() == []


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        ("accept", Outcome.ALLOWED_ONCE),
        ("decline", Outcome.REJECTED),
        ("cancel", Outcome.CANCELLED),
    ],
)
async def test_elicitation_answers_map_to_outcomes(action: str, outcome: Outcome) -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(7, "write_note", {"name": "a\u202eb", "text": "x"}))
        elicitation = await wire.client.message()
        message = elicitation["params"]["message"]
        assert message.startswith('MCP tool call: write_note, arguments: {"name":"a\\u202eb"')
        assert elicitation["params"]["requestedSchema"] == {"type": "object", "properties": {}}
        await wire.client.write(
            {"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": action}}
        )
        if outcome is Outcome.ALLOWED_ONCE:
            assert json.loads(await wire.server.line())["id"] == 7
        else:
            assert await wire.client.message() == refused(7, "write_note", outcome)
        assert await wire.hang_up() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is outcome
    assert decided.answered_by == "the MCP client's user (elicitation)"


async def test_a_client_that_did_not_advertise_elicitation_is_not_asked() -> None:
    async with gate() as wire:
        initialize = json.loads(json.dumps(INITIALIZE_ELICITING))
        initialize["params"]["capabilities"] = {}
        await wire.client.write(initialize)
        await wire.server.line()
        await wire.client.write(call(8, "write_note", {}))
        assert await wire.client.message() == refused(8, "write_note", Outcome.UNAVAILABLE)


async def test_the_clients_cancellation_withdraws_the_question_and_reaches_no_one() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(9, "write_note", {}))
        elicitation = await wire.client.message()
        await wire.client.write(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        )
        # The gate withdraws its own question from the client, and answers nothing for 9.
        withdrawn = await wire.client.message()
        assert withdrawn["method"] == "notifications/cancelled"
        assert withdrawn["params"]["requestId"] == elicitation["id"]
        assert await wire.hang_up() == []
        assert wire.client.buf == bytearray()
        assert await wire.client.rest() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is Outcome.CANCELLED


async def test_the_server_exiting_answers_what_it_left_unanswered() -> None:
    async with gate(GateRules(allow=["read_*"])) as wire:
        await wire.client.write(call(10, "read_note", {}))
        await wire.server.line()
        await wire.server.send.aclose()  # the server exits without answering
        error = await wire.client.message()
        assert error["id"] == 10
        assert error["error"]["message"] == (
            "the MCP server exited before answering: see its standard error"
        )
        assert await wire.client.rest() == []
        with trio.fail_after(WAIT):
            await wire.done.wait()


async def test_the_connection_ending_settles_held_calls_cancelled() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(11, "write_note", {}))
        await wire.client.message()  # the elicitation, never answered
        assert await wire.hang_up() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is Outcome.CANCELLED
    assert wire.events()[-1].TYPE == "turn/end"


async def test_a_request_the_server_leaves_unanswered_gets_an_error_and_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with gate(GateRules(allow=["read_*"]), server_deadline=30, wait=100) as wire:
        await wire.client.write({"jsonrpc": "2.0", "id": 1, "method": "resources/list"})
        await wire.server.line()
        await trio.sleep(10)
        await wire.client.write(call(2, "read_note", {}))
        await wire.server.line()
        start = trio.current_time()
        first = await wire.client.message()
        assert trio.current_time() - start == pytest.approx(20)
        assert first["id"] == 1
        assert first["error"]["message"] == (
            "the MCP server did not answer within 30 seconds: the gate gave up on it "
            "(see --server-deadline)"
        )
        assert json.loads(await wire.server.line())["params"]["requestId"] == 1
        second = await wire.client.message()
        assert second["id"] == 2
        assert trio.current_time() - start == pytest.approx(30)
        # A late answer is dropped: the client was told already.
        await wire.server.write({"jsonrpc": "2.0", "id": 2, "result": {"content": []}})
        await wire.client.write({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        await wire.server.line()  # the cancellation of 2
        assert json.loads(await wire.server.line())["id"] == 3
        await wire.server.write({"jsonrpc": "2.0", "id": 3, "result": {}})
        assert (await wire.client.message())["id"] == 3


async def test_a_refusal_on_the_stateless_revision_says_its_result_type() -> None:
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    async with gate() as wire:
        request = call(12, "write_note", {})
        request["params"]["_meta"] = envelope
        await wire.client.write(request)
        expected = refused(12, "write_note", Outcome.UNAVAILABLE)
        expected["result"]["resultType"] = "complete"
        assert await wire.client.message() == expected
        assert await wire.hang_up() == []


async def test_what_the_server_sends_that_cannot_be_read_is_refused_and_serving_goes_on() -> None:
    async with gate(GateRules(allow=["read_*"]), max_line_bytes=2048) as wire:
        await wire.client.write(call(13, "read_note", {}))
        await wire.server.line()
        for junk in (
            b"x" * 5000,
            b"{not json",
            b'[{"jsonrpc":"2.0","id":13,"result":{}}]',
            b'{"jsonrpc":"2.0","id":13,"id":14,"result":{}}',
            b'"a string"',
            b'{"jsonrpc":"2.0","id":13}',
        ):
            await wire.server.write(junk)
        answer = b'{"jsonrpc":"2.0","id":13,"result":{"content":[]}}'
        await wire.server.write(answer)
        assert await wire.client.line() == answer  # the first thing the client hears
        told = [json.loads(line) for line in await wire.hang_up()]
    # The server is told of each, as JSON-RPC has it for a message it cannot address.
    assert [(e["id"], e["error"]["code"]) for e in told] == [(None, -32600)] + [(None, -32700)] * 5


async def test_an_elicitation_nobody_answers_in_time_is_unavailable_and_withdrawn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with gate(deadline=120, wait=500) as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(14, "write_note", {}))
        elicitation = await wire.client.message()
        start = trio.current_time()
        withdrawn = await wire.client.message()
        assert trio.current_time() - start == pytest.approx(120)
        assert withdrawn["method"] == "notifications/cancelled"
        assert withdrawn["params"]["requestId"] == elicitation["id"]
        assert await wire.client.message() == refused(14, "write_note", Outcome.UNAVAILABLE)
        # The client's late answer is dropped: nothing is asked of it any more.
        late = {"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": "accept"}}
        await wire.client.write(late)
        assert await wire.hang_up() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is Outcome.UNAVAILABLE


async def test_an_elicitation_error_drops_out_and_the_call_fails_closed() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        await wire.client.write(call(15, "write_note", {}))
        elicitation = await wire.client.message()
        error = {"code": -32600, "message": "no UI"}
        await wire.client.write({"jsonrpc": "2.0", "id": elicitation["id"], "error": error})
        assert await wire.client.message() == refused(15, "write_note", Outcome.UNAVAILABLE)
        assert await wire.hang_up() == []


async def test_calls_beyond_the_held_limit_are_refused_at_once() -> None:
    async with gate() as wire:
        await wire.client.write(INITIALIZE_ELICITING)
        await wire.server.line()
        for n in range(MAX_HELD):
            await wire.client.write(call(100 + n, "write_note", {}))
            assert (await wire.client.message())["method"] == "elicitation/create"
        await wire.client.write(call(99, "write_note", {}))
        assert await wire.client.message() == refused(99, "write_note", Outcome.UNAVAILABLE)
        assert await wire.hang_up() == []
    assert len(wire.pairs()) == MAX_HELD  # the refused one was never a question


STATELESS_ELICITING = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def stateless_call(request_id: object, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    message = call(request_id, "write_note", arguments)
    message["params"]["_meta"] = STATELESS_ELICITING
    message["params"].update(extra)
    return message


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        ("accept", Outcome.ALLOWED_ONCE),
        ("decline", Outcome.REJECTED),
        ("cancel", Outcome.CANCELLED),
    ],
)
async def test_a_stateless_client_is_asked_by_an_input_required_result(
    action: str, outcome: Outcome
) -> None:
    async with gate() as wire:
        await wire.client.write(stateless_call(20, {"text": "x"}))
        first = await wire.client.message()
        result = first["result"]
        assert first["id"] == 20
        assert result["resultType"] == "input_required"
        question = result["inputRequests"]["broker-approval"]
        assert question["method"] == "elicitation/create"
        assert question["params"]["message"].startswith(
            'MCP tool call: write_note, arguments: {"text":"x"}'
        )
        token = result["requestState"]
        # A retry that changes the call is refused; the question still waits.
        changed = stateless_call(
            21, {"text": "y"}, requestState=token, inputResponses={"broker-approval": {}}
        )
        await wire.client.write(changed)
        assert (await wire.client.message())["error"]["code"] == -32602
        responses = {"broker-approval": {"action": action}}
        await wire.client.write(
            stateless_call(22, {"text": "x"}, requestState=token, inputResponses=responses)
        )
        if outcome is Outcome.ALLOWED_ONCE:
            forwarded = json.loads(await wire.server.line())
            assert forwarded["id"] == 22
            assert forwarded["params"] == {
                "name": "write_note",
                "arguments": {"text": "x"},
                "_meta": STATELESS_ELICITING,
            }
        else:
            expected = refused(22, "write_note", outcome)
            expected["result"]["resultType"] = "complete"
            assert await wire.client.message() == expected
        assert await wire.hang_up() == []
    ((asked, decided),) = wire.pairs()
    assert asked.call_id == "20"
    assert decided.outcome is outcome


async def test_a_stale_request_state_is_refused_not_forwarded() -> None:
    async with gate() as wire:
        await wire.client.write(
            stateless_call(23, {}, requestState="broker-mcp-gate-00-state-9", inputResponses={})
        )
        assert (await wire.client.message())["error"]["code"] == -32602
        assert await wire.hang_up() == []
    assert wire.pairs() == []


async def test_the_connection_ending_settles_a_call_waiting_for_its_retry() -> None:
    async with gate() as wire:
        await wire.client.write(stateless_call(24, {}))
        assert (await wire.client.message())["result"]["resultType"] == "input_required"
        assert await wire.hang_up() == []
    ((_, decided),) = wire.pairs()
    assert decided.outcome is Outcome.CANCELLED


async def test_the_retry_a_server_asks_for_continues_the_allowed_call_unasked() -> None:
    async with gate(GateRules(allow=["read_*"])) as wire:
        await wire.client.write(
            stateless_call(30, {"text": "x"})
            | {
                "params": {
                    "name": "read_note",
                    "arguments": {"text": "x"},
                    "_meta": STATELESS_ELICITING,
                }
            }
        )
        await wire.server.line()
        needs = {
            "resultType": "input_required",
            "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "?"}}},
            "requestState": "server-state-1",
        }
        await wire.server.write({"jsonrpc": "2.0", "id": 30, "result": needs})
        assert (await wire.client.message())["result"] == needs
        retry = {
            "name": "read_note",
            "arguments": {"text": "x"},
            "inputResponses": {"q": {"action": "accept"}},
            "requestState": "server-state-1",
        }
        await wire.client.write(
            {"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": retry}
        )
        forwarded = json.loads(await wire.server.line())
        assert forwarded == {"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": retry}
        # Used once: the same state again is a new call, asked about (nobody answers here).
        await wire.client.write(
            {
                "jsonrpc": "2.0",
                "id": 32,
                "method": "tools/call",
                "params": {**retry, "name": "write_note"},
            }
        )
        assert await wire.client.message() == refused(32, "write_note", Outcome.UNAVAILABLE)
        assert await wire.hang_up() == []
    assert [d.outcome for _, d in wire.pairs()] == [Outcome.ALLOWED_ONCE, Outcome.UNAVAILABLE]


async def test_a_server_state_does_not_carry_a_different_call_past_the_gate() -> None:
    async with gate(GateRules(allow=["read_*"])) as wire:
        await wire.client.write(call(33, "read_note", {"name": "a"}))
        await wire.server.line()
        needs = {"resultType": "input_required", "requestState": "server-state-2"}
        await wire.server.write({"jsonrpc": "2.0", "id": 33, "result": needs})
        await wire.client.message()
        swapped = {
            "name": "read_note",
            "arguments": {"name": "b"},
            "requestState": "server-state-2",
        }
        await wire.client.write(
            {"jsonrpc": "2.0", "id": 34, "method": "tools/call", "params": swapped}
        )
        forwarded = json.loads(await wire.server.line())  # asked again: the rules allow read_*
        assert forwarded["id"] == 34
        assert await wire.hang_up() == []
    assert [d.outcome for _, d in wire.pairs()] == [Outcome.ALLOWED_ONCE] * 2


async def test_every_call_the_rules_allow_is_decided_by_the_rule_at_admission() -> None:
    # The rules are the session's: each call is decided before any answerer, remembered and
    # named by its rule; nothing is granted (a later call is judged by the rules again).
    async with gate(GateRules(allow=["read_*"], source="rules file gate.toml")) as wire:
        for n in (40, 41):
            await wire.client.write(call(n, "read_note", {"n": n}))
            assert json.loads(await wire.server.line())["id"] == n
            await trio.testing.wait_all_tasks_blocked()
        assert await wire.hang_up() == []
    decided = [d for _, d in wire.pairs()]
    assert [(d.source, d.remembered, d.answered_by) for d in decided] == [
        (Source.RULE, True, None)
    ] * 2
    assert not [e for e in wire.events() if isinstance(e, ApprovalGrant)]


@pytest.mark.parametrize(
    ("option", "value", "text"),
    [
        ("deadline", 0, "deadline must be between 0 and 86400 seconds, got 0"),
        (
            "server_deadline",
            86401,
            "server_deadline must be between 0 and 86400 seconds, got 86401",
        ),
        ("answer_grace", -1, "answer_grace must be between 0 and 60 seconds, got -1"),
        ("answer_grace", 61, "answer_grace must be between 0 and 60 seconds, got 61"),
        ("max_line_bytes", 1023, "max_line_bytes must be at least 1024, got 1023"),
    ],
)
async def test_relay_refuses_an_option_out_of_range_before_opening_a_session(
    option: str, value: float, text: str
) -> None:
    store = MemoryStore()
    streams = {
        name: trio.testing.memory_stream_one_way_pair()[index]
        for name, index in (
            ("client_in", 1),
            ("client_out", 0),
            ("upstream_in", 1),
            ("upstream_out", 0),
        )
    }
    with trio.fail_after(5):
        async with open_broker(store=store) as broker:
            with pytest.raises(ValueError, match=rf"^{re.escape(text)}$"):
                await relay(broker, **streams, **{option: value})  # type: ignore[arg-type]
    assert store.session_ids() == []
