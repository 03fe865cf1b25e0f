"""Crash recovery: close what a dead writer left open, and report it.

Questions are process-local (contract §7): after a crash an ``approval/asked`` without an
``approval/decided`` can never be answered. Recovery closes each one explicitly with
``ApprovalDecided(outcome=cancelled, recovered=True)`` — never a grant, never a new ask — and
then ends a turn left open with ``TurnEnd(reason=interrupted)``, so the audit shows what
happened and every ask ends paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .._events import ApprovalDecided, TurnEnd, TurnEndReason
from .._vocabulary import Outcome

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState

__all__ = ["RecoveredSession", "RecoveryReport", "recovery_events"]


@attrs.frozen(kw_only=True)
class RecoveredSession:
    """What recovery appended to one session."""

    session_id: str
    #: Ids of the asks closed as ``cancelled`` (``recovered: true``), in log order.
    cancelled: tuple[str, ...] = ()
    #: The number of the turn ended as ``interrupted``, if one was open.
    interrupted_turn: int | None = None


@attrs.frozen(kw_only=True)
class RecoveryReport:
    """What a writer found and closed when it opened a store.

    ``sessions_checked`` counts every session in the store; ``sessions`` lists only those that
    needed recovery, in session creation order.
    """

    sessions_checked: int = 0
    sessions: tuple[RecoveredSession, ...] = ()

    @property
    def clean(self) -> bool:
        """True when nothing needed recovery (the last writer closed cleanly or was idle)."""
        return not self.sessions

    @property
    def cancelled_asks(self) -> int:
        """How many dangling asks were closed."""
        return sum(len(session.cancelled) for session in self.sessions)

    @property
    def interrupted_turns(self) -> int:
        """How many open turns were ended."""
        return sum(session.interrupted_turn is not None for session in self.sessions)

    def summary(self) -> str:
        """One line for humans, e.g. for a CLI or a log record."""
        if self.clean:
            return f"recovery: {self.sessions_checked} sessions checked, nothing to recover"
        return (
            f"recovery: {self.sessions_checked} sessions checked, closed "
            f"{self.cancelled_asks} dangling asks as cancelled and ended "
            f"{self.interrupted_turns} open turns as interrupted in {len(self.sessions)} sessions"
        )


def recovery_events(
    session_id: str, state: ApprovalState, pending_in_log_order: Sequence[str]
) -> tuple[tuple[Event, ...], RecoveredSession | None]:
    """The events that close *state*'s crash tail, and the matching report entry.

    *pending_in_log_order* are ``state.pending`` ordered by the seq of their asks. Pure.
    """
    if set(pending_in_log_order) != state.pending:
        raise ValueError("pending_in_log_order must hold exactly the state's pending ids")
    events: list[Event] = [
        ApprovalDecided(id=ask_id, outcome=Outcome.CANCELLED, recovered=True)
        for ask_id in pending_in_log_order
    ]
    interrupted = state.turn if state.turn_open else None
    if interrupted is not None:
        events.append(TurnEnd(turn=interrupted, reason=TurnEndReason(kind="interrupted")))
    if not events:
        return (), None
    entry = RecoveredSession(
        session_id=session_id,
        cancelled=tuple(pending_in_log_order),
        interrupted_turn=interrupted,
    )
    return tuple(events), entry
