"""The audit invariants of one session's log, checked event by event.

Rules (their names appear in ``broker log verify`` messages):

- ``turn-order``: a ``turn/start`` only when no turn is open, with a number greater than every
  earlier turn; a ``turn/end`` only for the open turn.
- ``turn-enclosure``: every ``approval/asked`` and ``approval/decided`` lies inside an open turn
  (spec section 3). Exception: a ``decided`` written by recovery (``recovered: true``) closes a
  crash tail wherever the log ended, so it may follow a ``turn/end``.
- ``pairing``: every ``asked`` id is unique; a ``decided`` follows the ``asked`` with its id
  (never before it, never twice); at the end every ``asked`` has its ``decided`` — unless
  pending asks are allowed (a live store, or a crash tail not yet recovered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._events import ApprovalAsked, ApprovalDecided, TurnEnd, TurnStart

if TYPE_CHECKING:
    from .._events import Event

__all__ = ["SessionChecker", "Violation"]


@attrs.frozen(kw_only=True)
class Violation:
    """The first broken rule of a session: where (seq; 0 for the session as a whole) and why."""

    session_id: str
    seq: int
    rule: str
    detail: str

    def message(self) -> str:
        """``session 'x' seq 5: rule pairing: ...``."""
        return f"session {self.session_id!r} seq {self.seq}: rule {self.rule}: {self.detail}"


@attrs.define(eq=False)
class SessionChecker:
    """Feed a session's events in order with :meth:`feed`, then call :meth:`finish`."""

    session_id: str
    allow_pending: bool = False
    _turn: int = attrs.field(default=0, init=False)
    _turn_open: bool = attrs.field(default=False, init=False)
    _asked: dict[str, int] = attrs.field(factory=dict, init=False)
    _pending: dict[str, int] = attrs.field(factory=dict, init=False)
    _decided: dict[str, int] = attrs.field(factory=dict, init=False)
    _last_seq: int = attrs.field(default=0, init=False)

    def _violation(self, seq: int, rule: str, detail: str) -> Violation:
        return Violation(session_id=self.session_id, seq=seq, rule=rule, detail=detail)

    def feed(self, seq: int, event: Event) -> Violation | None:
        """Check *event* (at *seq*) against what came before; the first violation or None."""
        self._last_seq = seq
        if isinstance(event, TurnStart):
            return self._turn_start(seq, event)
        if isinstance(event, TurnEnd):
            return self._turn_end(seq, event)
        if isinstance(event, ApprovalAsked):
            return self._asked_event(seq, event)
        if isinstance(event, ApprovalDecided):
            return self._decided_event(seq, event)
        return None

    def _turn_start(self, seq: int, event: TurnStart) -> Violation | None:
        if self._turn_open:
            return self._violation(
                seq,
                "turn-order",
                f"turn/start {event.turn} while turn {self._turn} is open "
                "(a turn must end before the next starts)",
            )
        if event.turn <= self._turn:
            return self._violation(
                seq,
                "turn-order",
                f"turn/start {event.turn} after turn {self._turn} (turn numbers must increase)",
            )
        self._turn, self._turn_open = event.turn, True
        return None

    def _turn_end(self, seq: int, event: TurnEnd) -> Violation | None:
        if not self._turn_open:
            return self._violation(
                seq, "turn-order", f"turn/end {event.turn} while no turn is open"
            )
        if event.turn != self._turn:
            return self._violation(
                seq, "turn-order", f"turn/end {event.turn} while turn {self._turn} is open"
            )
        self._turn_open = False
        return None

    def _asked_event(self, seq: int, event: ApprovalAsked) -> Violation | None:
        if not self._turn_open:
            return self._violation(
                seq,
                "turn-enclosure",
                f"approval/asked id {event.id!r} outside an open turn "
                "(every asked and decided must lie between turn/start and turn/end)",
            )
        earlier = self._asked.get(event.id)
        if earlier is not None:
            return self._violation(
                seq,
                "pairing",
                f"approval/asked id {event.id!r} repeats the ask at seq {earlier} "
                "(ask ids must be unique)",
            )
        self._asked[event.id] = seq
        self._pending[event.id] = seq
        return None

    def _decided_event(self, seq: int, event: ApprovalDecided) -> Violation | None:
        if not self._turn_open and not event.recovered:
            return self._violation(
                seq,
                "turn-enclosure",
                f"approval/decided id {event.id!r} outside an open turn "
                "(every asked and decided must lie between turn/start and turn/end)",
            )
        earlier = self._decided.get(event.id)
        if earlier is not None:
            return self._violation(
                seq,
                "pairing",
                f"approval/decided id {event.id!r} repeats the decision at seq {earlier} "
                "(every asked has exactly one decided)",
            )
        if event.id not in self._asked:
            return self._violation(
                seq,
                "pairing",
                f"approval/decided id {event.id!r} has no earlier approval/asked "
                "(a decided never comes before its asked)",
            )
        self._decided[event.id] = seq
        del self._pending[event.id]
        return None

    def finish(self) -> Violation | None:
        """The end-of-log check: an undecided ask, unless pending asks are allowed."""
        if self.allow_pending or not self._pending:
            return None
        ask_id, seq = min(self._pending.items(), key=lambda item: item[1])
        return self._violation(
            seq,
            "pairing",
            f"approval/asked id {ask_id!r} has no approval/decided (a crash tail: open the "
            "store for writing to recover it, or allow pending asks for a live store)",
        )

    @property
    def pending(self) -> int:
        """How many asks are still undecided."""
        return len(self._pending)
