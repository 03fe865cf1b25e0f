"""A question in flight: the one cancel scope that decides its race, and why it was withdrawn."""

from __future__ import annotations

import enum

import attrs
import trio

from ._vocabulary import Outcome, Source

__all__ = ["Flight", "Withdrawal"]


class Withdrawal(enum.Enum):
    """Why a question was withdrawn before its answer counted."""

    ABORTED = "aborted by the request's signal"
    SESSION_CLOSING = "the session is closing"
    TURN_ENDING = "its turn is ending"
    ANSWERER_LOST = "an answerer consulted for it ended"


@attrs.define(eq=False)
class Flight:
    """One question between admission and settlement.

    Invariant: ``cause`` is set once, by the first withdrawal, and the outcome of the race is a
    function of it alone — ``ANSWERER_LOST`` fails closed as ``unavailable``, the others settle
    ``cancelled``. Every withdrawal cancels ``scope``, so a late answer is never read.
    """

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    cause: Withdrawal | None = None
    # The last named answer given for this question: (outcome, who, their message, every answer
    # given). Recorded as answeredBy (message, answers) when the waterfall's result is that
    # outcome.
    answered: tuple[Outcome, str | None, str | None, str | None] | None = None
    # What produced the waterfall's outcome: (answerer name or None for the end of the chain,
    # that outcome, the Source). Set by the innermost answerer that answered (an outer one
    # that returns what it was handed keeps it); read once the race is decided.
    decider: tuple[str | None, Outcome, Source] | None = None

    def withdraw(self, cause: Withdrawal, detail: str) -> None:
        """Withdraw the question (the first cause is kept). Never blocks."""
        if self.cause is None:
            self.cause = cause
        self.scope.cancel(reason=f"{cause.value}: {detail}")
