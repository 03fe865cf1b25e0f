"""ACP methods' params and results: ``initialize``, ``session/new``, ``session/load``,
``session/prompt``, ``session/cancel``, and the names of all the methods used here.

The ``initialize`` params and everything inside them (capabilities, ``clientInfo``) tolerate
unknown keys: clients add capabilities within protocol version 1 and send them before any
negotiation, so a newer client must still be able to shake hands.
"""

from __future__ import annotations

import enum
from typing import Final, TypeAlias

import attrs

from .._envelope import CANCEL_REQUEST_METHOD
from ._content import ContentBlock
from ._converter import Bool, Int, Seq, Str, wire, wire_union

__all__ = [
    "PROTOCOL_VERSION",
    "AcpMethod",
    "AgentCapabilities",
    "AuthMethod",
    "CancelNotification",
    "ClientCapabilities",
    "EnvVariable",
    "FileSystemCapabilities",
    "HttpHeader",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "LoadSessionRequest",
    "LoadSessionResponse",
    "McpCapabilities",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NewSessionRequest",
    "NewSessionResponse",
    "PromptCapabilities",
    "PromptRequest",
    "PromptResponse",
    "StopReason",
]

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


class StopReason(enum.StrEnum):
    """Why a prompt turn ended (schema ``StopReason``)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"


# -- initialize -------------------------------------------------------------------------------


@wire(tolerant=True)
@attrs.frozen(kw_only=True)
class FileSystemCapabilities:
    """``clientCapabilities.fs``. Tolerates unknown keys (see the module docstring)."""

    read_text_file: Bool = False
    write_text_file: Bool = False


@wire(tolerant=True)
@attrs.frozen(kw_only=True)
class ClientCapabilities:
    """``initialize`` params' ``clientCapabilities``. Tolerates unknown keys."""

    fs: FileSystemCapabilities | None = None
    terminal: Bool = False


@wire(tolerant=True)
@attrs.frozen(kw_only=True)
class Implementation:
    """``clientInfo``/``agentInfo``: ``{"name", "version", "title"?}``. Tolerates unknown keys."""

    name: Str
    version: Str
    title: Str | None = None


@wire(tolerant=True)
@attrs.frozen(kw_only=True)
class InitializeRequest:
    """Params of ``initialize``. *client_capabilities* is None when the client omits it."""

    protocol_version: Int
    client_capabilities: ClientCapabilities | None = None
    client_info: Implementation | None = None


@wire()
@attrs.frozen(kw_only=True)
class PromptCapabilities:
    """Which extra content block types the agent accepts in prompts (text and links always)."""

    image: Bool = False
    audio: Bool = False
    embedded_context: Bool = False


@wire()
@attrs.frozen(kw_only=True)
class McpCapabilities:
    """Which MCP transports besides stdio the agent can connect to."""

    http: Bool = False
    sse: Bool = False


@wire()
@attrs.frozen(kw_only=True)
class AgentCapabilities:
    """``initialize`` result's ``agentCapabilities``; all-default encodes as ``{}``."""

    load_session: Bool = False
    prompt_capabilities: PromptCapabilities | None = None
    mcp_capabilities: McpCapabilities | None = None


@wire()
@attrs.frozen(kw_only=True)
class AuthMethod:
    """An authentication method the agent offers (the schema's untagged ``agent`` kind)."""

    id: Str
    name: Str
    description: Str | None = None


@wire()
@attrs.frozen(kw_only=True)
class InitializeResponse:
    """Result of ``initialize``. *agent_capabilities* and *auth_methods* are always sent."""

    protocol_version: Int
    agent_capabilities: AgentCapabilities
    auth_methods: Seq[AuthMethod]
    agent_info: Implementation | None = None


# -- session/new, session/load, session/prompt, session/cancel --------------------------------


@wire()
@attrs.frozen(kw_only=True)
class EnvVariable:
    """``{"name", "value"}`` for a stdio MCP server's environment."""

    name: Str
    value: Str


@wire()
@attrs.frozen(kw_only=True)
class HttpHeader:
    """``{"name", "value"}`` for an HTTP or SSE MCP server."""

    name: Str
    value: Str


@wire(tag="stdio")
@attrs.frozen(kw_only=True)
class McpServerStdio:
    """MCP server over stdio: the schema's untagged variant (no ``type`` key on the wire)."""

    name: Str
    command: Str
    args: Seq[Str]
    env: Seq[EnvVariable]


@wire(tag="http")
@attrs.frozen(kw_only=True)
class McpServerHttp:
    """MCP server ``{"type": "http", "name", "url", "headers"}``."""

    name: Str
    url: Str
    headers: Seq[HttpHeader]


@wire(tag="sse")
@attrs.frozen(kw_only=True)
class McpServerSse:
    """MCP server ``{"type": "sse", "name", "url", "headers"}``."""

    name: Str
    url: Str
    headers: Seq[HttpHeader]


McpServer: TypeAlias = McpServerStdio | McpServerHttp | McpServerSse
# The stdio variant has no tag on the wire; "type": "stdio" is accepted too.
wire_union(McpServer, "mcp server", "type", untagged=McpServerStdio)


@wire()
@attrs.frozen(kw_only=True)
class NewSessionRequest:
    """Params of ``session/new``."""

    cwd: Str
    mcp_servers: Seq[McpServer]
    additional_directories: Seq[Str] | None = None


@wire()
@attrs.frozen(kw_only=True)
class NewSessionResponse:
    """Result of ``session/new``."""

    session_id: Str


@wire()
@attrs.frozen(kw_only=True)
class LoadSessionRequest:
    """Params of ``session/load``: reattach to a stored session (advertised by ``loadSession``)."""

    session_id: Str
    cwd: Str
    mcp_servers: Seq[McpServer]
    additional_directories: Seq[Str] | None = None


@wire()
@attrs.frozen(kw_only=True)
class LoadSessionResponse:
    """Result of ``session/load``, sent after the history was replayed; ``{}`` here."""


@wire()
@attrs.frozen(kw_only=True)
class PromptRequest:
    """Params of ``session/prompt``."""

    session_id: Str
    prompt: Seq[ContentBlock]


@wire()
@attrs.frozen(kw_only=True)
class PromptResponse:
    """Result of ``session/prompt``."""

    stop_reason: StopReason


@wire()
@attrs.frozen(kw_only=True)
class CancelNotification:
    """Params of the ``session/cancel`` notification."""

    session_id: Str
