"""Gate the tool calls of an MCP client in your own process: :class:`GatedTools`.

Synopsis (a trio agent runtime with the MCP Python SDK, which runs on anyio under trio)::

    async with open_broker(store="log.sqlite") as broker, broker.open_session() as session:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            tools = GatedTools(broker=broker, agent=session.agent, client=mcp)
            async with broker.answerer(my_answerer), session.turn():
                result = await tools.call_tool("write_file", {"path": "a.txt", "content": "x"})

``call_tool`` asks the broker first (``approval/asked`` with the MCP tool name, a call id and
``MCP tool call: <name> <arguments>``), in the caller's task, inside the caller's open turn.
Only ``allowed-once`` calls the client's ``call_tool``, with arguments decoded from the very
text the question showed (a copy: changing the caller's dict while the question waits changes
nothing). Any other outcome returns the SDK's ``CallToolResult`` with ``isError`` and the same
fail-closed text ``broker mcp-gate`` sends; the server is never called.

The MCP SDK is not a dependency of the broker: *client* is anything with the SDK's
``call_tool(name, arguments, ...)``, and ``mcp`` is imported only to build a refusal.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .._agent import Agent
from .._broker import Broker
from .._request import ApprovalRequest
from .._vocabulary import Outcome
from ._calls import REASON_ARGUMENTS
from ._messages import refusal_text

if TYPE_CHECKING:
    from mcp import types

__all__ = ["GatedTools", "ToolCaller"]


class ToolCaller(Protocol):
    """What :class:`GatedTools` needs of an MCP client (the SDK's ``ClientSession``)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any: ...


@attrs.define(eq=False)
class GatedTools:
    """An MCP client's ``call_tool`` behind a broker question (module doc)."""

    broker: Broker
    agent: Agent
    client: ToolCaller
    _call_ids: Iterator[int] = attrs.field(init=False, factory=lambda: itertools.count(1))

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> types.CallToolResult:
        """Ask, then call the tool once if allowed; else a refusal result (module doc).

        Raises what :meth:`Broker.request` raises (``TurnError`` outside an open turn,
        ``ValueError`` for an empty *name*) and :class:`ValueError` for arguments that are not
        a JSON object. Cancellation: while asking, the question settles ``cancelled`` and
        ``Cancelled`` propagates; while calling, as the client's ``call_tool``.
        """
        if arguments is not None and not isinstance(arguments, dict):
            raise ValueError(
                f"arguments must be a dict of JSON values or None, got {type(arguments).__name__}"
            )
        try:
            shown = json.dumps(
                arguments or {}, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"arguments must be JSON values ({exc}): pass strings, numbers, lists and dicts"
            ) from None
        cut = shown if len(shown) <= REASON_ARGUMENTS else shown[:REASON_ARGUMENTS] + "…"
        outcome = await self.broker.request(
            ApprovalRequest(
                agent=self.agent,
                tool_name=name,
                call_id=f"mcp-{next(self._call_ids)}",
                reason=f"MCP tool call: {name} {cut}",
                display_reason=f"MCP tool call: {name}, arguments: {shown}",
            )
        )
        if outcome is Outcome.ALLOWED_ONCE:
            result: types.CallToolResult = await self.client.call_tool(
                name, json.loads(shown) if arguments is not None else None, **kwargs
            )
            return result
        from mcp import types as mcp_types

        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=refusal_text(name, outcome))],
            is_error=True,
        )
