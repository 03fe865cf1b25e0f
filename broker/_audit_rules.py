"""The audit invariants of a session's log, as one pure check of an event against the projection.

This is the single place the rules live. The session actor calls :func:`check` on every event
before it commits it (a violating event is refused, never written), and ``broker log verify``
(:class:`broker.store._invariants.SessionChecker`) calls it on every event it reads back. The
rule names appear in both messages:

- ``turn-order``: a ``turn/start`` only when no turn is open, with a number greater than every
  earlier turn; a ``turn/end`` only for the open turn.
- ``turn-enclosure``: every ``approval/asked`` and ``approval/decided`` lies inside an open turn
  (contract §3), and a turn ends only once its questions are decided — so each pair lies
  inside the turn of its ``asked``. Exception: a ``decided`` written by recovery
  (``recovered: true``) closes a crash tail of an older log wherever that log ended.
- ``pairing``: a ``decided`` answers an ``asked`` that is still pending (never one that was not
  asked, never one already decided); an ``asked`` id is not pending already.

Invariant: every question pending in the projection belongs to the open turn — asks need an open
turn and a turn cannot end while any is pending — so "the turn of its asked" is the open turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._events import ApprovalAsked, ApprovalDecided, TurnEnd, TurnStart

if TYPE_CHECKING:
    from ._events import Event
    from ._projection import ApprovalState

__all__ = ["ENCLOSURE", "PAIRING", "TURN_ORDER", "check"]

TURN_ORDER = "turn-order"
ENCLOSURE = "turn-enclosure"
PAIRING = "pairing"


def check(state: ApprovalState, event: Event) -> tuple[str, str] | None:
    """``(rule, detail)`` when *event* may not follow a log whose projection is *state*.

    ``None`` when it may. Pure and cheap: a few comparisons on the hot path of every append.
    """
    if isinstance(event, ApprovalDecided):
        if not state.turn_open and not event.recovered:
            return ENCLOSURE, (
                f"approval/decided id {event.id!r} outside an open turn "
                "(every asked and decided must lie between turn/start and turn/end)"
            )
        if event.id not in state.pending:
            return PAIRING, (
                f"approval/decided id {event.id!r} answers no pending approval/asked "
                "(every asked has exactly one decided, after it)"
            )
        return None
    if isinstance(event, ApprovalAsked):
        if not state.turn_open:
            return ENCLOSURE, (
                f"approval/asked id {event.id!r} outside an open turn "
                "(every asked and decided must lie between turn/start and turn/end)"
            )
        if event.id in state.pending:
            return PAIRING, (
                f"approval/asked id {event.id!r} repeats a pending ask (ask ids must be unique)"
            )
        return None
    if isinstance(event, TurnStart):
        if state.turn_open:
            return TURN_ORDER, (
                f"turn/start {event.turn} while turn {state.turn} is open "
                "(a turn must end before the next starts)"
            )
        if event.turn <= state.turn:
            return TURN_ORDER, (
                f"turn/start {event.turn} after turn {state.turn} (turn numbers must increase)"
            )
        return None
    if isinstance(event, TurnEnd):
        if not state.turn_open:
            return TURN_ORDER, f"turn/end {event.turn} while no turn is open"
        if event.turn != state.turn:
            return TURN_ORDER, f"turn/end {event.turn} while turn {state.turn} is open"
        if state.pending:
            return ENCLOSURE, (
                f"turn/end {event.turn} while {len(state.pending)} of its questions are pending "
                "(each question's approval/decided comes before its turn ends)"
            )
    return None
