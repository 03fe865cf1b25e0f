"""What the MCP gate says and shows: the fail-closed tool result, the canonical encoding of an
allowed call, the question as the client's user sees it, and reading the revision and the
capabilities a request carries. Pure functions; the relay (``_gate.py``) decides when."""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from .._decision import Answer
from .._display import printable
from .._request import ApprovalRequest
from .._vocabulary import Outcome
from ._frames import encode

__all__ = [
    "INPUT_KEY",
    "advertises_form_elicitation",
    "canonical",
    "elicitation_message",
    "elicited",
    "envelope_version",
    "is_stateless",
    "refusal",
    "refusal_text",
    "stateless_elicits",
]

log = logging.getLogger("broker.mcp")

_WHY = {
    Outcome.REJECTED: "it was refused, by a rule or by the person asked",
    Outcome.UNAVAILABLE: "no one could be asked, so it fails closed",
    Outcome.CANCELLED: "the question was withdrawn before it was answered",
}


def refusal_text(name: str, outcome: Outcome) -> str:
    """The tool result text the client gets for a call the broker did not allow."""
    return (
        f"broker mcp-gate: the tool call {printable(name)!r} was not run: approval "
        f"{outcome.value} ({_WHY[outcome]}). The MCP server never received it."
    )


#: Where a 2026-07-28 request carries its protocol version (the per-request envelope).
_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
#: Where a 2026-07-28 request carries the client's capabilities.
_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
#: The key of the gate's question in an input-required result (2026-07-28).
INPUT_KEY: Final = "broker-approval"


def stateless_elicits(params: dict[str, Any]) -> bool:
    """Whether a 2026-07-28 request's envelope advertises form elicitation."""
    meta = params.get("_meta")
    capabilities = meta.get(_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    return is_stateless(params) and advertises_form_elicitation({"capabilities": capabilities})


def envelope_version(params: object) -> str | None:
    """The protocol version a stateless request's envelope names (``_meta``), or ``None``."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def is_stateless(params: dict[str, Any]) -> bool:
    """Whether a request speaks the stateless revision (2026-07-28 and later): its envelope
    names a protocol version in ``_meta``."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and isinstance(meta.get(_VERSION_META_KEY), str)


def refusal(request_id: object, name: str, outcome: Outcome, *, stateless: bool = False) -> bytes:
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": refusal_text(name, outcome)}],
        "isError": True,
    }
    if stateless:
        # The 2026-07-28 schema requires resultType; older clients may refuse unknown keys.
        result["resultType"] = "complete"
    return encode({"jsonrpc": "2.0", "id": request_id, "result": result})


def _dumps(value: object, *, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"), allow_nan=False)


def canonical(message: dict[str, Any], arguments: object) -> tuple[bytes, str]:
    """The line forwarded for an allowed call and the arguments' text inside it.

    Invariant: the arguments' text is a byte-exact substring of the line (the same encoder
    settings encode the nested value the same way), so what the person was shown is what the
    server reads. A lone surrogate (legal as a JSON escape) cannot be UTF-8: then both are
    ASCII with escapes.
    """
    for ascii_only in (False, True):
        text = _dumps(message, ascii_only=ascii_only)
        try:
            line = (text + "\n").encode("utf-8")
        except UnicodeEncodeError:
            continue
        return line, _dumps(arguments, ascii_only=ascii_only)
    raise AssertionError("unreachable: ASCII JSON always encodes")  # pragma: no cover


def elicitation_message(req: ApprovalRequest) -> str:
    shown = printable(req.display_reason or req.reason or req.tool_name)
    return (
        f"{shown}\n\nAllow this tool call once? Accept runs it once; decline refuses it; "
        "cancel withdraws the question (it is not run)."
    )


_ACTIONS = {
    "accept": Outcome.ALLOWED_ONCE,
    "decline": Outcome.REJECTED,
    "cancel": Outcome.CANCELLED,
}


def elicited(response: dict[str, Any] | None) -> Outcome | Answer:
    if response is None:
        return Outcome.UNAVAILABLE
    result = response.get("result")
    action = result.get("action") if isinstance(result, dict) else None
    outcome = _ACTIONS.get(action) if isinstance(action, str) else None
    if outcome is None:
        log.warning("the client's elicitation answer was not accept/decline/cancel: %r", response)
        return Outcome.UNAVAILABLE
    return Answer(outcome=outcome, by="the MCP client's user (elicitation)")


def advertises_form_elicitation(params: object) -> bool:
    capabilities = params.get("capabilities") if isinstance(params, dict) else None
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    if not isinstance(elicitation, dict):
        return False
    # 2025-06-18 advertises {}; 2025-11-25 may name its modes ({"form": {}, "url": {}}).
    return not elicitation or "form" in elicitation
