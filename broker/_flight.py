"""A question in flight: the one cancel scope that decides its race, and why it was withdrawn."""

from __future__ import annotations

import enum

import trio

from ._vocabulary import Outcome, Source

__all__ = ["Flight", "Withdrawal"]


class Withdrawal(enum.Enum):
    """Why a question was withdrawn before its answer counted."""

    ABORTED = "aborted by the request's signal"
    SESSION_CLOSING = "the session is closing"
    TURN_ENDING = "its turn is ending"
    ANSWERER_LOST = "an answerer consulted for it ended"


class Flight:
    """One question between admission and settlement.

    Invariant: ``cause`` is set once, by the first withdrawal, and the outcome of the race is a
    function of it alone — ``ANSWERER_LOST`` fails closed as ``unavailable``, the others settle
    ``cancelled``. Every withdrawal cancels ``scope``, so a late answer is never read.

    A plain slotted class: one is made per question. Its cancel scope is made when first
    needed — by the waterfall, which enters it, or by a withdrawal, which cancels it — so a
    question decided before any answerer (policy ``never``, a rule, a grant) never makes one.
    """

    __slots__ = ("_scope", "answered", "cause", "decider")

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None
        self.cause: Withdrawal | None = None
        # The last named answer given for this question: (outcome, who, their message, every
        # answer given). Recorded as answeredBy (message, answers) when the waterfall's result
        # is that outcome.
        self.answered: tuple[Outcome, str | None, str | None, str | None] | None = None
        # What produced the waterfall's outcome: (answerer name or None for the end of the
        # chain, that outcome, the Source). Set by the innermost answerer that answered (an
        # outer one that returns what it was handed keeps it); read once the race is decided.
        self.decider: tuple[str | None, Outcome, Source] | None = None

    def __repr__(self) -> str:
        return f"<Flight cause={self.cause!r}>"

    @property
    def scope(self) -> trio.CancelScope:
        """The cancel scope the waterfall runs in; cancelled by every withdrawal."""
        scope = self._scope
        if scope is None:
            scope = self._scope = trio.CancelScope()
        return scope

    def withdraw(self, cause: Withdrawal, detail: str) -> None:
        """Withdraw the question (the first cause is kept). Never blocks."""
        if self.cause is None:
            self.cause = cause
        self.scope.cancel(reason=f"{cause.value}: {detail}")
