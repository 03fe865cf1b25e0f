"""A scripted Anthropic Messages API on localhost, for driving the real Claude Code CLI offline.

``ScriptedAnthropic(turns=[...])`` is a context manager that serves ``POST /v1/messages``
(SSE streaming, ``stream: true``, and plain JSON) on ``127.0.0.1`` at a free port, in a
thread, so plain sync pytest tests can use it::

    with ScriptedAnthropic([ToolUse("echo hi > out.txt"), Text("done")]) as api:
        run = run_claude(workdir, api=api, ...)
    api.conversation_requests[1]  # the request that carried the tool_result

Which scripted turn answers a request is worked out from the request itself, not from a
counter: turn ``n`` answers the conversation request whose ``messages`` hold ``n`` assistant
messages. A retried request therefore gets the same answer again and never consumes a turn.

A request belongs to the main conversation when it offers the model the ``Bash`` tool
(``tools`` holds a tool named ``Bash``): Claude Code's agent loop sends its full tool list on
every turn, while its side requests (a title for the session, topic detection, the quota
probe with ``max_tokens: 1``...) offer no tools. Side requests are recorded and answered with a
harmless text (:data:`SIDE_REPLY`) and never touch the script. ``count_tokens`` gets a fixed
count; any other path gets an empty 200 (GET/HEAD) or a 404 (POST), all recorded.

After the last scripted turn a conversation request gets :data:`EXHAUSTED_REPLY` as text and
is counted in :attr:`ScriptedAnthropic.overruns`, so a test can assert the script was not
overrun.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "EXHAUSTED_REPLY",
    "SIDE_REPLY",
    "Parallel",
    "RecordedRequest",
    "ScriptedAnthropic",
    "Text",
    "ToolUse",
    "Turn",
    "tool_results",
]

MODEL = "claude-sonnet-4-5-20250929"
SIDE_REPLY = "Scripted side reply"
EXHAUSTED_REPLY = "(the scripted model has no more turns)"


@dataclass(frozen=True)
class ToolUse:
    """One ``tool_use`` block: by default the ``Bash`` tool running *command*."""

    command: str
    description: str = "Run a scripted command"
    name: str = "Bash"
    tool_input: Mapping[str, Any] | None = None  # replaces {command, description} when given
    id: str | None = None  # a fresh toolu_… id when None

    def input(self) -> dict[str, Any]:
        if self.tool_input is not None:
            return dict(self.tool_input)
        return {"command": self.command, "description": self.description}


@dataclass(frozen=True)
class Parallel:
    """Several ``tool_use`` blocks in one assistant reply (parallel tool calls)."""

    calls: tuple[ToolUse, ...]

    def __init__(self, *calls: ToolUse) -> None:
        object.__setattr__(self, "calls", calls)


@dataclass(frozen=True)
class Text:
    """A final assistant text (``stop_reason: end_turn``)."""

    text: str


Turn = ToolUse | Parallel | Text


@dataclass
class RecordedRequest:
    """One HTTP request the server got, with its JSON body when it had one."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    kind: str  # "conversation", "side", "count_tokens" or "other"
    turn: int | None = None  # the scripted turn index that answered a conversation request


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of the last user message of a Messages request."""
    messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
    if not messages or messages[-1].get("role") != "user":
        return []
    content = messages[-1].get("content")
    if not isinstance(content, list):
        return []
    return [block for block in content if block.get("type") == "tool_result"]


def result_text(block: Mapping[str, Any]) -> str:
    """The text of a ``tool_result`` block (its content is a string or a list of blocks)."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _is_conversation(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    tools = body.get("tools") or []
    return any(isinstance(tool, dict) and tool.get("name") == "Bash" for tool in tools)


def _assistant_count(body: Mapping[str, Any]) -> int:
    return sum(1 for message in body.get("messages", []) if message.get("role") == "assistant")


@dataclass
class _Script:
    turns: Sequence[Turn]
    ids: Iterator[int] = field(default_factory=itertools.count)

    def blocks(self, turn: Turn) -> tuple[list[dict[str, Any]], str]:
        """The content blocks and stop reason of one scripted reply."""
        if isinstance(turn, Text):
            return [{"type": "text", "text": turn.text}], "end_turn"
        calls = turn.calls if isinstance(turn, Parallel) else (turn,)
        blocks = [
            {
                "type": "tool_use",
                "id": call.id or f"toolu_scripted{next(self.ids):04d}",
                "name": call.name,
                "input": call.input(),
            }
            for call in calls
        ]
        return blocks, "tool_use"


def _sse_events(
    message_id: str, model: str, blocks: list[dict[str, Any]], stop_reason: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    usage = {
        "input_tokens": 10,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    for index, block in enumerate(blocks):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield "message_stop", {"type": "message_stop"}


class ScriptedAnthropic:
    """The scripted Messages API server; see the module docstring."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._script = _Script(list(turns))
        self._lock = threading.Lock()
        self._replies: dict[int, tuple[list[dict[str, Any]], str]] = {}
        self._message_ids = itertools.count()
        self.requests: list[RecordedRequest] = []
        self.overruns = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the recorded traffic --------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "use ScriptedAnthropic as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def conversation_requests(self) -> list[RecordedRequest]:
        """The main conversation's Messages requests, in arrival order (retries included)."""
        with self._lock:
            return [r for r in self.requests if r.kind == "conversation"]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == "side"]

    def request_for_turn(self, turn: int) -> RecordedRequest:
        """The last conversation request answered with scripted turn *turn*."""
        matches = [r for r in self.conversation_requests if r.turn == turn]
        if not matches:
            raise LookupError(f"no conversation request reached turn {turn}")
        return matches[-1]

    # -- answering -------------------------------------------------------------------------

    def _reply(self, body: Mapping[str, Any]) -> tuple[int, list[dict[str, Any]], str]:
        turn = _assistant_count(body)
        with self._lock:
            if turn >= len(self._script.turns):
                self.overruns += 1
                return turn, [{"type": "text", "text": EXHAUSTED_REPLY}], "end_turn"
            if turn not in self._replies:  # a retry gets the same blocks, the same ids
                self._replies[turn] = self._script.blocks(self._script.turns[turn])
            blocks, stop = self._replies[turn]
        return turn, blocks, stop

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the recorded requests are the log

            def _headers(self) -> dict[str, str]:
                return {key.lower(): value for key, value in self.headers.items()}

            def _send_json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_scripted{next(api._message_ids)}")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                api._record(RecordedRequest("GET", self.path, self._headers(), None, "other"))
                self._send_json(200, {})

            def do_HEAD(self) -> None:
                api._record(RecordedRequest("HEAD", self.path, self._headers(), None, "other"))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                path = self.path.split("?", 1)[0]
                headers = self._headers()
                if path == "/v1/messages/count_tokens":
                    api._record(RecordedRequest("POST", self.path, headers, body, "count_tokens"))
                    self._send_json(200, {"input_tokens": 100})
                    return
                if path != "/v1/messages" or not isinstance(body, dict):
                    api._record(RecordedRequest("POST", self.path, headers, body, "other"))
                    self._send_json(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                recorded = RecordedRequest("POST", self.path, headers, body, "side")
                if _is_conversation(body):
                    recorded.kind = "conversation"
                    recorded.turn, blocks, stop = api._reply(body)
                else:
                    blocks, stop = [{"type": "text", "text": SIDE_REPLY}], "end_turn"
                api._record(recorded)
                message_id = f"msg_scripted{next(api._message_ids):04d}"
                model = str(body.get("model") or MODEL)
                if body.get("stream"):
                    self._stream(message_id, model, blocks, stop)
                else:
                    self._send_json(
                        200,
                        {
                            "id": message_id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": blocks,
                            "stop_reason": stop,
                            "stop_sequence": None,
                            "usage": {"input_tokens": 10, "output_tokens": 5},
                        },
                    )

            def _stream(
                self, message_id: str, model: str, blocks: list[dict[str, Any]], stop: str
            ) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.send_header("request-id", f"req_{message_id}")
                self.end_headers()
                for event, data in _sse_events(message_id, model, blocks, stop):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler

    # -- lifetime --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="scripted-anthropic", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        assert self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
