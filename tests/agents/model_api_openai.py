"""A scripted OpenAI Responses API on localhost, for driving the real Codex CLI offline.

``ScriptedResponses(turns=[...])`` is a context manager that serves ``POST /v1/responses``
(SSE streaming, as Codex always asks for) on ``127.0.0.1`` at a free port, in a thread, so
plain sync pytest tests can use it::

    with ScriptedResponses([ShellCall("echo hi > out.txt"), Text("done")]) as api:
        run = run_codex(workdir, api=api, ...)
    function_call_outputs(api.turn_requests[1])  # what the model was told about the call

The shell tool. Codex 0.171 offers the model its "unified exec" tool: a ``function`` tool
named ``exec_command`` whose arguments are ``{"cmd": "<shell text>", "workdir"?: ...,
"sandbox_permissions"?: "use_default" | "require_escalated", "justification"?: ...}``. A
:class:`ShellCall` becomes one ``function_call`` output item calling it; :class:`Parallel`
puts several in one reply (the request says ``parallel_tool_calls: true``). Codex answers each
with a ``function_call_output`` item (same ``call_id``) in the next request's ``input``.

Which scripted turn answers a request is worked out from the request itself, not from a
counter: Codex resends the whole history on every request (``store: false``), and every
call this server makes carries a ``call_id`` of the form ``call_t<turn>_<n>``; turn ``n``
answers the conversation request whose ``input`` holds calls of ``n`` distinct scripted turns
(plus any assistant messages). A retried request gets the same answer again.

Side requests. A request belongs to the main conversation when (1) its path is
``/v1/responses``, (2) its ``tools`` offer ``exec_command``, (3) Codex's
``x-codex-turn-metadata`` header (JSON), when present, says ``"request_kind": "turn"`` and
``"thread_source": "user"``, and (4) it comes from the same thread (``thread-id`` header) as
the first such request. The automatic approval reviewer ("guardian", ``--approve-for-me``)
is a sub-agent of its own: it offers ``exec_command`` too, but its requests carry
``"thread_source": "guardian_review"`` and another thread id. Anything else (the reviewer,
sub-agents, compaction on ``/v1/responses/compact``, a ``GET /v1/models``) is recorded and
answered harmlessly (:data:`SIDE_REPLY` as text, an empty JSON object or a 404) and never
touches the script. Note that the reviewer cannot parse :data:`SIDE_REPLY`, so an approval
that reaches it is rejected ("guardian assessment was not valid JSON").

After the last scripted turn a conversation request gets :data:`EXHAUSTED_REPLY` as text and
is counted in :attr:`ScriptedResponses.overruns`, so a test can assert the script held.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "EXHAUSTED_REPLY",
    "SHELL_TOOL",
    "SIDE_REPLY",
    "Parallel",
    "RecordedRequest",
    "ScriptedResponses",
    "ShellCall",
    "Text",
    "Turn",
    "function_call_outputs",
]

SHELL_TOOL = "exec_command"
SIDE_REPLY = "Scripted side reply"
EXHAUSTED_REPLY = "(the scripted model has no more turns)"
_CALL_ID = re.compile(r"^call_t(\d+)_\d+$")


@dataclass(frozen=True)
class ShellCall:
    """One ``exec_command`` function call running *command* (a shell string).

    *extra* is merged into the arguments, e.g. ``{"sandbox_permissions": "require_escalated",
    "justification": "..."}`` to ask for an unsandboxed run (which needs approval).
    """

    command: str
    workdir: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {"cmd": self.command}
        if self.workdir is not None:
            args["workdir"] = self.workdir
        args.update(self.extra)
        return args


@dataclass(frozen=True, init=False)
class Parallel:
    """Several shell calls in one model reply."""

    calls: tuple[ShellCall, ...]

    def __init__(self, *calls: ShellCall) -> None:
        object.__setattr__(self, "calls", calls)


@dataclass(frozen=True)
class Text:
    """A final assistant message; in ``codex exec`` it ends the run."""

    text: str


Turn = ShellCall | Parallel | Text


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    conversation: bool
    turn: int | None  # the scripted turn that answered it (0-based), None for side requests

    def metadata(self, key: str) -> str | None:
        """A field of Codex's ``x-codex-turn-metadata`` header (a JSON object), if present."""
        raw = self.headers.get("x-codex-turn-metadata")
        if raw is None:
            return None
        try:
            value = json.loads(raw).get(key)
        except (ValueError, AttributeError):
            return None
        return value if isinstance(value, str) else None

    @property
    def request_kind(self) -> str | None:
        """Codex's own label for the request (``"turn"`` for an agent loop turn)."""
        return self.metadata("request_kind")

    @property
    def thread_source(self) -> str | None:
        """``"user"`` for the session's own thread, ``"guardian_review"`` for the reviewer."""
        return self.metadata("thread_source")

    @property
    def thread_id(self) -> str | None:
        return self.headers.get("thread-id") or self.metadata("thread_id")


def function_call_outputs(request: RecordedRequest) -> dict[str, str]:
    """``call_id`` → output text of every ``function_call_output`` in *request*'s input."""
    out: dict[str, str] = {}
    for item in _input_items(request.body):
        if item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):  # content items form
                output = "".join(str(part.get("text", "")) for part in output)
            out[str(item.get("call_id"))] = str(output)
    return out


def _input_items(body: Any) -> list[Mapping[str, Any]]:
    if not isinstance(body, Mapping):
        return []
    items = body.get("input")
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]


def _offers_shell(body: Any) -> bool:
    if not isinstance(body, Mapping):
        return False
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, Mapping) and tool.get("name") == SHELL_TOOL for tool in tools
    )


def _turns_answered(body: Any) -> int:
    """How many scripted replies the request's history already holds."""
    turns: set[int] = set()
    messages = 0
    for item in _input_items(body):
        if item.get("type") == "function_call":
            match = _CALL_ID.match(str(item.get("call_id", "")))
            if match:
                turns.add(int(match.group(1)))
        elif item.get("type") == "message" and item.get("role") == "assistant":
            messages += 1
    return len(turns) + messages


def _reply_items(turn_index: int, turn: Turn) -> list[dict[str, Any]]:
    if isinstance(turn, Text):
        return [
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_t{turn_index}",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        ]
    calls = turn.calls if isinstance(turn, Parallel) else (turn,)
    return [
        {
            "type": "function_call",
            "id": f"fc_t{turn_index}_{n}",
            "call_id": f"call_t{turn_index}_{n}",
            "name": SHELL_TOOL,
            "arguments": json.dumps(call.arguments()),
            "status": "completed",
        }
        for n, call in enumerate(calls)
    ]


def _sse(response_id: str, items: list[dict[str, Any]]) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": response_id}},
    ]
    for index, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": text,
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {
                "id": response_id,
                "usage": {
                    "input_tokens": 10,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 5,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 15,
                },
            },
        }
    )
    return "".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events
    ).encode()


class ScriptedResponses:
    """The scripted model server; see the module docstring."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.turns = list(turns)
        self.requests: list[RecordedRequest] = []
        self.overruns = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._main_thread: str | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The provider ``base_url`` for Codex (ends in ``/v1``)."""
        assert self._server is not None, "use ScriptedResponses as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def turn_requests(self) -> list[RecordedRequest]:
        """The main-conversation requests, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.conversation]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if not r.conversation]

    def request_for_turn(self, turn: int) -> RecordedRequest:
        """The (first) conversation request that scripted turn *turn* answered."""
        for request in self.turn_requests:
            if request.turn == turn:
                return request
        raise LookupError(f"no conversation request was answered by turn {turn}")

    def _is_conversation(self, request: RecordedRequest) -> bool:
        if not (
            request.path.endswith("/responses")
            and _offers_shell(request.body)
            and request.request_kind in (None, "turn")
            and request.thread_source in (None, "user")
        ):
            return False
        with self._lock:
            if self._main_thread is None:
                self._main_thread = request.thread_id
            return request.thread_id == self._main_thread

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _headers(self) -> dict[str, str]:
                return {key.lower(): value for key, value in self.headers.items()}

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _read_body(self) -> Any:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                encoding = (self.headers.get("content-encoding") or "").lower()
                if encoding == "gzip":
                    raw = gzip.decompress(raw)
                elif encoding:
                    return {"undecoded": encoding, "size": len(raw)}
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return raw.decode("utf-8", "replace")

            def do_GET(self) -> None:
                api._record(RecordedRequest("GET", self.path, self._headers(), None, False, None))
                self._send(404, "application/json", b'{"error":"not scripted"}')

            def do_POST(self) -> None:
                body = self._read_body()
                headers = self._headers()
                path = self.path.split("?", 1)[0]
                probe = RecordedRequest("POST", path, headers, body, False, None)
                conversation = api._is_conversation(probe)
                if not path.endswith("/responses"):
                    api._record(probe)
                    self._send(200, "application/json", b"{}")
                    return
                response_id = f"resp_{next(api._ids)}"
                if not conversation:
                    api._record(probe)
                    items = _reply_items(0, Text(SIDE_REPLY))
                    items[0]["id"] = f"msg_side_{response_id}"
                    self._send(200, "text/event-stream", _sse(response_id, items))
                    return
                turn_index = _turns_answered(body)
                if turn_index < len(api.turns):
                    items = _reply_items(turn_index, api.turns[turn_index])
                    answered: int | None = turn_index
                else:
                    with api._lock:
                        api.overruns += 1
                    items = _reply_items(turn_index, Text(EXHAUSTED_REPLY))
                    answered = None
                api._record(RecordedRequest("POST", path, headers, body, True, answered))
                self._send(200, "text/event-stream", _sse(response_id, items))

        return Handler

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="scripted-responses", daemon=True
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
        self._thread.join(timeout=5)
