"""Property test of the in-process ACP agent (spec 8.4): hostile clients cannot crash the
connection or allow anything they did not answer.

Two clients talk to two :func:`serve_acp` connections of one broker over
``trio.testing.memory_stream_pair()``, writing raw bytes. Hypothesis draws what they send:
mutations of valid ``initialize``/``session/new``/``session/prompt``/``session/cancel`` frames
(a key dropped or retyped, an extra member, another ``jsonrpc``, array params), garbage bytes,
over-long lines, stray responses (to unknown ids, to the other client's requests), and how each
client answers each ``session/request_permission`` (allow, reject, cancelled, unknown option
ids, wrong types, missing keys, a JSON-RPC error, a malformed response, no answer, an answer
after the deadline, an answer sent to the id of an earlier request, two answers).

Asserted for every example:

* no exception escapes ``serve_acp`` and each connection still answers a fresh ``initialize``
  after everything it was fed; no handler fails with -32603 ``internal error``;
* every ``approval/decided`` with ``allowed-once`` belongs to a permission request the owning
  connection sent and whose first response, arriving before any ``$/cancel_request`` for it,
  selected ``allow-once`` (tracked from the agent side's frame recorder, in wire order);
* every ``approval/asked`` is paired with exactly one ``approval/decided`` once serving ends.

The questions come from a ``PreToolUse`` hook that always asks (no bubblewrap: ``sandbox=None``),
so an example costs a few small subprocesses; the permission deadline is 0.2 s.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Literal, cast

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker import ApprovalAsked, ApprovalDecided, MemoryStore, Outcome, open_broker
from broker._composition import Composition
from broker.acp import FrameRecorder, JsonRpcConnection
from broker.acp._agent import serve_acp
from broker.acp._jsonrpc import Direction
from broker.agent import Scenario
from broker.hooks import CommandHook, HookMatcher, HookSettings
from broker.tools import PlainExecutor

Json = Any
MAX_LINE = 512
UNKNOWN_SESSION = "00000000-0000-4000-8000-000000000000"

_ASK = json.dumps(
    {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": "the property test asks about every command",
        }
    }
)
ALWAYS_ASK = HookSettings(
    pre_tool_use=(
        HookMatcher(
            matcher="bash",
            hooks=(CommandHook(command=f"cat >/dev/null; printf '%s\\n' '{_ASK}'", timeout=10),),
        ),
    )
)
SCENARIO = Scenario.from_data(
    {
        "name": "asks-twice",
        "steps": [
            {
                "toolCalls": [
                    {"id": "call_a", "name": "bash", "arguments": {"command": "echo a"}},
                    {"id": "call_b", "name": "bash", "arguments": {"command": "echo b"}},
                ]
            },
            {"text": "Done."},
        ],
    }
)
COMPOSITION = Composition(
    sandbox=None, hooks=ALWAYS_ASK, scenario=SCENARIO, permission_deadline=0.2
)


# -- what the clients do ----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

MutationKind = Literal["none", "drop", "retype", "extra", "version", "params-array"]


@attrs.frozen
class Mutation:
    kind: MutationKind
    where: int  # picks a key path of the frame, modulo their number
    value: Json = None


@attrs.frozen
class Send:
    """A valid frame built at run time (it needs the live session ids), then mutated."""

    client: int
    method: Literal["initialize", "session/new", "session/prompt", "session/cancel"]
    session: int  # >= 0: one of this client's sessions; -1 unknown; -2 the other client's
    mutation: Mutation


@attrs.frozen
class Raw:
    client: int
    data: bytes


@attrs.frozen
class Stray:
    """A response nobody asked for: to an unknown id, or to the other client's latest request."""

    client: int
    to_other_client: bool
    id: Json
    result: Json


@attrs.frozen
class Pause:
    """Let prompts and hooks progress (real time: hooks are real subprocesses)."""


Action = Send | Raw | Stray | Pause

ALLOW: Json = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
# How a client answers a permission request: a result to send, or a special behaviour.
ANSWERS: dict[str, Json] = {
    "allow": ALLOW,
    "reject": {"outcome": {"outcome": "selected", "optionId": "reject-once"}},
    "cancelled": {"outcome": {"outcome": "cancelled"}},
    "kind-not-id": {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
    "upper": {"outcome": {"outcome": "selected", "optionId": "ALLOW-ONCE"}},
    "name-not-id": {"outcome": {"outcome": "selected", "optionId": "Allow once"}},
    "flat": {"outcome": "selected", "optionId": "allow-once"},
    "no-option": {"outcome": {"outcome": "selected"}},
    "int-option": {"outcome": {"outcome": "selected", "optionId": 1}},
    "cancelled-with-id": {"outcome": {"outcome": "cancelled", "optionId": "allow-once"}},
    "null": None,
    "string": "allow-once",
    "list": [ALLOW],
}
Behaviour = Literal["error", "malformed", "silent", "late", "previous-id", "twice", "string-id"]
answer_plans = st.lists(
    # Half of the answers allow, so that the allowed path runs in most examples.
    st.just("allow")
    | st.sampled_from(
        [*ANSWERS, "error", "malformed", "silent", "late", "previous-id", "twice", "string-id"]
    ),
    min_size=1,
    max_size=6,
)

mutations = st.one_of(
    st.just(Mutation("none", 0)),
    st.builds(
        Mutation,
        st.sampled_from(["drop", "retype", "extra", "version", "params-array"]),
        st.integers(0, 50),
        json_values,
    ),
)
garbage = st.one_of(
    st.binary(max_size=48).map(lambda b: b + b"\n"),
    st.binary(max_size=48),  # no newline: glued to whatever comes next
    st.integers(MAX_LINE + 1, 4 * MAX_LINE).map(lambda n: b"x" * n + b"\n"),
    st.integers(MAX_LINE + 1, 4 * MAX_LINE).map(lambda n: b'{"a":"' + b"y" * n),
    st.sampled_from(
        [
            b"\xff\xfe\xfd\n",
            b"NaN\n",
            b"[]\n",
            b"[" * 200 + b"]" * 200 + b"\n",
            b'{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1e999}}\n',
            b'{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}\n',
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}\n',
            b'{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected",'
            b'"optionId":"allow-once"}},"error":null}\n',
        ]
    ),
)
clients = st.integers(0, 1)
actions: st.SearchStrategy[Action] = st.one_of(
    st.builds(
        Send,
        clients,
        st.sampled_from(["initialize", "session/new", "session/prompt", "session/cancel"]),
        st.integers(-2, 3),
        mutations,
    ),
    st.builds(Raw, clients, garbage),
    st.builds(
        Stray,
        clients,
        st.booleans(),
        st.one_of(st.integers(-3, 10**6), st.text(max_size=4), st.floats(0, 3), st.booleans()),
        st.sampled_from(list(ANSWERS.values())),
    ),
    st.just(Pause()),
)
# Every example starts with a valid handshake and session per client, so that asks happen.
openings = [
    Send(0, "initialize", 0, Mutation("none", 0)),
    Send(1, "initialize", 0, Mutation("none", 0)),
    Send(0, "session/new", 0, Mutation("none", 0)),
    Send(1, "session/new", 0, Mutation("none", 0)),
    Send(0, "session/prompt", 0, Mutation("none", 0)),
    Send(1, "session/prompt", 0, Mutation("none", 0)),
]


# -- applying a mutation ----------------------------------------------------------------------


def _paths(value: Json, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in items:
        out.append((*prefix, key))
        if isinstance(child, dict | list):
            out.extend(_paths(child, (*prefix, key)))
    return out


def mutate(frame: dict[str, Json], mutation: Mutation) -> tuple[dict[str, Json], bool]:
    """The mutated frame, and whether its id and method survived (so a response must come)."""
    kind, value = mutation.kind, mutation.value
    if kind == "none":
        return frame, True
    if kind == "version":
        return {**frame, "jsonrpc": "1.0"}, True
    if kind == "params-array":
        return {**frame, "params": [frame.get("params")]}, True
    paths = _paths(frame)
    path = paths[mutation.where % len(paths)]
    frame = json.loads(json.dumps(frame))  # a deep copy
    parent = frame
    for key in path[:-1]:
        parent = parent[key]
    if kind == "drop":
        del parent[path[-1]]
    elif kind == "retype":
        parent[path[-1]] = value
    else:  # extra
        target = parent if isinstance(parent, dict) else frame
        target["bogus"] = value
    return frame, path[0] not in ("id", "method")


# -- a hostile client -------------------------------------------------------------------------


def _key(request_id: Json) -> str:
    """Ids compared as JSON text: ``1``, ``1.0``, ``true`` and ``"1"`` are different ids."""
    return json.dumps(request_id)


@attrs.define(eq=False)
class Client:
    """Writes raw bytes; reads the agent's frames; answers permission requests by its plan."""

    stream: trio.abc.Stream
    plan: list[str]
    workspace: pathlib.Path
    sessions: list[str] = attrs.field(factory=list)
    permission_ids: list[Json] = attrs.field(factory=list)
    responses: dict[str, dict[str, Json]] = attrs.field(factory=dict)
    _arrived: trio.Event = attrs.field(factory=trio.Event)
    _lock: trio.Lock = attrs.field(factory=trio.Lock)
    _next_id: int = 1000
    _answered: int = 0
    # Whether the last write left a line unfinished (garbage without its newline).
    _glued: bool = False

    async def write(self, data: bytes) -> bool:
        """Write *data* whole; returns whether it starts a fresh line (nothing glued before)."""
        async with self._lock:
            fresh = not self._glued
            await self.stream.send_all(data)
            self._glued = not data.endswith(b"\n")
            return fresh

    async def respond(self, request_id: Json, result: Json) -> None:
        frame = {"jsonrpc": "2.0", "id": request_id, "result": result}
        await self.write(json.dumps(frame).encode() + b"\n")

    async def read_loop(self, nursery: trio.Nursery) -> None:
        buffer = b""
        while chunk := await self.stream.receive_some(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                frame = json.loads(line)
                if "method" not in frame:
                    result = frame.get("result")
                    if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                        self.sessions.append(result["sessionId"])
                    self.responses.setdefault(_key(frame["id"]), frame)
                    self._arrived.set()
                    self._arrived = trio.Event()
                elif frame["method"] == "session/request_permission":
                    nursery.start_soon(self.answer, frame["id"])

    async def answer(self, request_id: Json) -> None:
        how = self.plan[self._answered % len(self.plan)]
        self._answered += 1
        previous = self.permission_ids[-1] if self.permission_ids else request_id + 10_000
        self.permission_ids.append(request_id)
        if how in ANSWERS:
            await self.respond(request_id, ANSWERS[how])
        elif how == "error":
            error = {"code": -32603, "message": "no UI attached"}
            frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
            await self.write(json.dumps(frame).encode() + b"\n")
        elif how == "malformed":
            frame = {"jsonrpc": "2.0", "id": request_id, "result": ALLOW, "error": None}
            await self.write(json.dumps(frame).encode() + b"\n")
        elif how == "late":
            await trio.sleep(COMPOSITION.permission_deadline * 1.5)
            await self.respond(request_id, ALLOW)
        elif how == "previous-id":
            await self.respond(previous, ALLOW)
        elif how == "twice":
            await self.respond(request_id, ANSWERS["reject"])
            await self.respond(request_id, ALLOW)
        elif how == "string-id":
            await self.respond(str(request_id), ALLOW)
        # "silent": never answer; the deadline settles it.

    async def request(self, frame: dict[str, Json], mutation: Mutation) -> str | None:
        """Send *frame* mutated; the key of the response to wait for, if one must come."""
        request_id = frame.get("id")
        sent, answered = mutate(frame, mutation)
        fresh = await self.write(json.dumps(sent).encode() + b"\n")
        # Glued to garbage, the line is one parse error: no response names our id.
        return _key(request_id) if "id" in frame and answered and fresh else None

    def fresh_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def wait_for(self, keys: list[str]) -> None:
        while not all(k in self.responses for k in keys):
            await self._arrived.wait()


def _session_ref(clients: list[Client], me: int, ref: int) -> str:
    own, other = clients[me].sessions, clients[1 - me].sessions
    if ref >= 0 and own:
        return own[ref % len(own)]
    if ref == -2 and other:
        return other[-1]
    return UNKNOWN_SESSION


def _frame(clients: list[Client], action: Send) -> dict[str, Json]:
    client = clients[action.client]
    session_id = _session_ref(clients, action.client, action.session)
    params: dict[str, Json]
    if action.method == "initialize":
        params = {"protocolVersion": 1, "clientCapabilities": {}}
    elif action.method == "session/new":
        params = {"cwd": str(client.workspace), "mcpServers": []}
    elif action.method == "session/prompt":
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
    else:
        return {"jsonrpc": "2.0", "method": action.method, "params": {"sessionId": session_id}}
    return {"jsonrpc": "2.0", "id": client.fresh_id(), "method": action.method, "params": params}


async def drive(clients: list[Client], script: list[Action]) -> list[list[str]]:
    """Play *script*; returns, per client, the response keys that must arrive."""
    expected: list[list[str]] = [[], []]
    for action in script:
        if isinstance(action, Pause):
            await trio.sleep(0.01)
        elif isinstance(action, Raw):
            await clients[action.client].write(action.data)
        elif isinstance(action, Stray):
            client, other = clients[action.client], clients[1 - action.client]
            request_id = action.id
            if action.to_other_client and other.permission_ids:
                request_id = other.permission_ids[-1]
            # A stray response may end a glued garbage line first: lead with a newline.
            await client.write(b"\n")
            await client.respond(request_id, action.result)
        else:
            client = clients[action.client]
            key = await client.request(_frame(clients, action), action.mutation)
            if key is not None:
                expected[action.client].append(key)
                if action.method == "session/new":
                    await client.wait_for([key])  # later frames may name the session
    return expected


# -- the invariants ---------------------------------------------------------------------------


def allowed_by_client(recorder: FrameRecorder) -> set[tuple[str, str]]:
    """(sessionId, toolCallId) of each permission request whose first answer, arriving before
    any ``$/cancel_request`` for it, selected ``allow-once``."""
    pending: dict[str, tuple[str, str]] = {}
    allowed: set[tuple[str, str]] = set()
    for frame in recorder.frames:
        message = frame.message
        if frame.direction is Direction.SENT:
            if message.get("method") == "session/request_permission":
                params = message["params"]
                ask = (params["sessionId"], params["toolCall"]["toolCallId"])
                pending[_key(message["id"])] = ask
            elif message.get("method") == "$/cancel_request":
                pending.pop(_key(message["params"]["requestId"]), None)
        elif "method" not in message and "id" in message:
            ask_or_none = pending.pop(_key(message["id"]), None)
            result = message.get("result")
            outcome = result.get("outcome") if isinstance(result, dict) else None
            if (
                ask_or_none is not None
                and isinstance(outcome, dict)
                and outcome.get("outcome") == "selected"
                and outcome.get("optionId") == "allow-once"
            ):
                allowed.add(ask_or_none)
    return allowed


def sessions_of(recorder: FrameRecorder) -> list[str]:
    return [
        m["result"]["sessionId"]
        for m in recorder.sent
        if isinstance(m.get("result"), dict) and "sessionId" in m["result"]
    ]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("ws")


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=st.lists(actions, max_size=12),
    plans=st.tuples(answer_plans, answer_plans),
)
async def test_hostile_clients_never_crash_the_agent_nor_allow_unanswered_asks(
    workspace: pathlib.Path, script: list[Action], plans: tuple[list[str], list[str]]
) -> None:
    recorders = [FrameRecorder(), FrameRecorder()]
    with trio.fail_after(20):
        async with open_broker(store=MemoryStore()) as broker:
            clients: list[Client] = []
            async with trio.open_nursery() as agents:
                for recorder, plan in zip(recorders, plans, strict=True):
                    agent_side, client_side = trio.testing.memory_stream_pair()
                    connection = JsonRpcConnection(
                        send_stream=agent_side,
                        receive_stream=agent_side,
                        on_frame=recorder,
                        max_line_bytes=MAX_LINE,
                    )
                    await agents.start(serve_acp, connection, broker, COMPOSITION, PlainExecutor())
                    clients.append(Client(stream=client_side, plan=plan, workspace=workspace))
                async with trio.open_nursery() as readers:
                    for client in clients:
                        readers.start_soon(client.read_loop, readers)
                    expected = await drive(clients, [*openings, *script])
                    for client, keys in zip(clients, expected, strict=True):
                        # Still serving: a newline ends any glued garbage, then a fresh request.
                        probe = {
                            "jsonrpc": "2.0",
                            "id": "probe",
                            "method": "initialize",
                            "params": {"protocolVersion": 1},
                        }
                        await client.write(b"\n" + json.dumps(probe).encode() + b"\n")
                        await client.wait_for([*keys, _key("probe")])
                        assert "result" in client.responses[_key("probe")]
                    readers.cancel_scope.cancel(reason="the script is played")
                for client in clients:
                    await client.stream.aclose()  # end of input: serve_acp returns
            store = cast(MemoryStore, broker.store)
            for recorder in recorders:
                internal = [
                    m
                    for m in recorder.sent
                    if isinstance(m.get("error"), dict)
                    and m["error"]["message"] == "internal error"
                ]
                assert internal == []
                allowed = allowed_by_client(recorder)
                for session_id in sessions_of(recorder):
                    log = store.read_nowait(session_id)
                    asked = {e.id: e for e in log if isinstance(e, ApprovalAsked)}
                    decided = [e for e in log if isinstance(e, ApprovalDecided)]
                    event(f"asks per session: {len(asked)}")
                    assert sorted(e.id for e in decided) == sorted(asked)
                    for decision in decided:
                        event(f"decided {decision.outcome}")
                        if decision.outcome is Outcome.ALLOWED_ONCE:
                            call_id = asked[decision.id].call_id
                            assert call_id is not None
                            assert (session_id, call_id) in allowed, (decision, allowed)


# -- bugs the hostile clients found, fixed: they stay as regression tests ------------------------

TEXT_ONLY = Composition(
    sandbox=None, scenario=Scenario.from_data({"name": "text", "steps": [{"text": "Done."}]})
)


async def _raw_agent(
    nursery: trio.Nursery, broker: Any, composition: Composition
) -> tuple[trio.abc.Stream, list[bytes]]:
    """Serve one in-process connection; returns the client's stream and a line reader buffer."""
    agent_side, client_side = trio.testing.memory_stream_pair()
    connection = JsonRpcConnection(send_stream=agent_side, receive_stream=agent_side)
    await nursery.start(serve_acp, connection, broker, composition, PlainExecutor())
    return client_side, [b""]


async def _response(stream: trio.abc.Stream, buffer: list[bytes], request_id: Json) -> Json:
    """Read frames until the response to *request_id*; notifications are skipped."""
    while True:
        await trio.lowlevel.checkpoint()
        while b"\n" not in buffer[0]:
            buffer[0] += await stream.receive_some(65536)
        line, _, buffer[0] = buffer[0].partition(b"\n")
        frame = json.loads(line)
        if "method" not in frame and frame.get("id") == request_id:
            return frame


def _line(message: Json) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def test_a_cwd_too_long_to_stat_is_invalid_params_not_an_internal_error() -> None:
    too_long = "/" + "a" * 300  # one component longer than NAME_MAX (255)
    with trio.fail_after(10):
        async with open_broker(store=MemoryStore()) as broker:
            async with trio.open_nursery() as nursery:
                stream, buffer = await _raw_agent(nursery, broker, TEXT_ONLY)
                params = {"cwd": too_long, "mcpServers": []}
                await stream.send_all(
                    _line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params})
                )
                frame = await _response(stream, buffer, 1)
                await stream.aclose()
    assert frame["error"]["code"] == -32602
    assert frame["error"]["message"].startswith(
        "invalid params: cwd must be an absolute path to an existing directory"
    )


async def test_a_cancel_right_behind_its_prompt_cancels_that_prompt(
    workspace: pathlib.Path,
) -> None:
    stops: list[str] = []
    with trio.fail_after(20):
        async with open_broker(store=MemoryStore()) as broker:
            async with trio.open_nursery() as nursery:
                stream, buffer = await _raw_agent(nursery, broker, TEXT_ONLY)
                params = {"cwd": str(workspace), "mcpServers": []}
                await stream.send_all(
                    _line({"jsonrpc": "2.0", "id": 0, "method": "session/new", "params": params})
                )
                session_id = (await _response(stream, buffer, 0))["result"]["sessionId"]
                prompt = [{"type": "text", "text": "go"}]
                for request_id in range(1, 101):
                    await stream.send_all(
                        _line(
                            {
                                "jsonrpc": "2.0",
                                "id": request_id,
                                "method": "session/prompt",
                                "params": {"sessionId": session_id, "prompt": prompt},
                            }
                        )
                        + _line(
                            {
                                "jsonrpc": "2.0",
                                "method": "session/cancel",
                                "params": {"sessionId": session_id},
                            }
                        )
                    )
                    frame = await _response(stream, buffer, request_id)
                    stops.append(frame["result"]["stopReason"])
                await stream.aclose()
    assert set(stops) == {"cancelled"}, f"{stops.count('end_turn')} of 100 prompts ran on"
