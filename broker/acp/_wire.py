"""ACP v1 wire values (agent side) as frozen attrs classes, encoded by the one converter.

Field names follow the ACP v1 JSON Schema (``tests/fixtures/acp/schema.json``) in snake_case;
the converter renames them to camelCase and omits unset optionals. Only what the agent side
needs is modelled: ``initialize``, ``session/new``, ``session/prompt``, ``session/cancel``,
``session/update`` (three variants) and the client method ``session/request_permission``.

Decoding is strict, with three deliberate tolerances (see ``design/acp-wire.md``):

* ``_meta`` (ACP's extension point, allowed on every object) is accepted and dropped: we never
  act on it, and it never reaches our values.
* The ``initialize`` params and everything inside them (capabilities, ``clientInfo``) ignore
  unknown keys: clients add capabilities within protocol version 1 and send them before any
  negotiation, so a newer client must still be able to shake hands.
* The answer to ``session/request_permission`` (the response and both outcome variants)
  ignores unknown keys: the schema leaves those objects open, and a newer client's extra key
  must not turn a real *Allow* into ``unavailable``. Wrong types and unknown outcome tags are
  still refused (the answerer then fails closed).

Everything else rejects unknown keys (ACP forbids custom root fields: they belong in
``_meta``), JSON values of the wrong type (no ``"1"`` for ``1``, no ``"false"`` for ``false``)
and unknown tags, with a :class:`WireDecodeError` that names each path in camelCase.
"""

from __future__ import annotations

import enum
import typing
from typing import Annotated, Any, Final, TypeAlias, TypeVar

import attrs
import cattrs

from .._cattrs_errors import StructureProblem, problems
from .._codec import converter, register_wire_type
from .._json_names import camel, json_type
from ._envelope import CANCEL_REQUEST_METHOD
from ._errors import ErrorCode, JsonRpcError, WireDecodeError

__all__ = [
    "PROTOCOL_VERSION",
    "AcpMethod",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AuthMethod",
    "CancelNotification",
    "CancelledPermissionOutcome",
    "ClientCapabilities",
    "ContentBlock",
    "EnvVariable",
    "FileSystemCapabilities",
    "HttpHeader",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "McpCapabilities",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NewSessionRequest",
    "NewSessionResponse",
    "PermissionOption",
    "PermissionOptionKind",
    "PromptCapabilities",
    "PromptRequest",
    "PromptResponse",
    "RequestPermissionOutcome",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "ResourceLink",
    "SelectedPermissionOutcome",
    "SessionNotification",
    "SessionUpdate",
    "StopReason",
    "TextContent",
    "ToolCall",
    "ToolCallContent",
    "ToolCallContentBlock",
    "ToolCallDiff",
    "ToolCallLocation",
    "ToolCallStatus",
    "ToolCallTerminal",
    "ToolCallUpdate",
    "ToolKind",
    "from_wire",
    "params_from_wire",
    "to_wire",
]

T = TypeVar("T")

#: The ACP major version this module speaks (schema ``ProtocolVersion``).
PROTOCOL_VERSION: Final = 1


class AcpMethod(enum.StrEnum):
    """The ACP method names used here (a ``str``: pass it straight to ``request``/``notify``)."""

    INITIALIZE = "initialize"
    SESSION_NEW = "session/new"
    SESSION_LOAD = "session/load"
    SESSION_PROMPT = "session/prompt"
    SESSION_CANCEL = "session/cancel"
    SESSION_UPDATE = "session/update"
    SESSION_REQUEST_PERMISSION = "session/request_permission"
    CANCEL_REQUEST = CANCEL_REQUEST_METHOD


# -- strict JSON scalars ----------------------------------------------------------------------


class _Strict:
    """``Annotated`` marker: accept only this exact JSON type (cattrs would coerce by default)."""


Str: TypeAlias = Annotated[str, _Strict]
Int: TypeAlias = Annotated[int, _Strict]
Bool: TypeAlias = Annotated[bool, _Strict]
Object: TypeAlias = Annotated[dict[str, Any], _Strict]
#: A JSON array, structured item by item (a string is not a sequence of characters here).
Seq: TypeAlias = Annotated[tuple[T, ...], _Strict]


#: What a peer is told to do with keys ACP does not define (they belong in ``_meta``).
_EXTRA_KEYS_HINT = "acp reserves them; put extensions under _meta"


def _is_strict(type_: object) -> bool:
    return typing.get_origin(type_) is Annotated and _Strict in getattr(type_, "__metadata__", ())


def _structure_strict(value: object, type_: Any) -> Any:
    base = type_.__origin__
    origin = typing.get_origin(base) or base
    expected = {str: "string", int: "number", bool: "boolean", tuple: "array", dict: "object"}
    ok = {
        str: isinstance(value, str),
        int: type(value) is int,
        bool: isinstance(value, bool),
        tuple: isinstance(value, list),
        dict: isinstance(value, dict),
    }[origin]
    if not ok:
        article = "an" if expected[origin][0] in "ao" else "a"
        raise StructureProblem(f"expected {article} {expected[origin]}, got {json_type(value)}")
    if origin is tuple or origin is dict:
        return converter.structure(value, base)
    return value


converter.register_structure_hook_func(_is_strict, _structure_strict)


# -- enums ------------------------------------------------------------------------------------


class StopReason(enum.StrEnum):
    """Why a prompt turn ended (schema ``StopReason``)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"


class ToolKind(enum.StrEnum):
    """What a tool call does, for the client's icons (schema ``ToolKind``)."""

    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    THINK = "think"
    FETCH = "fetch"
    SWITCH_MODE = "switch_mode"
    OTHER = "other"


class ToolCallStatus(enum.StrEnum):
    """Schema ``ToolCallStatus``."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class PermissionOptionKind(enum.StrEnum):
    """Schema ``PermissionOptionKind``: a hint for the client's buttons."""

    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"
    REJECT_ONCE = "reject_once"
    REJECT_ALWAYS = "reject_always"


# -- content ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TextContent:
    """Content block ``{"type": "text", "text"}``. *annotations* is kept as opaque JSON."""

    text: Str
    annotations: Object | None = None


@attrs.frozen(kw_only=True)
class ResourceLink:
    """Content block ``{"type": "resource_link", "uri", "name", ...}`` (every agent takes it)."""

    uri: Str
    name: Str
    title: Str | None = None
    description: Str | None = None
    mime_type: Str | None = None
    size: Int | None = None
    annotations: Object | None = None


ContentBlock: TypeAlias = TextContent | ResourceLink


@attrs.frozen(kw_only=True)
class ToolCallContentBlock:
    """Tool call content ``{"type": "content", "content": <content block>}``."""

    content: ContentBlock


@attrs.frozen(kw_only=True)
class ToolCallDiff:
    """Tool call content ``{"type": "diff", "path", "oldText"?, "newText"}``."""

    path: Str
    new_text: Str
    old_text: Str | None = None


@attrs.frozen(kw_only=True)
class ToolCallTerminal:
    """Tool call content ``{"type": "terminal", "terminalId"}``."""

    terminal_id: Str


ToolCallContent: TypeAlias = ToolCallContentBlock | ToolCallDiff | ToolCallTerminal


@attrs.frozen(kw_only=True)
class ToolCallLocation:
    """A file (and line) a tool call touches."""

    path: Str
    line: Int | None = None


# -- session/update ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class UserMessageChunk:
    """Update ``user_message_chunk``: a piece of the user's prompt (replayed by session/load)."""

    content: ContentBlock
    message_id: Str | None = None


@attrs.frozen(kw_only=True)
class AgentMessageChunk:
    """Update ``agent_message_chunk``: a piece of the agent's reply."""

    content: ContentBlock
    message_id: Str | None = None


@attrs.frozen(kw_only=True)
class ToolCall:
    """Update ``tool_call``: a new tool call. Unset fields are omitted on the wire."""

    tool_call_id: Str
    title: Str
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    content: Seq[ToolCallContent] = ()
    locations: Seq[ToolCallLocation] = ()
    raw_input: Any = None
    raw_output: Any = None


@attrs.frozen(kw_only=True)
class ToolCallUpdate:
    """Update ``tool_call_update``, and the ``toolCall`` of a permission request.

    Only *tool_call_id* is required; a field left None is "unchanged" and omitted, while
    ``content=()`` sends an empty list (it clears the content).
    """

    tool_call_id: Str
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    title: Str | None = None
    content: Seq[ToolCallContent] | None = None
    locations: Seq[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


SessionUpdate: TypeAlias = UserMessageChunk | AgentMessageChunk | ToolCall | ToolCallUpdate


@attrs.frozen(kw_only=True)
class SessionNotification:
    """Params of the ``session/update`` notification."""

    session_id: Str
    update: SessionUpdate


# -- session/request_permission ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PermissionOption:
    """One button of a permission prompt: ``{"optionId", "name", "kind"}``."""

    option_id: Str
    name: Str
    kind: PermissionOptionKind


@attrs.frozen(kw_only=True)
class RequestPermissionRequest:
    """Params of ``session/request_permission`` (agent -> client)."""

    session_id: Str
    tool_call: ToolCallUpdate
    options: Seq[PermissionOption]


@attrs.frozen(kw_only=True)
class CancelledPermissionOutcome:
    """Outcome ``{"outcome": "cancelled"}``: the prompt turn was cancelled."""


@attrs.frozen(kw_only=True)
class SelectedPermissionOutcome:
    """Outcome ``{"outcome": "selected", "optionId"}``; the id may be one we never offered."""

    option_id: Str


RequestPermissionOutcome: TypeAlias = CancelledPermissionOutcome | SelectedPermissionOutcome


@attrs.frozen(kw_only=True)
class RequestPermissionResponse:
    """Result of ``session/request_permission``."""

    outcome: RequestPermissionOutcome


# -- initialize -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FileSystemCapabilities:
    """``clientCapabilities.fs``. Tolerates unknown keys (see the module docstring)."""

    read_text_file: Bool = False
    write_text_file: Bool = False


@attrs.frozen(kw_only=True)
class ClientCapabilities:
    """``initialize`` params' ``clientCapabilities``. Tolerates unknown keys."""

    fs: FileSystemCapabilities | None = None
    terminal: Bool = False


@attrs.frozen(kw_only=True)
class Implementation:
    """``clientInfo``/``agentInfo``: ``{"name", "version", "title"?}``. Tolerates unknown keys."""

    name: Str
    version: Str
    title: Str | None = None


@attrs.frozen(kw_only=True)
class InitializeRequest:
    """Params of ``initialize``. *client_capabilities* is None when the client omits it."""

    protocol_version: Int
    client_capabilities: ClientCapabilities | None = None
    client_info: Implementation | None = None


@attrs.frozen(kw_only=True)
class PromptCapabilities:
    """Which extra content block types the agent accepts in prompts (text and links always)."""

    image: Bool = False
    audio: Bool = False
    embedded_context: Bool = False


@attrs.frozen(kw_only=True)
class McpCapabilities:
    """Which MCP transports besides stdio the agent can connect to."""

    http: Bool = False
    sse: Bool = False


@attrs.frozen(kw_only=True)
class AgentCapabilities:
    """``initialize`` result's ``agentCapabilities``; all-default encodes as ``{}``."""

    load_session: Bool = False
    prompt_capabilities: PromptCapabilities | None = None
    mcp_capabilities: McpCapabilities | None = None


@attrs.frozen(kw_only=True)
class AuthMethod:
    """An authentication method the agent offers (the schema's untagged ``agent`` kind)."""

    id: Str
    name: Str
    description: Str | None = None


@attrs.frozen(kw_only=True)
class InitializeResponse:
    """Result of ``initialize``. *agent_capabilities* and *auth_methods* are always sent."""

    protocol_version: Int
    agent_capabilities: AgentCapabilities
    auth_methods: Seq[AuthMethod]
    agent_info: Implementation | None = None


# -- session/new, session/prompt, session/cancel ----------------------------------------------


@attrs.frozen(kw_only=True)
class EnvVariable:
    """``{"name", "value"}`` for a stdio MCP server's environment."""

    name: Str
    value: Str


@attrs.frozen(kw_only=True)
class HttpHeader:
    """``{"name", "value"}`` for an HTTP or SSE MCP server."""

    name: Str
    value: Str


@attrs.frozen(kw_only=True)
class McpServerStdio:
    """MCP server over stdio: the schema's untagged variant (no ``type`` key on the wire)."""

    name: Str
    command: Str
    args: Seq[Str]
    env: Seq[EnvVariable]


@attrs.frozen(kw_only=True)
class McpServerHttp:
    """MCP server ``{"type": "http", "name", "url", "headers"}``."""

    name: Str
    url: Str
    headers: Seq[HttpHeader]


@attrs.frozen(kw_only=True)
class McpServerSse:
    """MCP server ``{"type": "sse", "name", "url", "headers"}``."""

    name: Str
    url: Str
    headers: Seq[HttpHeader]


McpServer: TypeAlias = McpServerStdio | McpServerHttp | McpServerSse


@attrs.frozen(kw_only=True)
class NewSessionRequest:
    """Params of ``session/new``."""

    cwd: Str
    mcp_servers: Seq[McpServer]
    additional_directories: Seq[Str] | None = None


@attrs.frozen(kw_only=True)
class NewSessionResponse:
    """Result of ``session/new``."""

    session_id: Str


@attrs.frozen(kw_only=True)
class LoadSessionRequest:
    """Params of ``session/load``: reattach to a stored session (advertised by ``loadSession``)."""

    session_id: Str
    cwd: Str
    mcp_servers: Seq[McpServer]
    additional_directories: Seq[Str] | None = None


@attrs.frozen(kw_only=True)
class LoadSessionResponse:
    """Result of ``session/load``, sent after the history was replayed; ``{}`` here."""


@attrs.frozen(kw_only=True)
class PromptRequest:
    """Params of ``session/prompt``."""

    session_id: Str
    prompt: Seq[ContentBlock]


@attrs.frozen(kw_only=True)
class PromptResponse:
    """Result of ``session/prompt``."""

    stop_reason: StopReason


@attrs.frozen(kw_only=True)
class CancelNotification:
    """Params of the ``session/cancel`` notification."""

    session_id: Str


# -- registration -----------------------------------------------------------------------------

_META = "_meta"
_TOLERANT: frozenset[type[Any]] = frozenset(
    {
        InitializeRequest,
        ClientCapabilities,
        FileSystemCapabilities,
        Implementation,
        # The schema leaves the permission answer open (no additionalProperties: false): a
        # newer client's extra key must not turn a real "Allow" into `unavailable`.
        RequestPermissionResponse,
        CancelledPermissionOutcome,
        SelectedPermissionOutcome,
    }
)


def _register(cls: type[Any]) -> None:
    register_wire_type(cls)
    generated = converter.get_structure_hook(cls)
    known = frozenset(camel(f.name) for f in attrs.fields(cls))
    tolerant = cls in _TOLERANT

    def structure(value: object, type_: Any) -> Any:
        if not isinstance(value, dict):
            raise StructureProblem(f"expected an object, got {json_type(value)}")
        if tolerant:
            value = {k: v for k, v in value.items() if k in known}
        elif _META in value:
            value = {k: v for k, v in value.items() if k != _META}
        return generated(value, type_)

    converter.register_structure_hook(cls, structure)


def _register_union(
    union: Any,
    what: str,
    tag_key: str,
    variants: dict[str, type[Any]],
    *,
    untagged: type[Any] | None = None,
) -> None:
    """Encode and decode *union* by the string at *tag_key* (our own errors for bad tags)."""
    tags = {cls: tag for tag, cls in variants.items()}
    expected = ", ".join(sorted(variants))

    def structure(value: object, _type: Any) -> Any:
        if not isinstance(value, dict):
            raise StructureProblem(f"{what} must be an object, got {json_type(value)}")
        if tag_key not in value:
            if untagged is not None:
                return converter.structure(value, untagged)
            raise StructureProblem(f"{what} has no {tag_key!r}: expected one of {expected}")
        tag = value[tag_key]
        cls = variants.get(tag) if isinstance(tag, str) else None
        if cls is None:
            shown = repr(tag) if isinstance(tag, str) and len(tag) <= 40 else json_type(tag)
            raise StructureProblem(
                f"{tag_key} {shown} is not a known {what}: expected one of {expected}"
            )
        return converter.structure({k: v for k, v in value.items() if k != tag_key}, cls)

    def unstructure(value: Any) -> dict[str, Any]:
        body: dict[str, Any] = converter.unstructure(value, type(value))
        if type(value) is untagged:
            return body
        return {tag_key: tags[type(value)], **body}

    def matches(type_: Any) -> bool:
        return bool(type_ == union)

    converter.register_structure_hook_func(matches, structure)
    converter.register_unstructure_hook_func(matches, unstructure)


# Unions first: a class's generated hooks look up its fields' hooks when registered.
_register_union(
    ContentBlock, "content block", "type", {"text": TextContent, "resource_link": ResourceLink}
)
_register_union(
    ToolCallContent,
    "tool call content",
    "type",
    {"content": ToolCallContentBlock, "diff": ToolCallDiff, "terminal": ToolCallTerminal},
)
_register_union(
    SessionUpdate,
    "session update",
    "sessionUpdate",
    {
        "user_message_chunk": UserMessageChunk,
        "agent_message_chunk": AgentMessageChunk,
        "tool_call": ToolCall,
        "tool_call_update": ToolCallUpdate,
    },
)
_register_union(
    RequestPermissionOutcome,
    "permission outcome",
    "outcome",
    {"cancelled": CancelledPermissionOutcome, "selected": SelectedPermissionOutcome},
)
# The stdio variant has no tag on the wire; "type": "stdio" is accepted too.
_register_union(
    McpServer,
    "mcp server",
    "type",
    {"stdio": McpServerStdio, "http": McpServerHttp, "sse": McpServerSse},
    untagged=McpServerStdio,
)

for _cls in (
    TextContent,
    ResourceLink,
    ToolCallContentBlock,
    ToolCallDiff,
    ToolCallTerminal,
    ToolCallLocation,
    UserMessageChunk,
    AgentMessageChunk,
    ToolCall,
    ToolCallUpdate,
    SessionNotification,
    PermissionOption,
    RequestPermissionRequest,
    CancelledPermissionOutcome,
    SelectedPermissionOutcome,
    RequestPermissionResponse,
    FileSystemCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeRequest,
    PromptCapabilities,
    McpCapabilities,
    AgentCapabilities,
    AuthMethod,
    InitializeResponse,
    EnvVariable,
    HttpHeader,
    McpServerStdio,
    McpServerHttp,
    McpServerSse,
    NewSessionRequest,
    NewSessionResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    PromptRequest,
    PromptResponse,
    CancelNotification,
):
    _register(_cls)


# -- encode / decode --------------------------------------------------------------------------


def to_wire(value: Any) -> dict[str, Any]:
    """The JSON object of a wire value (camelCase keys, unset optionals omitted)."""
    encoded: dict[str, Any] = converter.unstructure(value, type(value))
    return encoded


def from_wire(cls: type[T], data: object) -> T:
    """Decode *data* (parsed JSON) as *cls*; raises :class:`WireDecodeError` listing each problem.

    Synopsis::

        answer = from_wire(RequestPermissionResponse, await conn.request(...))
    """
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        errors = problems(exc, extra_keys_hint=_EXTRA_KEYS_HINT)
        raise WireDecodeError(f"malformed {cls.__name__}: {'; '.join(errors)}", errors) from exc


def params_from_wire(cls: type[T], params: object) -> T:
    """:func:`from_wire` for a request handler: a bad value becomes -32602 "invalid params".

    The error's ``data`` is ``{"errors": [...]}``, each entry naming its path (it quotes key
    names and tags, never values). Raise it on from the handler as is.
    """
    try:
        return from_wire(cls, params)
    except WireDecodeError as exc:
        raise JsonRpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params: {'; '.join(exc.errors)}",
            {"errors": list(exc.errors)},
        ) from exc
