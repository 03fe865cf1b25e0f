"""ACP v1 wire values: golden JSON, schema validation of every frame, strict and clear decoding."""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.acp import (
    PROTOCOL_VERSION,
    AcpMethod,
    AgentCapabilities,
    AgentMessageChunk,
    AuthMethod,
    CancelledPermissionOutcome,
    CancelNotification,
    ClientCapabilities,
    EnvVariable,
    ErrorCode,
    FileSystemCapabilities,
    HttpHeader,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    JsonRpcError,
    McpCapabilities,
    McpServerHttp,
    McpServerSse,
    McpServerStdio,
    NewSessionRequest,
    NewSessionResponse,
    PermissionOption,
    PermissionOptionKind,
    PromptCapabilities,
    PromptRequest,
    PromptResponse,
    RequestPermissionRequest,
    RequestPermissionResponse,
    ResourceLink,
    SelectedPermissionOutcome,
    SessionNotification,
    StopReason,
    TextContent,
    ToolCall,
    ToolCallContentBlock,
    ToolCallDiff,
    ToolCallLocation,
    ToolCallStatus,
    ToolCallTerminal,
    ToolCallUpdate,
    ToolKind,
    WireDecodeError,
    from_wire,
    params_from_wire,
    to_wire,
)

from .acp_schema import schema, validate_agent_frame, validate_client_frame

GOLDEN_PERMISSION_PARAMS = (
    '{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":['
    '{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},'
    '{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]}'
)

PERMISSION_REQUEST = RequestPermissionRequest(
    session_id="s",
    tool_call=ToolCallUpdate(tool_call_id="c"),
    options=(
        PermissionOption(
            option_id="allow-once", name="Allow once", kind=PermissionOptionKind.ALLOW_ONCE
        ),
        PermissionOption(
            option_id="reject-once", name="Reject", kind=PermissionOptionKind.REJECT_ONCE
        ),
    ),
)

# (frame kind, method, value, its exact wire JSON). Kinds: what the agent sends.
AGENT_SENT: list[tuple[str, str, Any, dict[str, Any]]] = [
    (
        "result",
        "initialize",
        InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            auth_methods=(),
        ),
        {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []},
    ),
    (
        "result",
        "initialize",
        InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
            ),
            auth_methods=(AuthMethod(id="key", name="API key", description="set FOO_KEY"),),
            agent_info=Implementation(name="broker", version="0.1.0", title="Broker"),
        ),
        {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"embeddedContext": True},
                "mcpCapabilities": {"http": True},
            },
            "authMethods": [{"id": "key", "name": "API key", "description": "set FOO_KEY"}],
            "agentInfo": {"name": "broker", "version": "0.1.0", "title": "Broker"},
        },
    ),
    ("result", "session/new", NewSessionResponse(session_id="s-1"), {"sessionId": "s-1"}),
    *[
        (
            "result",
            "session/prompt",
            PromptResponse(stop_reason=reason),
            {"stopReason": reason.value},
        )
        for reason in StopReason
    ],
    (
        "notification",
        "session/update",
        SessionNotification(
            session_id="s", update=AgentMessageChunk(content=TextContent(text="hi"))
        ),
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hi"},
            },
        },
    ),
    (
        "notification",
        "session/update",
        SessionNotification(
            session_id="s",
            update=AgentMessageChunk(
                content=ResourceLink(
                    uri="file:///a.txt", name="a.txt", mime_type="text/plain", size=3
                ),
                message_id="m1",
            ),
        ),
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {
                    "type": "resource_link",
                    "uri": "file:///a.txt",
                    "name": "a.txt",
                    "mimeType": "text/plain",
                    "size": 3,
                },
                "messageId": "m1",
            },
        },
    ),
    (
        "notification",
        "session/update",
        SessionNotification(
            session_id="s",
            update=ToolCall(
                tool_call_id="call_00_x",
                title="bash: ls",
                kind=ToolKind.EXECUTE,
                status=ToolCallStatus.PENDING,
                locations=(ToolCallLocation(path="/w", line=3),),
                raw_input={"command": "ls", "sandbox_permissions": "workspace-write"},
            ),
        ),
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_00_x",
                "title": "bash: ls",
                "kind": "execute",
                "status": "pending",
                "locations": [{"path": "/w", "line": 3}],
                "rawInput": {"command": "ls", "sandbox_permissions": "workspace-write"},
            },
        },
    ),
    (
        "notification",
        "session/update",
        SessionNotification(
            session_id="s",
            update=ToolCallUpdate(
                tool_call_id="call_00_x",
                status=ToolCallStatus.COMPLETED,
                content=(
                    ToolCallContentBlock(content=TextContent(text="escalated")),
                    ToolCallDiff(path="/w/a", new_text="new", old_text="old"),
                    ToolCallTerminal(terminal_id="t1"),
                ),
                raw_output={"exitCode": 0},
            ),
        ),
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_00_x",
                "status": "completed",
                "content": [
                    {"type": "content", "content": {"type": "text", "text": "escalated"}},
                    {"type": "diff", "path": "/w/a", "newText": "new", "oldText": "old"},
                    {"type": "terminal", "terminalId": "t1"},
                ],
                "rawOutput": {"exitCode": 0},
            },
        },
    ),
    (
        "notification",
        "session/update",
        SessionNotification(
            session_id="s",
            update=ToolCallUpdate(tool_call_id="c", status=ToolCallStatus.FAILED, content=()),
        ),
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "status": "failed",
                "content": [],
            },
        },
    ),
    (
        "request",
        "session/request_permission",
        PERMISSION_REQUEST,
        json.loads(GOLDEN_PERMISSION_PARAMS),
    ),
    (
        "request",
        "session/request_permission",
        RequestPermissionRequest(
            session_id="s",
            tool_call=ToolCallUpdate(
                tool_call_id="c", title="bash", kind=ToolKind.EXECUTE, raw_input={"command": "ls"}
            ),
            options=(
                PermissionOption(
                    option_id="allow-always", name="Always", kind=PermissionOptionKind.ALLOW_ALWAYS
                ),
            ),
        ),
        {
            "sessionId": "s",
            "toolCall": {
                "toolCallId": "c",
                "kind": "execute",
                "title": "bash",
                "rawInput": {"command": "ls"},
            },
            "options": [{"optionId": "allow-always", "name": "Always", "kind": "allow_always"}],
        },
    ),
]

# (frame kind, method, wire JSON a client sends, the value it decodes to).
CLIENT_SENT: list[tuple[str, str, dict[str, Any], Any]] = [
    ("request", "initialize", {"protocolVersion": 1}, InitializeRequest(protocol_version=1)),
    (
        "request",
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": True, "writeTextFile": True},
                "terminal": True,
            },
            "clientInfo": {"name": "zed", "version": "0.200.0", "title": "Zed"},
        },
        InitializeRequest(
            protocol_version=1,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            ),
            client_info=Implementation(name="zed", version="0.200.0", title="Zed"),
        ),
    ),
    (
        "request",
        "session/new",
        {"cwd": "/work", "mcpServers": []},
        NewSessionRequest(cwd="/work", mcp_servers=()),
    ),
    (
        "request",
        "session/new",
        {
            "cwd": "/work",
            "mcpServers": [
                {
                    "name": "fs",
                    "command": "/bin/mcp",
                    "args": ["--ro"],
                    "env": [{"name": "A", "value": "1"}],
                },
                {
                    "type": "http",
                    "name": "h",
                    "url": "https://x",
                    "headers": [{"name": "K", "value": "v"}],
                },
                {"type": "sse", "name": "e", "url": "https://y", "headers": []},
            ],
            "additionalDirectories": ["/other"],
        },
        NewSessionRequest(
            cwd="/work",
            mcp_servers=(
                McpServerStdio(
                    name="fs",
                    command="/bin/mcp",
                    args=("--ro",),
                    env=(EnvVariable(name="A", value="1"),),
                ),
                McpServerHttp(
                    name="h", url="https://x", headers=(HttpHeader(name="K", value="v"),)
                ),
                McpServerSse(name="e", url="https://y", headers=()),
            ),
            additional_directories=("/other",),
        ),
    ),
    (
        "request",
        "session/prompt",
        {
            "sessionId": "s",
            "prompt": [
                {"type": "text", "text": "write escalated.txt"},
                {"type": "resource_link", "uri": "file:///w/a", "name": "a"},
            ],
        },
        PromptRequest(
            session_id="s",
            prompt=(
                TextContent(text="write escalated.txt"),
                ResourceLink(uri="file:///w/a", name="a"),
            ),
        ),
    ),
    ("notification", "session/cancel", {"sessionId": "s"}, CancelNotification(session_id="s")),
    (
        "result",
        "session/request_permission",
        {"outcome": {"outcome": "cancelled"}},
        RequestPermissionResponse(outcome=CancelledPermissionOutcome()),
    ),
    (
        "result",
        "session/request_permission",
        {"outcome": {"outcome": "selected", "optionId": "allow-once"}},
        RequestPermissionResponse(outcome=SelectedPermissionOutcome(option_id="allow-once")),
    ),
]


def frame(kind: str, method: str, body: dict[str, Any], request_id: int = 0) -> dict[str, Any]:
    if kind == "request":
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}
    if kind == "notification":
        return {"jsonrpc": "2.0", "method": method, "params": body}
    return {"jsonrpc": "2.0", "id": request_id, "result": body}


def over_json(value: dict[str, Any]) -> dict[str, Any]:
    """What the peer actually sees: our dict through JSON text and back."""
    decoded: dict[str, Any] = json.loads(json.dumps(value))
    return decoded


@pytest.mark.parametrize(("kind", "method", "value", "golden"), AGENT_SENT)
def test_what_the_agent_sends_is_golden_and_schema_valid(
    kind: str, method: str, value: Any, golden: dict[str, Any]
) -> None:
    wire = over_json(to_wire(value))
    assert wire == golden
    validate_agent_frame(frame(kind, method, wire), method if kind == "result" else None)
    assert from_wire(type(value), wire) == value


@pytest.mark.parametrize(("kind", "method", "golden", "value"), CLIENT_SENT)
def test_what_a_client_sends_decodes_and_round_trips(
    kind: str, method: str, golden: dict[str, Any], value: Any
) -> None:
    validate_client_frame(frame(kind, method, golden), method if kind == "result" else None)
    assert from_wire(type(value), golden) == value
    wire = over_json(to_wire(value))
    assert wire == golden
    validate_client_frame(frame(kind, method, wire), method if kind == "result" else None)


def test_the_permission_request_params_are_byte_exact() -> None:
    text = json.dumps(to_wire(PERMISSION_REQUEST), separators=(",", ":"), ensure_ascii=False)
    assert text == GOLDEN_PERMISSION_PARAMS


@given(st.text(), st.text(min_size=1))
def test_any_text_chunk_round_trips_and_validates(text: str, session_id: str) -> None:
    value = SessionNotification(
        session_id=session_id, update=AgentMessageChunk(content=TextContent(text=text))
    )
    wire = over_json(to_wire(value))
    validate_agent_frame(frame("notification", "session/update", wire))
    assert from_wire(SessionNotification, wire) == value


# -- the classes agree with the schema ------------------------------------------------------

SCHEMA_DEFS: list[tuple[type[Any], str]] = [
    (TextContent, "TextContent"),
    (ResourceLink, "ResourceLink"),
    (ToolCallContentBlock, "Content"),
    (ToolCallDiff, "Diff"),
    (ToolCallTerminal, "Terminal"),
    (ToolCallLocation, "ToolCallLocation"),
    (AgentMessageChunk, "ContentChunk"),
    (ToolCall, "ToolCall"),
    (ToolCallUpdate, "ToolCallUpdate"),
    (SessionNotification, "SessionNotification"),
    (PermissionOption, "PermissionOption"),
    (RequestPermissionRequest, "RequestPermissionRequest"),
    (SelectedPermissionOutcome, "SelectedPermissionOutcome"),
    (RequestPermissionResponse, "RequestPermissionResponse"),
    (FileSystemCapabilities, "FileSystemCapabilities"),
    (ClientCapabilities, "ClientCapabilities"),
    (Implementation, "Implementation"),
    (InitializeRequest, "InitializeRequest"),
    (PromptCapabilities, "PromptCapabilities"),
    (McpCapabilities, "McpCapabilities"),
    (AgentCapabilities, "AgentCapabilities"),
    (AuthMethod, "AuthMethodAgent"),
    (InitializeResponse, "InitializeResponse"),
    (EnvVariable, "EnvVariable"),
    (HttpHeader, "HttpHeader"),
    (McpServerStdio, "McpServerStdio"),
    (McpServerHttp, "McpServerHttp"),
    (McpServerSse, "McpServerSse"),
    (NewSessionRequest, "NewSessionRequest"),
    (NewSessionResponse, "NewSessionResponse"),
    (PromptRequest, "PromptRequest"),
    (PromptResponse, "PromptResponse"),
    (CancelNotification, "CancelNotification"),
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.mark.parametrize(("cls", "def_name"), SCHEMA_DEFS, ids=[d for _, d in SCHEMA_DEFS])
def test_field_names_and_required_fields_match_the_schema(cls: type[Any], def_name: str) -> None:
    definition = schema()["$defs"][def_name]
    fields = attrs.fields(cls)
    ours = {_camel(f.name) for f in fields}
    required = {_camel(f.name) for f in fields if f.default is attrs.NOTHING}
    assert ours <= set(definition["properties"]), ours - set(definition["properties"])
    assert set(definition.get("required", ())) <= required


@pytest.mark.parametrize(
    ("enum_cls", "def_name"),
    [
        (StopReason, "StopReason"),
        (ToolKind, "ToolKind"),
        (ToolCallStatus, "ToolCallStatus"),
        (PermissionOptionKind, "PermissionOptionKind"),
    ],
)
def test_enums_match_the_schema(enum_cls: type[enum.Enum], def_name: str) -> None:
    consts = {branch["const"] for branch in schema()["$defs"][def_name]["oneOf"]}
    assert {member.value for member in enum_cls} == consts


def test_method_names_are_the_schemas() -> None:
    methods = {d.get("x-method") for d in schema()["$defs"].values()}
    assert {m.value for m in AcpMethod} <= methods


# -- decoding is strict, and says why --------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (
            SessionNotification,
            {"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": []}},
            "malformed SessionNotification: sessionUpdate 'plan' is not a known session update:"
            " expected one of agent_message_chunk, tool_call, tool_call_update, "
            "user_message_chunk @ $.update",
        ),
        (
            SessionNotification,
            {"sessionId": "s", "update": {"content": {"type": "text", "text": "x"}}},
            "malformed SessionNotification: session update has no 'sessionUpdate': expected one"
            " of agent_message_chunk, tool_call, tool_call_update, user_message_chunk"
            " @ $.update",
        ),
        (
            PromptRequest,
            {"sessionId": "s", "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]},
            "malformed PromptRequest: type 'image' is not a known content block: expected one of"
            " resource_link, text @ $.prompt[0]",
        ),
        (
            PromptRequest,
            {"sessionId": "s", "prompt": [{"type": 7}]},
            "malformed PromptRequest: type number is not a known content block: expected one of"
            " resource_link, text @ $.prompt[0]",
        ),
        (
            RequestPermissionResponse,
            {"outcome": {"outcome": "canceled"}},
            "malformed RequestPermissionResponse: outcome 'canceled' is not a known permission"
            " outcome: expected one of cancelled, selected @ $.outcome",
        ),
        (
            RequestPermissionResponse,
            {"outcome": {"outcome": "selected"}},
            "malformed RequestPermissionResponse: required field missing @ $.outcome.optionId",
        ),
        (
            RequestPermissionResponse,
            {"outcome": "cancelled"},
            "malformed RequestPermissionResponse: permission outcome must be an object, got"
            " string @ $.outcome",
        ),
        (
            PromptResponse,
            {"stopReason": "done"},
            "malformed PromptResponse: expected one of end_turn, max_tokens, max_turn_requests,"
            " refusal, cancelled @ $.stopReason",
        ),
        (
            CancelNotification,
            {"sessionId": 12},
            "malformed CancelNotification: expected a string, got number @ $.sessionId",
        ),
        (
            PromptRequest,
            {"sessionId": "s", "prompt": "hello"},
            "malformed PromptRequest: expected an array, got string @ $.prompt",
        ),
        (
            NewSessionRequest,
            {"cwd": "/", "mcpServers": [], "mode": "x"},
            "malformed NewSessionRequest: unexpected keys (mode): acp reserves them; put"
            " extensions under _meta @ $",
        ),
        (
            NewSessionRequest,
            {"cwd": "/", "mcpServers": [{"type": "ws", "name": "w", "url": "u", "headers": []}]},
            "malformed NewSessionRequest: type 'ws' is not a known mcp server: expected one of"
            " http, sse, stdio @ $.mcpServers[0]",
        ),
        (
            InitializeRequest,
            {"protocolVersion": "1"},
            "malformed InitializeRequest: expected a number, got string @ $.protocolVersion",
        ),
        (
            InitializeRequest,
            {"protocolVersion": 1, "clientCapabilities": {"terminal": "false"}},
            "malformed InitializeRequest: expected a boolean, got string"
            " @ $.clientCapabilities.terminal",
        ),
        (
            PromptRequest,
            [],
            "malformed PromptRequest: expected an object, got array @ $",
        ),
    ],
)
def test_bad_values_get_clear_errors(cls: type[Any], data: object, message: str) -> None:
    with pytest.raises(WireDecodeError) as info:
        from_wire(cls, data)
    assert str(info.value) == message


def test_several_problems_are_all_listed() -> None:
    with pytest.raises(WireDecodeError) as info:
        from_wire(ToolCallUpdate, {"toolCallId": 1, "status": "running", "content": [{}]})
    assert info.value.errors == (
        "expected a string, got number @ $.toolCallId",
        "expected one of pending, in_progress, completed, failed @ $.status",
        "tool call content has no 'type': expected one of content, diff, terminal @ $.content[0]",
    )


def test_params_from_wire_raises_invalid_params() -> None:
    with pytest.raises(JsonRpcError) as info:
        params_from_wire(CancelNotification, {})
    assert info.value.code == ErrorCode.INVALID_PARAMS
    assert info.value.message == "invalid params: required field missing @ $.sessionId"
    assert info.value.data == {"errors": ["required field missing @ $.sessionId"]}


# -- the documented tolerances ---------------------------------------------------------------


def test_meta_is_accepted_everywhere_and_dropped() -> None:
    data = {
        "sessionId": "s",
        "prompt": [{"type": "text", "text": "x", "_meta": {"a": 1}}],
        "_meta": {"traceparent": "00-1"},
    }
    validate_client_frame(frame("request", "session/prompt", data))
    value = from_wire(PromptRequest, data)
    assert value == PromptRequest(session_id="s", prompt=(TextContent(text="x"),))
    assert "_meta" not in json.dumps(to_wire(value))


def test_initialize_tolerates_what_newer_clients_add() -> None:
    data = {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": False, "future": True},
            "terminal": False,
            "auth": {"terminal": True},
            "elicitation": {},
            "_meta": {"terminal_output": True},
        },
        "clientInfo": {"name": "zed", "version": "1", "vendor": "x"},
        "somethingNew": [1],
    }
    value = from_wire(InitializeRequest, data)
    assert value == InitializeRequest(
        protocol_version=1,
        client_capabilities=ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True)),
        client_info=Implementation(name="zed", version="1"),
    )


def test_an_unknown_key_outside_initialize_is_refused() -> None:
    with pytest.raises(WireDecodeError, match=r"unexpected keys \(extra\)"):
        from_wire(PromptResponse, {"stopReason": "end_turn", "extra": 1})
