"""The audit invariants of one session's log, checked event by event for ``broker log verify``.

The rules themselves live in :mod:`broker._audit_rules`, the one place both this checker and the
session actor (which refuses to commit a violating event) use. This checker adds what only a
whole-log reader can see: an ask id repeated after its question was decided, which decision an
offending ``decided`` repeats, and, at the end, the asks left without a decision (a crash tail),
unless pending asks are allowed (a live store, or a crash tail not yet recovered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._audit_rules import ENCLOSURE, PAIRING, check
from .._events import ApprovalAsked, ApprovalDecided, TurnEnd
from .._projection import ApprovalState, fold

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
    _state: ApprovalState = attrs.field(factory=ApprovalState, init=False)
    _asked: dict[str, int] = attrs.field(factory=dict, init=False)
    _pending: dict[str, int] = attrs.field(factory=dict, init=False)
    _decided: dict[str, int] = attrs.field(factory=dict, init=False)
    # Asks still pending when their turn ended (a shape older brokers wrote before a crash):
    # only recovery may close them; a live decided for one lies outside its asked's turn.
    _left_in_ended_turn: set[str] = attrs.field(factory=set, init=False)

    def _violation(self, seq: int, rule: str, detail: str) -> Violation:
        return Violation(session_id=self.session_id, seq=seq, rule=rule, detail=detail)

    def feed(self, seq: int, event: Event) -> Violation | None:
        """Check *event* (at *seq*) against what came before; the first violation or None."""
        if isinstance(event, ApprovalAsked) and event.id in self._asked:
            return self._violation(
                seq,
                PAIRING,
                f"approval/asked id {event.id!r} repeats the ask at seq {self._asked[event.id]} "
                "(ask ids must be unique)",
            )
        found = check(self._state, event)
        if found is not None:
            rule, detail = found
            if isinstance(event, TurnEnd) and rule == ENCLOSURE:
                # The live session refuses this (its rule is strict); a log an older broker
                # wrote may hold it, and it verifies if recovery closes those asks later.
                self._left_in_ended_turn.update(self._state.pending)
                self._state = fold(self._state, event)
                return None
            if rule == PAIRING and isinstance(event, ApprovalDecided):
                detail = self._pairing_detail(event)
            return self._violation(seq, rule, detail)
        if (
            isinstance(event, ApprovalDecided)
            and event.id in self._left_in_ended_turn
            and not event.recovered
        ):
            return self._violation(
                seq,
                ENCLOSURE,
                f"approval/decided id {event.id!r} outside the turn of its approval/asked "
                "(every asked and decided must lie between turn/start and turn/end)",
            )

        if isinstance(event, ApprovalAsked):
            self._asked[event.id] = self._pending[event.id] = seq
        elif isinstance(event, ApprovalDecided):
            self._decided[event.id] = seq
            del self._pending[event.id]
        self._state = fold(self._state, event)
        return None

    def _pairing_detail(self, event: ApprovalDecided) -> str:
        earlier = self._decided.get(event.id)
        if earlier is not None:
            return (
                f"approval/decided id {event.id!r} repeats the decision at seq {earlier} "
                "(every asked has exactly one decided)"
            )
        return (
            f"approval/decided id {event.id!r} has no earlier approval/asked "
            "(a decided never comes before its asked)"
        )

    def finish(self) -> Violation | None:
        """The end-of-log check: an undecided ask, unless pending asks are allowed."""
        if self.allow_pending or not self._pending:
            return None
        ask_id, seq = min(self._pending.items(), key=lambda item: item[1])
        return self._violation(
            seq,
            PAIRING,
            f"approval/asked id {ask_id!r} has no approval/decided (a crash tail: open the "
            "store for writing to recover it, or allow pending asks for a live store)",
        )

    @property
    def pending(self) -> int:
        """How many asks are still undecided."""
        return len(self._pending)
