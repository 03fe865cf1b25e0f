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

One concept a module: :mod:`._converter` (strict scalars, the ``@wire`` decorator that
registers each class once, tagged unions, ``to_wire``/``from_wire``), :mod:`._content`
(content blocks, tool call content), :mod:`._updates` (``session/update``),
:mod:`._permission` (``session/request_permission``) and :mod:`._methods` (the other
methods' params and results, the method names).
"""

from __future__ import annotations

from ._content import ContentBlock as ContentBlock
from ._content import ResourceLink as ResourceLink
from ._content import TextContent as TextContent
from ._content import ToolCallContent as ToolCallContent
from ._content import ToolCallContentBlock as ToolCallContentBlock
from ._content import ToolCallDiff as ToolCallDiff
from ._content import ToolCallLocation as ToolCallLocation
from ._content import ToolCallTerminal as ToolCallTerminal
from ._converter import from_wire as from_wire
from ._converter import params_from_wire as params_from_wire
from ._converter import to_wire as to_wire
from ._methods import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._methods import AcpMethod as AcpMethod
from ._methods import AgentCapabilities as AgentCapabilities
from ._methods import AuthMethod as AuthMethod
from ._methods import CancelNotification as CancelNotification
from ._methods import ClientCapabilities as ClientCapabilities
from ._methods import EnvVariable as EnvVariable
from ._methods import FileSystemCapabilities as FileSystemCapabilities
from ._methods import HttpHeader as HttpHeader
from ._methods import Implementation as Implementation
from ._methods import InitializeRequest as InitializeRequest
from ._methods import InitializeResponse as InitializeResponse
from ._methods import LoadSessionRequest as LoadSessionRequest
from ._methods import LoadSessionResponse as LoadSessionResponse
from ._methods import McpCapabilities as McpCapabilities
from ._methods import McpServer as McpServer
from ._methods import McpServerHttp as McpServerHttp
from ._methods import McpServerSse as McpServerSse
from ._methods import McpServerStdio as McpServerStdio
from ._methods import NewSessionRequest as NewSessionRequest
from ._methods import NewSessionResponse as NewSessionResponse
from ._methods import PromptCapabilities as PromptCapabilities
from ._methods import PromptRequest as PromptRequest
from ._methods import PromptResponse as PromptResponse
from ._methods import StopReason as StopReason
from ._permission import CancelledPermissionOutcome as CancelledPermissionOutcome
from ._permission import PermissionOption as PermissionOption
from ._permission import PermissionOptionKind as PermissionOptionKind
from ._permission import RequestPermissionOutcome as RequestPermissionOutcome
from ._permission import RequestPermissionRequest as RequestPermissionRequest
from ._permission import RequestPermissionResponse as RequestPermissionResponse
from ._permission import SelectedPermissionOutcome as SelectedPermissionOutcome
from ._updates import AgentMessageChunk as AgentMessageChunk
from ._updates import SessionNotification as SessionNotification
from ._updates import SessionUpdate as SessionUpdate
from ._updates import ToolCall as ToolCall
from ._updates import ToolCallStatus as ToolCallStatus
from ._updates import ToolCallUpdate as ToolCallUpdate
from ._updates import ToolKind as ToolKind
from ._updates import UserMessageChunk as UserMessageChunk

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
    "LoadSessionRequest",
    "LoadSessionResponse",
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
    "UserMessageChunk",
    "from_wire",
    "params_from_wire",
    "to_wire",
]
