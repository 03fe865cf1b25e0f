"""The MCP gate (``broker mcp-gate``): a transparent relay between an MCP client on stdio and
an MCP server (a child process on stdio, or a URL over streamable HTTP) that asks the broker
before any ``tools/call`` reaches the server; and :class:`GatedTools`, the same question in
front of an MCP client in your own process."""

from __future__ import annotations

from ._client import GatedTools as GatedTools
from ._client import ToolCaller as ToolCaller
from ._gate import relay as relay
from ._http import UpstreamUrl as UpstreamUrl
from ._messages import refusal_text as refusal_text
from ._rules import GateRules as GateRules
from ._rules import RulesError as RulesError
from ._serve import serve_mcp_gate as serve_mcp_gate

__all__ = [
    "GateRules",
    "GatedTools",
    "RulesError",
    "ToolCaller",
    "UpstreamUrl",
    "refusal_text",
    "relay",
    "serve_mcp_gate",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
