"""The Agent Client Protocol (ACP v1) wire layer: JSON-RPC 2.0 over lines, and ACP's values.

Synopsis (an agent on stdio)::

    conn = JsonRpcConnection(send_stream=stdout, receive_stream=stdin)
    conn.on_request(AcpMethod.SESSION_PROMPT, prompt)   # async def prompt(params) -> dict
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.serve)

Handlers decode their params with :func:`params_from_wire` and return :func:`to_wire` values.
"""

from __future__ import annotations

# Explicit: what a user may import from this subpackage.
# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._agent import serve_acp as serve_acp
from ._errors import ConnectionClosed as ConnectionClosed
from ._errors import ErrorCode as ErrorCode
from ._errors import JsonRpcError as JsonRpcError
from ._errors import WireDecodeError as WireDecodeError
from ._jsonrpc import CANCEL_REQUEST_METHOD as CANCEL_REQUEST_METHOD
from ._jsonrpc import DEFAULT_MAX_CONCURRENT_HANDLERS as DEFAULT_MAX_CONCURRENT_HANDLERS
from ._jsonrpc import DEFAULT_MAX_LINE_BYTES as DEFAULT_MAX_LINE_BYTES
from ._jsonrpc import Direction as Direction
from ._jsonrpc import Frame as Frame
from ._jsonrpc import FrameHook as FrameHook
from ._jsonrpc import FrameRecorder as FrameRecorder
from ._jsonrpc import JsonRpcConnection as JsonRpcConnection
from ._jsonrpc import NotificationHandler as NotificationHandler
from ._jsonrpc import RequestHandler as RequestHandler
from ._jsonrpc import RequestId as RequestId
from ._wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._wire import AcpMethod as AcpMethod
from ._wire import AgentCapabilities as AgentCapabilities
from ._wire import AgentMessageChunk as AgentMessageChunk
from ._wire import AuthMethod as AuthMethod
from ._wire import CancelledPermissionOutcome as CancelledPermissionOutcome
from ._wire import CancelNotification as CancelNotification
from ._wire import ClientCapabilities as ClientCapabilities
from ._wire import ContentBlock as ContentBlock
from ._wire import EnvVariable as EnvVariable
from ._wire import FileSystemCapabilities as FileSystemCapabilities
from ._wire import HttpHeader as HttpHeader
from ._wire import Implementation as Implementation
from ._wire import InitializeRequest as InitializeRequest
from ._wire import InitializeResponse as InitializeResponse
from ._wire import McpCapabilities as McpCapabilities
from ._wire import McpServer as McpServer
from ._wire import McpServerHttp as McpServerHttp
from ._wire import McpServerSse as McpServerSse
from ._wire import McpServerStdio as McpServerStdio
from ._wire import NewSessionRequest as NewSessionRequest
from ._wire import NewSessionResponse as NewSessionResponse
from ._wire import PermissionOption as PermissionOption
from ._wire import PermissionOptionKind as PermissionOptionKind
from ._wire import PromptCapabilities as PromptCapabilities
from ._wire import PromptRequest as PromptRequest
from ._wire import PromptResponse as PromptResponse
from ._wire import RequestPermissionOutcome as RequestPermissionOutcome
from ._wire import RequestPermissionRequest as RequestPermissionRequest
from ._wire import RequestPermissionResponse as RequestPermissionResponse
from ._wire import ResourceLink as ResourceLink
from ._wire import SelectedPermissionOutcome as SelectedPermissionOutcome
from ._wire import SessionNotification as SessionNotification
from ._wire import SessionUpdate as SessionUpdate
from ._wire import StopReason as StopReason
from ._wire import TextContent as TextContent
from ._wire import ToolCall as ToolCall
from ._wire import ToolCallContent as ToolCallContent
from ._wire import ToolCallContentBlock as ToolCallContentBlock
from ._wire import ToolCallDiff as ToolCallDiff
from ._wire import ToolCallLocation as ToolCallLocation
from ._wire import ToolCallStatus as ToolCallStatus
from ._wire import ToolCallTerminal as ToolCallTerminal
from ._wire import ToolCallUpdate as ToolCallUpdate
from ._wire import ToolKind as ToolKind
from ._wire import from_wire as from_wire
from ._wire import params_from_wire as params_from_wire
from ._wire import to_wire as to_wire

__all__ = [
    "CANCEL_REQUEST_METHOD",
    "DEFAULT_MAX_CONCURRENT_HANDLERS",
    "DEFAULT_MAX_LINE_BYTES",
    "PROTOCOL_VERSION",
    "AcpMethod",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AuthMethod",
    "CancelNotification",
    "CancelledPermissionOutcome",
    "ClientCapabilities",
    "ConnectionClosed",
    "ContentBlock",
    "Direction",
    "EnvVariable",
    "ErrorCode",
    "FileSystemCapabilities",
    "Frame",
    "FrameHook",
    "FrameRecorder",
    "HttpHeader",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "JsonRpcConnection",
    "JsonRpcError",
    "McpCapabilities",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NewSessionRequest",
    "NewSessionResponse",
    "NotificationHandler",
    "PermissionOption",
    "PermissionOptionKind",
    "PromptCapabilities",
    "PromptRequest",
    "PromptResponse",
    "RequestHandler",
    "RequestId",
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
    "WireDecodeError",
    "from_wire",
    "params_from_wire",
    "to_wire",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
