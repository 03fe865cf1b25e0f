"""ACP ``session/request_permission``: the question the agent asks its client, and the answer.

The answer (the response and both outcome variants) tolerates unknown keys: the schema leaves
those objects open, and a newer client's extra key must not turn a real *Allow* into
``unavailable``. Wrong types and unknown outcome tags are still refused (the answerer then
fails closed).
"""

from __future__ import annotations

import enum
from typing import TypeAlias

import attrs

from ._converter import Seq, Str, wire, wire_union
from ._updates import ToolCallUpdate

__all__ = [
    "CancelledPermissionOutcome",
    "PermissionOption",
    "PermissionOptionKind",
    "RequestPermissionOutcome",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "SelectedPermissionOutcome",
]


class PermissionOptionKind(enum.StrEnum):
    """Schema ``PermissionOptionKind``: a hint for the client's buttons."""

    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"
    REJECT_ONCE = "reject_once"
    REJECT_ALWAYS = "reject_always"


@wire()
@attrs.frozen(kw_only=True)
class PermissionOption:
    """One button of a permission prompt: ``{"optionId", "name", "kind"}``."""

    option_id: Str
    name: Str
    kind: PermissionOptionKind


@wire()
@attrs.frozen(kw_only=True)
class RequestPermissionRequest:
    """Params of ``session/request_permission`` (agent -> client)."""

    session_id: Str
    tool_call: ToolCallUpdate
    options: Seq[PermissionOption]


@wire(tag="cancelled", tolerant=True)
@attrs.frozen(kw_only=True)
class CancelledPermissionOutcome:
    """Outcome ``{"outcome": "cancelled"}``: the prompt turn was cancelled."""


@wire(tag="selected", tolerant=True)
@attrs.frozen(kw_only=True)
class SelectedPermissionOutcome:
    """Outcome ``{"outcome": "selected", "optionId"}``; the id may be one we never offered."""

    option_id: Str


RequestPermissionOutcome: TypeAlias = CancelledPermissionOutcome | SelectedPermissionOutcome
wire_union(RequestPermissionOutcome, "permission outcome", "outcome")


@wire(tolerant=True)
@attrs.frozen(kw_only=True)
class RequestPermissionResponse:
    """Result of ``session/request_permission``."""

    outcome: RequestPermissionOutcome
