"""What Claude Code and Codex send a command hook, and the answers each of them honours.

Both agents run a command hook with one JSON object on stdin (``session_id``, ``cwd``,
``hook_event_name``, ``tool_name``, ``tool_input``, and for ``PreToolUse`` a ``tool_use_id``)
and read its decision from stdout. Neither treats a hook that crashes, times out or prints
something it does not understand as a "no": they go on under their own rules. So every answer
here is one the agent honours as a refusal unless the service allowed the call:

=================  ==========================================  ===============================
agent / event      allowed                                     anything else
=================  ==========================================  ===============================
Claude Code        ``permissionDecision: "allow"``              ``permissionDecision: "deny"``
``PreToolUse``                                                  with the reason
Claude Code        ``decision: {"behavior": "allow"}``          ``{"behavior": "deny",
``PermissionReq``                                               "message": reason}``
Codex              nothing printed (``PreToolUse`` cannot       ``permissionDecision: "deny"``
``PreToolUse``     allow; Codex goes on with its own policy)    with the reason
Codex              ``decision: {"behavior": "allow"}``          ``{"behavior": "deny",
``PermissionReq``                                               "message": reason}``
=================  ==========================================  ===============================

An event this module does not know gets no JSON (an agent ignores an answer naming another
event): the hook exits 2 with the reason on stderr, which both agents treat as blocking.
Stdlib only, like the rest of :mod:`broker_hook`.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time (module doc of broker_hook)
    from typing import Any

__all__ = ["AGENTS", "EVENTS", "HookInput", "HookInputError", "answer", "read_input"]

#: The agents this hook speaks for: the name on the command line and how people call it.
AGENTS = {"claude-code": "Claude Code", "codex": "Codex"}
#: The events a decision can be given for.
EVENTS = ("PreToolUse", "PermissionRequest")
#: The largest hook input read (a tool's arguments included); more is refused.
MAX_INPUT = 1 << 20


class HookInputError(ValueError):
    """Stdin is not a hook input this command can decide (the message says why)."""


class HookInput:
    """The fields of a hook's stdin the service needs, checked."""

    __slots__ = ("arguments", "call_id", "cwd", "event", "session", "tool")

    def __init__(
        self,
        *,
        event: str,
        session: str,
        tool: str,
        arguments: dict[str, Any],
        call_id: str | None,
        cwd: str | None,
    ) -> None:
        self.event = event
        self.session = session
        self.tool = tool
        self.arguments = arguments
        self.call_id = call_id
        self.cwd = cwd


def _text(data: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise HookInputError(f"{key} must be a non-empty string, got {str(value)[:60]!r}")
    return value


def read_input(raw: bytes) -> HookInput:
    """*raw* stdin as a :class:`HookInput`; :class:`HookInputError` naming what is wrong."""
    if len(raw) > MAX_INPUT:
        raise HookInputError(f"the hook input is larger than {MAX_INPUT} bytes")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise HookInputError("the hook input is nested too deeply to be read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HookInputError(f"the hook input is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise HookInputError("the hook input is not a JSON object")
    event = _text(data, "hook_event_name", required=True)
    if event not in EVENTS:
        raise HookInputError(
            f"hook_event_name {event!r} is not one this hook decides: install it for "
            "PreToolUse or PermissionRequest"
        )
    arguments = data.get("tool_input", {})
    if not isinstance(arguments, dict):
        raise HookInputError("tool_input must be a JSON object")
    session = _text(data, "session_id", required=True)
    tool = _text(data, "tool_name", required=True)
    assert event is not None
    assert session is not None
    assert tool is not None
    return HookInput(
        event=event,
        session=session,
        tool=tool,
        arguments=arguments,
        call_id=_text(data, "tool_use_id", required=False),
        cwd=_text(data, "cwd", required=False),
    )


def answer(agent: str, event: str, allowed: bool, reason: str) -> str | None:
    """The stdout that tells *agent* the decision for *event* (None: print nothing)."""
    if event == "PermissionRequest":
        decision: dict[str, str] = {"behavior": "allow" if allowed else "deny"}
        if not allowed:
            decision["message"] = reason
        output: dict[str, Any] = {"hookEventName": event, "decision": decision}
    else:
        if allowed and agent == "codex":
            return None  # Codex's PreToolUse cannot allow: no objection, its policy goes on
        output = {
            "hookEventName": event,
            "permissionDecision": "allow" if allowed else "deny",
            "permissionDecisionReason": reason,
        }
    return json.dumps({"hookSpecificOutput": output}, ensure_ascii=True)
