"""The invariants a chaos run must keep, checked from the session logs and the run's records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from .._events import ApprovalAsked, ApprovalDecided, ApprovalGrant, Event
from .._projection import fold_all
from .._vocabulary import Outcome
from ..store import SessionChecker, recovery_events

__all__ = ["LogFacts", "check_logs"]


@attrs.frozen(kw_only=True)
class LogFacts:
    """What the logs say, after checking: decisions by outcome and crash tails recovered."""

    asked: int
    outcomes: dict[str, int]
    recovered: int


def check_logs(
    logs: Mapping[str, Sequence[Event]],
    *,
    answered_allow: set[str],
    failed_ids: set[str],
    violations: list[str],
) -> LogFacts:
    """Check every session log; append a sentence per broken invariant to *violations*.

    * every ``asked`` has exactly one ``decided``, after it — except an ask whose ``decided``
      append was failed on purpose (``failed_ids``), which has none; recovery then closes it;
    * no ``allowed-once`` unless the answerer returned it for that exact call
      (``answered_allow``, by call id) or it is ``remembered`` and a grant of its tool precedes
      it in the log;
    * no ``decided`` without its ``asked``.
    """
    outcomes: dict[str, int] = {o.value: 0 for o in Outcome}
    asked_total = 0
    recovered = 0
    for session_id, events in logs.items():
        asks: dict[str, tuple[int, ApprovalAsked]] = {}
        decided: dict[str, list[tuple[int, ApprovalDecided]]] = {}
        granted_at: dict[str, int] = {}
        for position, event in enumerate(events):
            if isinstance(event, ApprovalAsked):
                asks[event.id] = (position, event)
            elif isinstance(event, ApprovalDecided):
                decided.setdefault(event.id, []).append((position, event))
            elif isinstance(event, ApprovalGrant):
                granted_at.setdefault(event.tool_name, position)
        asked_total += len(asks)
        for ask_id in decided.keys() - asks.keys():
            violations.append(f"session {session_id}: decided {ask_id} has no asked")
        for ask_id, (position, ask) in asks.items():
            found = decided.get(ask_id, [])
            if not found:
                if ask_id not in failed_ids:
                    violations.append(
                        f"session {session_id}: asked {ask_id} ({ask.call_id}) has no decided "
                        "and its decided append was not failed on purpose"
                    )
                continue
            if len(found) > 1:
                violations.append(
                    f"session {session_id}: asked {ask_id} has {len(found)} decided events"
                )
            where, decision = found[0]
            if decision.recovered:
                # Closed in-process when its turn ended: only an ask whose own decided append
                # failed may end that way, and always as cancelled.
                recovered += 1
                if ask_id not in failed_ids or decision.outcome is not Outcome.CANCELLED:
                    violations.append(
                        f"session {session_id}: asked {ask_id} ({ask.call_id}) was closed "
                        f"{decision.outcome.value} by recovery although its decided append "
                        "was not failed on purpose"
                    )
            if where < position:
                violations.append(f"session {session_id}: decided {ask_id} precedes its asked")
            outcomes[decision.outcome.value] += 1
            if decision.outcome is Outcome.ALLOWED_ONCE:
                by_answer = ask.call_id in answered_allow and not decision.remembered
                grant = granted_at.get(ask.tool_name)
                by_grant = decision.remembered and grant is not None and grant < where
                if not (by_answer or by_grant):
                    violations.append(
                        f"session {session_id}: {ask.call_id} was allowed-once, but no answerer "
                        "returned allowed-once for it and no grant covered it"
                    )
        recovered += _recover(session_id, events, violations)
        checker = SessionChecker(session_id, allow_pending=True)
        for seq, event in enumerate(events, start=1):
            broken = checker.feed(seq, event)
            if broken is not None:
                violations.append(broken.message())
                break
    return LogFacts(asked=asked_total, outcomes=outcomes, recovered=recovered)


def _recover(session_id: str, events: Sequence[Event], violations: list[str]) -> int:
    """Apply recovery to the log as the durable store does on reopen; check it pairs all."""
    state = fold_all(events)
    order = [e.id for e in events if isinstance(e, ApprovalAsked) and e.id in state.pending]
    closing, _ = recovery_events(session_id, state, order)
    after = fold_all(closing, state)
    if after.pending:
        violations.append(f"session {session_id}: recovery left {len(after.pending)} unpaired")
    if any(getattr(e, "outcome", None) is Outcome.ALLOWED_ONCE for e in closing):
        violations.append(f"session {session_id}: recovery granted something")
    return len(order)


def never_reached(
    invocations: Iterable[tuple[str, str]], never_sessions: set[str], violations: list[str]
) -> None:
    """No answerer invocation (session id, call id) belongs to a session under ``never``."""
    for session_id, call_id in invocations:
        if session_id in never_sessions:
            violations.append(
                f"session {session_id} is under never, yet an answerer was asked {call_id}"
            )
