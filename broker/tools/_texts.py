"""Exact texts the model sees from the tool runtime and the bash escalation gate (contract §8.1,
§8.2).

Every one of them is pinned by a test that reaches it through the real path that produces it.
"""

from __future__ import annotations

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "ESCALATION_JUSTIFICATION_ALONE",
    "ESCALATION_JUSTIFICATION_EMPTY",
    "ESCALATION_NEEDS_JUSTIFICATION",
    "ESCALATION_NO_SANDBOX",
    "arguments_changed",
    "ask_cancelled",
    "ask_failed",
    "ask_no_agent",
    "ask_no_service",
    "ask_rejected",
    "ask_rejected_by_policy",
    "ask_rejected_by_rule",
    "ask_unavailable",
    "escalation_cancelled",
    "escalation_no_agent",
    "escalation_no_service",
    "escalation_not_wider",
    "escalation_reason",
    "escalation_rejected",
    "escalation_rejected_by_policy",
    "escalation_rejected_by_rule",
    "escalation_unavailable",
]

# -- 8.1 tool runtime ask routing -----------------------------------------------------------

ABORTED_BEFORE_DISPATCH = "tool call aborted before dispatch"


def ask_failed(name: str, cause: BaseException) -> str:
    """**Beyond**: the question could not be put or recorded; the tool did not run."""
    return (
        f'approval for tool "{name}" could not be asked or recorded '
        f"({type(cause).__name__}: {cause}); the tool did not run"
    )


def ask_no_service(name: str) -> str:
    """No approval service composed and the ask carried no reason."""
    return f'tool "{name}" requires approval (not yet supported)'


def ask_no_agent(name: str) -> str:
    return f'tool "{name}" requires approval, but the call has no agent to route it through'


def ask_rejected(name: str) -> str:
    return f'the user rejected tool "{name}"'


def ask_rejected_by_policy(name: str) -> str:
    return (
        f'tool "{name}" was rejected automatically: approval prompts are disabled in this session'
    )


def ask_rejected_by_rule(name: str, rule: str, reason: str | None) -> str:
    """Beyond: a deny rule rejected the call before anyone was asked."""
    because = f": {reason}" if reason else ""
    return f'tool "{name}" was denied by {rule}{because}'


def arguments_changed(name: str) -> str:
    """Beyond: what would run is not what was approved; nothing ran."""
    return (
        f'tool "{name}" did not run: its arguments changed after they were approved; '
        "ask again with the arguments that should run"
    )


def ask_cancelled(name: str) -> str:
    return f'approval for tool "{name}" was cancelled'


def ask_unavailable(name: str) -> str:
    return f'tool "{name}" requires approval, but no approval channel is available'


# -- 8.2 sandbox escalation -----------------------------------------------------------------

ESCALATION_NEEDS_JUSTIFICATION = "invalid escalation: sandbox_permissions requires a justification"
ESCALATION_JUSTIFICATION_ALONE = (
    "invalid escalation: justification is only valid together with sandbox_permissions"
)
ESCALATION_JUSTIFICATION_EMPTY = "invalid justification: expected a non-empty sentence"
ESCALATION_NO_SANDBOX = (
    "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
)


def escalation_not_wider(mode: str, current: str) -> str:
    return (
        f'sandbox escalation to "{mode}" is not strictly wider than this call\'s current '
        f'"{current}" mode'
    )


def escalation_no_service(mode: str) -> str:
    return f'sandbox escalation to "{mode}" requires approval, but no approval service is composed'


def escalation_no_agent(mode: str) -> str:
    return (
        f'sandbox escalation to "{mode}" requires approval, but the call has no agent to route '
        "it through"
    )


def escalation_reason(mode: str, justification: str) -> str:
    """The ``reason`` of the approval question (logged in ``approval/asked``)."""
    return f"escalate sandbox to {mode}: {justification}"


def escalation_rejected(mode: str) -> str:
    return f'the user rejected escalating this command to "{mode}"'


def escalation_rejected_by_rule(mode: str, rule: str, reason: str | None) -> str:
    """Beyond: a deny rule rejected the escalation before anyone was asked."""
    because = f": {reason}" if reason else ""
    return f'escalating this command to "{mode}" was denied by {rule}{because}'


def escalation_rejected_by_policy(mode: str) -> str:
    return (
        f'escalating this command to "{mode}" was rejected automatically: approval prompts are '
        "disabled in this session"
    )


def escalation_cancelled(mode: str) -> str:
    return f'approval for escalating to "{mode}" was cancelled'


def escalation_unavailable(mode: str) -> str:
    return f'sandbox escalation to "{mode}" requires approval, but no approval channel is available'
