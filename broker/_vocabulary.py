"""The closed vocabularies: outcomes, policies and delegation modes.

Every value here is a :class:`enum.StrEnum` whose string values are part of the wire and log
contract (contract §§1, 5 and 8.5), so ``Outcome.ALLOWED_ONCE == "allowed-once"``.
"""

from __future__ import annotations

import enum

__all__ = ["Delegation", "Outcome", "Policy", "Source", "parse_policy"]


class Outcome(enum.StrEnum):
    """How one approval question ended. Only :attr:`ALLOWED_ONCE` lets an action run."""

    ALLOWED_ONCE = "allowed-once"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"


class Policy(enum.StrEnum):
    """Whether a session's approval questions reach an answerer at all."""

    ASK = "ask"
    NEVER = "never"


class Source(enum.StrEnum):
    """What decided a question (``source`` of ``approval/decided``; Beyond)."""

    #: An abort signal fired (before the question was put or while answerers worked).
    ABORT = "abort"
    #: The asking task was cancelled.
    CALLER = "caller"
    #: The session was closing, or the question's turn ending.
    SESSION_CLOSING = "session-closing"
    TURN_ENDING = "turn-ending"
    #: The ``never`` policy rejected it before any answerer.
    POLICY = "policy"
    #: A rule decided it (``ruleLayer``, ``ruleFile``, ``ruleIndex``).
    RULE = "rule"
    #: A remembered grant allowed it (``grant``).
    GRANT = "grant"
    #: An answerer answered (``answerer``; ``answeredBy`` when it named who).
    ANSWERER = "answerer"
    #: An answerer's deadline passed with no answer (``answerer``): not a person's "no".
    DEADLINE = "deadline"
    #: An answerer ended while answering, or failed (raised, answered outside the vocabulary).
    ANSWERER_LOST = "answerer-lost"
    ANSWERER_FAILED = "answerer-failed"
    #: Every answerer delegated, or there was none: fail closed.
    NO_ANSWERER = "no-answerer"


class Delegation(enum.StrEnum):
    """How a delegated child session's approval policy is seeded (contract §8.5)."""

    PIN_NEVER = "pin-never"
    INHERIT = "inherit"


POLICY_ERROR = 'approval policy must be one of "ask" or "never"'


def parse_policy(value: object) -> Policy:
    """Validate *value* against the closed policy list.

    Raises :class:`ValueError` (for a string outside the list) or :class:`TypeError` (for a
    non-string) with the spec's exact message.
    """
    if isinstance(value, Policy):
        return value
    if not isinstance(value, str):
        raise TypeError(POLICY_ERROR)
    try:
        return Policy(value)
    except ValueError:
        raise ValueError(POLICY_ERROR) from None
