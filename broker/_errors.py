"""The broker's exceptions. Every message is lower-case, names the rule, and suggests the fix."""

from __future__ import annotations

__all__ = [
    "AuditAppendError",
    "AuditInvariantError",
    "BrokerClosedError",
    "BrokerError",
    "ResumeError",
    "SessionClosedError",
    "SessionCrashedError",
    "TurnError",
]


class BrokerError(Exception):
    """Base class of the errors this package raises on purpose."""


class TurnError(BrokerError):
    """An operation needs an open turn (or no open turn) and the session is in the other state."""


class SessionClosedError(BrokerError):
    """The session is closing or closed: it takes no new questions, turns or grants."""


class SessionCrashedError(SessionClosedError):
    """The session's actor failed; its pending questions are left for recovery."""


class BrokerClosedError(BrokerError):
    """The broker is shutting down or shut down."""


class AuditAppendError(BrokerError):
    """An audit event could not be made durable; the request that needed it made no decision."""


class AuditInvariantError(AuditAppendError):
    """The session refused to commit an event that would break an audit rule of its log.

    The message names the rule (as ``broker log verify`` does). Nothing was appended.
    """


class ResumeError(BrokerError):
    """A stored session cannot be resumed: unknown, already open here, or not recovered."""
