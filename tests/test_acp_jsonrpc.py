"""JSON-RPC 2.0 over lines: both directions, every standard error, cancellation, teardown."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.acp import (
    CANCEL_REQUEST_METHOD,
    ConnectionClosed,
    Direction,
    ErrorCode,
    FrameRecorder,
    JsonRpcConnection,
    JsonRpcError,
    PromptRequest,
    params_from_wire,
)

from .acp_schema import validate_value


@attrs.define(eq=False)
class Peer:
    """The other end, played by the test: raw bytes in, parsed lines out."""

    stream: trio.StapledStream[Any, Any]
    buffer: bytearray = attrs.field(factory=bytearray)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send(self, message: object) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some()
            if not chunk:
                raise EOFError("the connection closed its send side")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        message: dict[str, Any] = json.loads(line)
        return message

    async def receive_all(self) -> list[dict[str, Any]]:
        """Every remaining line, until the connection closes its side."""
        messages = []
        with contextlib.suppress(EOFError):
            while True:
                messages.append(await self.receive())
        assert not self.buffer, f"a partial line was left: {bytes(self.buffer)!r}"
        return messages

    async def close(self) -> None:
        await self.stream.send_stream.aclose()


def make(
    **settings: Any,
) -> tuple[JsonRpcConnection, Peer, FrameRecorder]:
    ours, theirs = trio.testing.memory_stream_pair()
    recorder = FrameRecorder()
    conn = JsonRpcConnection(send_stream=ours, receive_stream=ours, on_frame=recorder, **settings)
    return conn, Peer(theirs), recorder


@asynccontextmanager
async def serving(conn: JsonRpcConnection, recorder: FrameRecorder) -> AsyncIterator[None]:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            yield
            await conn.aclose("test over")
    # Whatever the test did, every error we sent must be a schema-valid ACP error object.
    for message in recorder.sent:
        if "error" in message:
            validate_value("Error", message["error"])


async def echo(params: dict[str, Any]) -> Any:
    await trio.lowlevel.checkpoint()
    return {"echo": params}


def error_of(message: dict[str, Any]) -> tuple[object, int]:
    assert message["jsonrpc"] == "2.0"
    assert set(message) == {"jsonrpc", "id", "error"}
    return message["id"], message["error"]["code"]


# -- requests and notifications --------------------------------------------------------------


@pytest.mark.parametrize("request_id", [1, "abc", 0, None])
async def test_a_peer_request_is_answered_with_its_id(request_id: object) -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": request_id, "method": "echo", "params": {"a": 1}})
        assert await peer.receive() == {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"echo": {"a": 1}},
        }


async def test_absent_or_null_params_reach_the_handler_as_an_empty_object() -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo"})
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": None})
        assert (await peer.receive())["result"] == {"echo": {}}
        assert (await peer.receive())["result"] == {"echo": {}}


async def test_our_requests_count_ids_from_zero_and_resolve_by_id() -> None:
    conn, peer, recorder = make()
    results: dict[str, Any] = {}

    async def ask(name: str) -> None:
        results[name] = await conn.request("client/thing", {"name": name})

    async with serving(conn, recorder):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, "second")
            first, second = await peer.receive(), await peer.receive()
            assert first == {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "client/thing",
                "params": {"name": "first"},
            }
            assert second["id"] == 1
            # Answered out of order: each waiter gets its own result.
            await peer.send({"jsonrpc": "2.0", "id": 1, "result": "two"})
            await peer.send({"jsonrpc": "2.0", "id": 0, "result": "one"})
    assert results == {"first": "one", "second": "two"}


async def test_an_error_response_raises_json_rpc_error() -> None:
    conn, peer, recorder = make()
    async with serving(conn, recorder):
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                request = await peer.receive()
                error = {"code": -32002, "message": "no such session", "data": {"x": 1}}
                await peer.send({"jsonrpc": "2.0", "id": request["id"], "error": error})

            nursery.start_soon(answer)
            with pytest.raises(JsonRpcError, match=r"^no such session$") as info:
                await conn.request("session/x", {})
    assert (info.value.code, info.value.data) == (-32002, {"x": 1})


async def test_a_malformed_response_fails_the_request_it_answers() -> None:
    conn, peer, recorder = make()
    async with serving(conn, recorder):
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                request = await peer.receive()
                await peer.send({"jsonrpc": "1.0", "id": request["id"], "result": {}})

            nursery.start_soon(answer)
            with pytest.raises(JsonRpcError, match=r'^invalid response: jsonrpc must be "2.0"$'):
                await conn.request("session/x", {})


async def test_notifications_both_ways() -> None:
    conn, peer, recorder = make()
    seen: list[dict[str, Any]] = []
    conn.on_notification("session/cancel", seen.append)
    async with serving(conn, recorder):
        await peer.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}
        )
        await peer.send({"jsonrpc": "2.0", "method": "session/cancel"})
        await peer.send({"jsonrpc": "2.0", "method": "nobody/listens", "params": {}})
        await conn.notify("session/update", {"sessionId": "s"})
        assert await peer.receive() == {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "s"},
        }
        await trio.testing.wait_all_tasks_blocked()
    assert seen == [{"sessionId": "s"}, {}]


async def test_a_failing_notification_handler_is_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)

    def boom(params: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    conn.on_notification("boom", boom)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "method": "boom"})
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo"})
        assert (await peer.receive())["id"] == 1
    assert "notification handler for 'boom' failed" in caplog.text


async def test_a_slow_handler_does_not_block_a_fast_one() -> None:
    conn, peer, recorder = make()
    release = trio.Event()

    async def slow(params: dict[str, Any]) -> str:
        await release.wait()
        return "slow"

    conn.on_request("slow", slow)
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo"})
        assert (await peer.receive())["id"] == 2
        release.set()
        assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": "slow"}


async def test_handlers_beyond_the_limit_are_refused_at_once() -> None:
    conn, peer, recorder = make(max_concurrent_handlers=1)
    release = trio.Event()

    async def slow(params: dict[str, Any]) -> str:
        await release.wait()
        return "done"

    conn.on_request("slow", slow)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "slow"})
        refused = await peer.receive()
        assert error_of(refused) == (2, ErrorCode.INTERNAL_ERROR)
        assert refused["error"]["message"] == (
            "too many concurrent requests: at most max_concurrent_handlers=1 are handled at"
            " once; wait for an answer"
        )
        release.set()
        assert (await peer.receive())["result"] == "done"
        await peer.send({"jsonrpc": "2.0", "id": 3, "method": "slow"})
        assert (await peer.receive())["id"] == 3


# -- standard errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"{nope\n", b'{"jsonrpc": "2.0", "id": 1\n', b"\xff\xfe\n", b"NaN\n", b"[" * 100_000 + b"\n"],
)
async def test_unparseable_lines_get_a_parse_error_and_the_connection_goes_on(raw: bytes) -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send_raw(raw)
        reply = await peer.receive()
        assert error_of(reply) == (None, ErrorCode.PARSE_ERROR)
        assert reply["error"]["message"] == (
            "parse error: each line must be one JSON value in UTF-8, without NaN or Infinity"
        )
        await peer.send({"jsonrpc": "2.0", "id": 7, "method": "echo"})
        assert (await peer.receive())["id"] == 7


@pytest.mark.parametrize(
    ("message", "expected_id", "text"),
    [
        (
            {"id": 1, "method": "echo"},
            1,
            'invalid request: jsonrpc must be "2.0": acp speaks json-rpc 2.0 only',
        ),
        (
            {"jsonrpc": "1.0", "id": 1, "method": "echo"},
            1,
            'invalid request: jsonrpc must be "2.0": acp speaks json-rpc 2.0 only',
        ),
        (
            {"jsonrpc": "2.0", "id": {"a": 1}, "method": "echo"},
            None,
            "invalid request: id must be a string, an integer or null, got object",
        ),
        (
            {"jsonrpc": "2.0", "id": 1.5, "method": "echo"},
            None,
            "invalid request: id must be a string, an integer or null, got number",
        ),
        (
            {"jsonrpc": "2.0", "id": True, "method": "echo"},
            None,
            "invalid request: id must be a string, an integer or null, got boolean",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": 5},
            1,
            "invalid request: method must be a string",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": "x"},
            1,
            "invalid request: params must be an object, got string",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "echo", "extra": 1},
            1,
            "invalid request: unexpected members ['extra']: a message may carry only id,"
            " jsonrpc, method, params",
        ),
        (
            {"jsonrpc": "2.0", "method": "echo", "params": 3},
            None,
            "invalid request: params must be an object, got number",
        ),
        (
            [{"jsonrpc": "2.0", "id": 1, "method": "echo"}],
            None,
            "invalid request: a message must be a JSON object, got a batch (array);"
            " acp does not use batches",
        ),
        (
            42,
            None,
            "invalid request: a message must be a JSON object, got number; acp does not use"
            " batches",
        ),
        (
            {"jsonrpc": "2.0"},
            None,
            "invalid request: a message needs a method (request or notification) or an id with"
            " a result or an error (response)",
        ),
    ],
)
async def test_invalid_requests_get_invalid_request(
    message: object, expected_id: object, text: str
) -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send(message)
        reply = await peer.receive()
        assert error_of(reply) == (expected_id, ErrorCode.INVALID_REQUEST)
        assert reply["error"]["message"] == text
        await peer.send({"jsonrpc": "2.0", "id": 9, "method": "echo"})
        assert (await peer.receive())["id"] == 9


async def test_unknown_methods_get_method_not_found() -> None:
    conn, peer, recorder = make()
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 3, "method": "session/load", "params": {}})
        reply = await peer.receive()
        assert error_of(reply) == (3, ErrorCode.METHOD_NOT_FOUND)
        assert reply["error"]["message"] == "method not found: 'session/load'"


async def test_invalid_params_name_the_path() -> None:
    conn, peer, recorder = make()

    async def prompt(params: dict[str, Any]) -> Any:
        request = params_from_wire(PromptRequest, params)
        await trio.lowlevel.checkpoint()
        return {"n": len(request.prompt)}

    conn.on_request("session/prompt", prompt)
    async with serving(conn, recorder):
        params = {"sessionId": "s", "prompt": [{"type": "text", "text": 5}, {"type": "video"}]}
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": params})
        reply = await peer.receive()
        assert error_of(reply) == (1, ErrorCode.INVALID_PARAMS)
        assert reply["error"]["data"] == {
            "errors": [
                "expected a string, got number @ $.prompt[0].text",
                "type 'video' is not a known content block: expected one of resource_link, text"
                " @ $.prompt[1]",
            ]
        }
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": [1]})
        reply = await peer.receive()
        assert error_of(reply) == (2, ErrorCode.INVALID_PARAMS)
        assert reply["error"]["message"] == (
            "invalid params: acp passes params as a JSON object, got an array"
        )


async def test_a_crashing_handler_gets_internal_error_and_the_connection_survives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn, peer, recorder = make()

    async def crash(params: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("secret detail")

    conn.on_request("crash", crash)
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "crash"})
        reply = await peer.receive()
        assert reply == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32603, "message": "internal error"},
        }
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo"})
        assert (await peer.receive())["id"] == 2
    assert "handler for crash (id 1) failed" in caplog.text
    assert "secret detail" in caplog.text  # logged for us, never sent to the peer


async def test_a_handler_error_and_an_unencodable_result() -> None:
    conn, peer, recorder = make()

    async def refuse(params: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        raise JsonRpcError(ErrorCode.AUTH_REQUIRED, "authenticate first", {"methods": []})

    async def unencodable(params: dict[str, Any]) -> object:
        await trio.lowlevel.checkpoint()
        return {"x": object()}

    conn.on_request("refuse", refuse)
    conn.on_request("bad", unencodable)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "refuse"})
        assert (await peer.receive())["error"] == {
            "code": -32000,
            "message": "authenticate first",
            "data": {"methods": []},
        }
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "bad"})
        assert error_of(await peer.receive()) == (2, ErrorCode.INTERNAL_ERROR)


@pytest.mark.parametrize("chunk", [7, 100, 5000])
async def test_an_over_long_line_is_skipped_and_answered(chunk: int) -> None:
    conn, peer, recorder = make(max_line_bytes=1000)
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        long_line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "echo", "x": "y" * 3000})
        data = (
            long_line.encode()
            + b"\n"
            + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "echo"}).encode()
            + b"\n"
        )
        for start in range(0, len(data), chunk):
            await peer.send_raw(data[start : start + chunk])
        reply = await peer.receive()
        assert error_of(reply) == (None, ErrorCode.INVALID_REQUEST)
        assert reply["error"]["message"] == (
            "invalid request: a line may hold at most max_line_bytes=1000 bytes; the message"
            " was skipped, send a smaller one"
        )
        assert (await peer.receive())["id"] == 2


async def test_an_over_long_line_is_answered_before_its_newline_arrives() -> None:
    # The reader gives up on the line as soon as it is too long: it never buffers the rest.
    conn, peer, recorder = make(max_line_bytes=100)
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send_raw(b"x" * 500)
        assert error_of(await peer.receive()) == (None, ErrorCode.INVALID_REQUEST)
        await peer.send_raw(b"y" * 10_000 + b'\n{"jsonrpc":"2.0","id":3,"method":"echo"}\n')
        assert (await peer.receive())["id"] == 3


async def test_crlf_and_blank_lines_are_accepted() -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send_raw(b'\n\r\n   \n{"jsonrpc":"2.0","id":1,"method":"echo"}\r\n')
        assert (await peer.receive())["id"] == 1


# -- responses we did not ask for ------------------------------------------------------------


async def test_responses_to_unknown_or_answered_ids_are_ignored_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 41, "result": {}})
        await peer.send({"jsonrpc": "2.0", "id": {"x": 1}, "result": {}})
        async with trio.open_nursery() as nursery:

            async def answer_twice() -> None:
                request = await peer.receive()
                await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": "first"})
                await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": "second"})

            nursery.start_soon(answer_twice)
            assert await conn.request("client/x", {}) == "first"
        await peer.send({"jsonrpc": "2.0", "id": 5, "method": "echo"})
        assert (await peer.receive())["id"] == 5  # still alive, and nothing else was sent
    assert "response to unknown request id 41 ignored" in caplog.text
    assert "response to unknown request id 0 ignored" in caplog.text  # the duplicate
    assert "response with an invalid id (object) ignored" in caplog.text


# -- closing ---------------------------------------------------------------------------------


async def test_end_of_input_fails_outstanding_requests_and_ends_serve() -> None:
    conn, peer, _recorder = make()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            async with trio.open_nursery() as inner:

                async def hang_up() -> None:
                    await peer.receive()
                    await peer.close()

                inner.start_soon(hang_up)
                with pytest.raises(ConnectionClosed) as info:
                    await conn.request("client/x", {})
        # serve returned by itself (the outer nursery exited without cancelling it).
    assert info.value.reason == "end of input: the peer closed its side of the connection"
    assert str(info.value) == (
        "the acp connection is closed (end of input: the peer closed its side of the"
        " connection): its requests cannot be answered any more; open a new connection"
    )
    assert conn.closed
    with pytest.raises(ConnectionClosed):
        await conn.notify("x", {})
    assert await peer.stream.receive_some() == b""  # serve closed our streams


async def test_teardown_order_on_aclose() -> None:
    conn, peer, _recorder = make()
    steps: list[str] = []
    handler_started = trio.Event()

    async def prompt(params: dict[str, Any]) -> str:
        handler_started.set()
        try:
            await conn.request("session/request_permission", {})
        except ConnectionClosed:
            steps.append("outstanding request failed")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            steps.append(f"handler cancelled (closed={conn.closed})")
            raise
        return "never"

    conn.on_request("session/prompt", prompt)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            await peer.send({"jsonrpc": "2.0", "id": 1, "method": "session/prompt"})
            await handler_started.wait()
            assert (await peer.receive())["method"] == "session/request_permission"
            await conn.aclose("the test is done")
            steps.append("aclose returned")
    assert steps == [
        "outstanding request failed",
        "handler cancelled (closed=True)",
        "aclose returned",
    ]
    assert conn.close_reason == "the test is done"
    assert await peer.receive_all() == []  # the handler's response was never sent


async def test_cancelling_serve_fails_outstanding_requests() -> None:
    conn, peer, _recorder = make()
    outcome: list[BaseException] = []

    async def ask() -> None:
        try:
            await conn.request("client/x", {})
        except ConnectionClosed as exc:
            outcome.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.serve)
                outer.start_soon(ask)
                await peer.receive()
                nursery.cancel_scope.cancel(reason="test cancels serve")
    assert len(outcome) == 1
    assert conn.close_reason == "serve() was cancelled or failed"


async def test_lifecycle_misuse_is_refused() -> None:
    conn, _peer, _recorder = make()
    with pytest.raises(
        RuntimeError,
        match=r"^request\(\) needs a serving connection: start it with"
        r" `await nursery.start\(conn.serve\)` first$",
    ):
        await conn.request("x", {})
    await conn.aclose()
    with pytest.raises(
        RuntimeError,
        match=r"^serve\(\) cannot run on a closed connection: a JsonRpcConnection serves once;"
        r" create a new one$",
    ):
        await conn.serve()
    with pytest.raises(ConnectionClosed):
        await conn.request("x", {})


def test_settings_and_registrations_are_checked() -> None:
    ours, _ = trio.testing.memory_stream_pair()
    with pytest.raises(
        ValueError,
        match=r"^max_line_bytes must be a positive integer, got 0: pass at least 1"
        r" \(the default is 4194304\)$",
    ):
        JsonRpcConnection(send_stream=ours, receive_stream=ours, max_line_bytes=0)
    with pytest.raises(ValueError, match=r"^cancel_grace must be a number of seconds"):
        JsonRpcConnection(send_stream=ours, receive_stream=ours, cancel_grace=-1)
    conn = JsonRpcConnection(send_stream=ours, receive_stream=ours)
    conn.on_request("a", echo)
    with pytest.raises(ValueError, match=r"^on_notification: method 'a' already has a handler"):
        conn.on_notification("a", lambda params: None)
    with pytest.raises(ValueError, match=r"^on_request: \$/cancel_request is handled by the"):
        conn.on_request(CANCEL_REQUEST_METHOD, echo)


# -- cancellation ----------------------------------------------------------------------------


async def test_caller_cancellation_sends_cancel_request_and_drops_the_late_response(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    conn, peer, recorder = make()
    caplog.set_level(logging.DEBUG, logger="broker.acp")
    async with serving(conn, recorder):
        with trio.move_on_after(5):
            await conn.request("session/request_permission", {"sessionId": "s"})
        request = await peer.receive()
        assert request["id"] == 0
        assert await peer.receive() == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": 0},
        }
        await peer.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "x"}}})
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                request = await peer.receive()
                await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": "ok"})

            nursery.start_soon(answer)
            assert await conn.request("again", {}) == "ok"
    assert "late response to abandoned request 0 dropped" in caplog.text
    assert "unknown request id" not in caplog.text


async def test_a_cancel_notice_that_cannot_be_queued_is_dropped_after_the_grace(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    ours, _theirs = trio.testing.lockstep_stream_pair()  # nobody reads: the writer blocks
    conn = JsonRpcConnection(send_stream=ours, receive_stream=ours, cancel_grace=2.0)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            for _ in range(16):
                await conn.notify("filler", {})
            await trio.testing.wait_all_tasks_blocked()  # the writer holds one in send_all
            start = trio.current_time()
            with trio.move_on_after(1):
                await conn.request("client/x", {})  # queued as the 16th: the queue is full
            assert trio.current_time() - start == pytest.approx(3.0)  # 1 s, then the grace
            await conn.aclose()
    assert "$/cancel_request for request 0 dropped: the write queue stayed full for 2.0s" in (
        caplog.text
    )


async def test_cancellation_before_the_request_is_queued_sends_nothing() -> None:
    conn, peer, recorder = make()
    async with serving(conn, recorder):
        with trio.CancelScope() as scope:
            scope.cancel()
            await conn.request("client/x", {})
        await conn.notify("marker", {})
        assert (await peer.receive())["method"] == "marker"


async def test_a_peer_cancel_request_cancels_our_handler() -> None:
    conn, peer, recorder = make()
    cancelled = trio.Event()

    async def prompt(params: dict[str, Any]) -> str:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    conn.on_request("session/prompt", prompt)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": "p1", "method": "session/prompt"})
        await trio.testing.wait_all_tasks_blocked()
        for unknown in ({"requestId": "other"}, {}, {"requestId": [1]}):
            await peer.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": unknown})
        await peer.send(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "p1"}}
        )
        reply = await peer.receive()
        assert reply == {
            "jsonrpc": "2.0",
            "id": "p1",
            "error": {
                "code": -32800,
                "message": "request cancelled: the peer sent $/cancel_request",
            },
        }
        assert cancelled.is_set()


# -- writing ---------------------------------------------------------------------------------


async def test_concurrent_big_writes_never_interleave() -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()
    conn = JsonRpcConnection(send_stream=ours, receive_stream=ours)
    payloads = {f"n{i}": str(i) * (50_000 + i) for i in range(40)}
    received: list[dict[str, Any]] = []
    all_read = trio.Event()

    async def read_all() -> None:
        buffer = b""
        while len(received) < len(payloads):
            buffer += await theirs.receive_some(997)
            *lines, buffer = buffer.split(b"\n")
            received.extend(json.loads(line) for line in lines)
        all_read.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)
            nursery.start_soon(read_all)
            async with trio.open_nursery() as writers:
                for name, text in payloads.items():
                    writers.start_soon(conn.notify, "session/update", {"name": name, "x": text})
            await all_read.wait()
            await conn.aclose()
    assert {m["params"]["name"]: m["params"]["x"] for m in received} == payloads


async def test_the_recorder_sees_every_frame_in_order() -> None:
    conn, peer, recorder = make()
    conn.on_request("echo", echo)
    async with serving(conn, recorder):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo"})
        await peer.receive()
        await peer.send_raw(b"garbage\n")
        await peer.receive()
        await conn.notify("n", {})
        await peer.receive()
    assert [
        (f.direction, f.message.get("id"), f.message.get("method")) for f in recorder.frames
    ] == [
        (Direction.RECEIVED, 1, "echo"),
        (Direction.SENT, 1, None),
        (Direction.SENT, None, None),  # the parse error: garbage is not a frame
        (Direction.SENT, None, "n"),
    ]
    assert recorder.received == [{"jsonrpc": "2.0", "id": 1, "method": "echo"}]


# -- garbage never crashes serve -------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_keys = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "x"])
_frames = st.dictionaries(
    _keys,
    st.one_of(
        st.just("2.0"),
        st.sampled_from(["echo", CANCEL_REQUEST_METHOD, "unknown"]),
        st.integers(-2, 2),
        st.builds(lambda rid: {"requestId": rid}, st.integers(0, 2)),
        st.builds(lambda code: {"code": code, "message": "m"}, st.integers(-32800, 0)),
        _json,
    ),
    max_size=6,
)
_lines = st.lists(
    st.one_of(
        st.binary(max_size=64),
        _frames.map(lambda frame: json.dumps(frame).encode()),
        _json.map(lambda value: json.dumps(value).encode()),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines, newline=st.sampled_from([b"\n", b"\r\n", b""]))
async def test_garbage_is_answered_or_ignored_never_raised(
    lines: list[bytes], newline: bytes
) -> None:
    conn, peer, _recorder = make(max_line_bytes=200)
    conn.on_request("echo", echo)
    conn.on_notification("note", lambda params: None)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.serve)  # must return normally, never raise

            async def pending_request() -> None:
                # Garbage may answer it (id 0) or not; the connection's end must release it.
                with contextlib.suppress(ConnectionClosed, JsonRpcError):
                    await conn.request("client/x", {})

            nursery.start_soon(pending_request)

            async def feed() -> None:
                await peer.send_raw(newline.join(lines) + b"\n")
                await peer.close()

            nursery.start_soon(feed)
            replies = await peer.receive_all()
    assert conn.closed
    for reply in replies:
        assert reply["jsonrpc"] == "2.0"
        if "error" in reply:
            validate_value("Error", reply["error"])


async def test_on_receive_runs_in_wire_order_before_a_following_notification() -> None:
    """A request's on_receive hook sees it before the notification read right after it, even
    though the request's handler task may start later (a cancel right behind a prompt)."""
    conn, peer, recorder = make()
    seen: list[str] = []

    async def slow(params: dict[str, Any]) -> Any:
        seen.append(f"handler {params['n']}")
        await trio.lowlevel.checkpoint()
        return {}

    def boom(params: dict[str, Any]) -> None:
        raise RuntimeError("a broken hook is contained")

    conn.on_request("work", slow, on_receive=lambda params: seen.append(f"received {params['n']}"))
    conn.on_request("other", slow, on_receive=boom)
    conn.on_notification("poke", lambda params: seen.append("notification"))
    async with serving(conn, recorder):
        frames = [
            {"jsonrpc": "2.0", "id": 1, "method": "work", "params": {"n": 1}},
            {"jsonrpc": "2.0", "method": "poke"},
            {"jsonrpc": "2.0", "id": 2, "method": "other", "params": {"n": 2}},
        ]
        await peer.send_raw(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        answers = {(await peer.receive())["id"], (await peer.receive())["id"]}
    assert answers == {1, 2}
    assert seen.index("received 1") < seen.index("notification")
    assert "handler 2" in seen
