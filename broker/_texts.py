"""Exact texts of the contract (contract §§3, 5 and 8.5). Tests pin every one of them."""

from __future__ import annotations

from ._vocabulary import Policy

__all__ = [
    "DELEGATION_STATEMENT",
    "OUTSIDE_TURN",
    "policy_context",
    "policy_phrase",
    "policy_switch_notice",
]

OUTSIDE_TURN = (
    "approval.request() outside an open turn: the approval/asked + approval/decided audit pair "
    "must be turn-enclosed (a bare event between turns is crash-tail garbage on reload). "
    "Ask from inside the turn that needs the decision."
)

_PHRASES = {
    Policy.ASK: "ask the user for approval",
    Policy.NEVER: "never ask the user for approval",
}

_CONTEXT = {
    Policy.ASK: (
        "Approval prompts are enabled in this session: operations that require approval may ask "
        "through the configured answerers; without an available answerer, the request fails "
        "closed."
    ),
    Policy.NEVER: (
        "Approval prompts are disabled in this session: actions that require approval are "
        "rejected automatically — do not request sandbox escalation (do not set "
        "`sandbox_permissions`)."
    ),
}

DELEGATION_STATEMENT = (
    "You are a delegated subagent: your permission scope was fixed when you were started and "
    "cannot be widened from inside this session — operations that require approval are rejected "
    "automatically. When the task needs access beyond that scope, do not retry the denied "
    "operation; state the limitation in your reply so the delegating agent can handle it."
)


def policy_phrase(policy: Policy) -> str:
    """``ask the user for approval`` / ``never ask the user for approval``."""
    return _PHRASES[policy]


def policy_switch_notice(old: Policy, new: Policy) -> str:
    """The sourced user message queued for the agent's next model step after a live switch."""
    return (
        f'The user changed the approval policy from "{policy_phrase(old)}" to '
        f'"{policy_phrase(new)}".'
    )


def policy_context(policy: Policy) -> str:
    """The ``approval:policy`` runtime-context contribution for *policy*."""
    return _CONTEXT[policy]
