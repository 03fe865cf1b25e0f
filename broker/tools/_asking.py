"""Putting a tool call's question through the approval seam without ever raising.

Both the runtime's ask routing (contract §8.1) and the bash escalation gate (§8.2) ask here. A
question that cannot be put or recorded — no open turn, the session closed or crashed, the broker
shut down, an audit append that failed or was refused — becomes an error tool result that names the
cause, and the tool does not run (the seed runtime does the same). Only the caller's own
cancellation propagates.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._errors import BrokerError
from . import _texts
from ._call import ToolResult

if TYPE_CHECKING:
    from .._broker import Broker
    from .._questions import Decision
    from .._request import ApprovalRequest

__all__ = ["ask_or_refuse"]

log = logging.getLogger("broker.tools")


async def ask_or_refuse(broker: Broker, req: ApprovalRequest) -> Decision | ToolResult:
    """The broker's decision for *req*, or the error result when the question cannot be put.

    Cancellation: as :meth:`Broker.request_decision` — the question is withdrawn and audited,
    then :class:`trio.Cancelled` propagates.
    """
    try:
        return await broker.request_decision(req)
    except (BrokerError, ValueError) as exc:
        # ValueError: the agent belongs to another broker (a composition mistake) — still a
        # question that could not be put, so it fails closed like the others.
        log.warning("approval for tool %r could not be put: %s", req.tool_name, exc)
        await trio.lowlevel.checkpoint()
        return ToolResult.error(_texts.ask_failed(req.tool_name, exc))
