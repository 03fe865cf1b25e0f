"""The per-session ``approvalState`` projection, folded from events (contract §7).

Its size depends on the number of distinct granted tools and of questions in flight, never on
the number of events, so it can be checkpointed and a log reopened from checkpoint + tail.
The fold is pure: it never dispatches a question or grants anything by itself.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    ApprovalRevoke,
    Event,
    SandboxModeSet,
    TurnEnd,
    TurnStart,
    maker,
)
from ._vocabulary import Policy

__all__ = ["EMPTY_STATE", "ApprovalState", "Grant", "fold", "fold_all"]


@attrs.frozen(kw_only=True)
class Grant:
    """A grant with an id (``approval/grant`` Beyond): ``tool_name`` and, when ``command`` is
    set, only commands starting with it; given ``by`` whom, ``at_ms``, until
    ``expires_at_ms`` (``None``: as long as the session); remembered also as a rule in the
    project rules file ``rule_file`` when set."""

    id: str
    tool_name: str
    command: str | None = None
    by: str | None = None
    at_ms: int | None = None
    expires_at_ms: int | None = None
    rule_file: str | None = None

    def expired(self, now_ms: int) -> bool:
        """Whether its expiry has passed at *now_ms*."""
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms

    def event(self) -> ApprovalGrant:
        """The ``approval/grant`` that records it (its fold gives this grant back)."""
        return ApprovalGrant(tool_name=self.tool_name, **attrs.asdict(self, filter=_not_tool))


@attrs.frozen(kw_only=True)
class ApprovalState:
    """What the log says about one session's approvals.

    ``policy`` and ``sandbox_mode`` are the session's overrides (``None``: the composition's
    default); ``turn`` is the number of the last turn started (0 before any); ``turn_open``
    whether it is still open; ``pending`` the ids of questions asked but not yet decided (a crash
    tail after a restart); ``delegated`` whether a delegation seeded the policy (``source:
    "delegation"``), so a resumed child is still told it is one; ``events`` how many events
    were folded (for checkpoint bookkeeping).
    """

    policy: Policy | None = None
    sandbox_mode: str | None = None
    turn: int = 0
    turn_open: bool = False
    grants: frozenset[str] = frozenset()
    granted: tuple[Grant, ...] = ()
    pending: frozenset[str] = frozenset()
    delegated: bool = False
    events: int = 0


#: The state of a session with no events (frozen: shared by every new session).
EMPTY_STATE = ApprovalState()

# ApprovalState(...) with every field in order, positionally: what fold makes, twice a question.
_state = maker(
    ApprovalState, "policy sandbox_mode turn turn_open grants granted pending delegated events"
)


def fold(state: ApprovalState, event: Event) -> ApprovalState:
    """The state after *event*. Events this projection does not track only bump the count."""
    # Direct construction instead of attrs.evolve: this runs twice per question, on the hot path.
    policy, sandbox_mode = state.policy, state.sandbox_mode
    turn, turn_open = state.turn, state.turn_open
    grants, pending, delegated = state.grants, state.pending, state.delegated
    granted = state.granted
    if isinstance(event, ApprovalAsked):
        pending = pending | {event.id}
    elif isinstance(event, ApprovalDecided):
        pending = pending - {event.id}
    elif isinstance(event, TurnStart):
        turn, turn_open = event.turn, True
    elif isinstance(event, TurnEnd):
        turn_open = False
    elif isinstance(event, ApprovalPolicy):
        policy = event.policy
        delegated = delegated or event.source == "delegation"
    elif isinstance(event, ApprovalGrant):
        if event.id is None:
            grants = grants | {event.tool_name}
        elif all(g.id != event.id for g in granted):
            granted = (*granted, _grant_of(event))
    elif isinstance(event, ApprovalRevoke):
        if event.id is not None:
            granted = tuple(g for g in granted if g.id != event.id)
        if event.tool_name is not None:
            grants = grants - {event.tool_name}
    elif isinstance(event, SandboxModeSet):
        sandbox_mode = event.mode
    return _state(
        policy,
        sandbox_mode,
        turn,
        turn_open,
        grants,
        granted,
        pending,
        delegated,
        state.events + 1,
    )


def _not_tool(attribute: attrs.Attribute[object], _value: object) -> bool:
    return attribute.name != "tool_name"


def _grant_of(event: ApprovalGrant) -> Grant:
    assert event.id is not None
    return Grant(**attrs.asdict(event, filter=_has_grant_field))


_GRANT_FIELDS = frozenset(f.name for f in attrs.fields(Grant))


def _has_grant_field(attribute: attrs.Attribute[object], _value: object) -> bool:
    return attribute.name in _GRANT_FIELDS


def fold_all(events: Iterable[Event], state: ApprovalState | None = None) -> ApprovalState:
    """Fold *events* in order onto *state* (the empty state by default)."""
    result = ApprovalState() if state is None else state
    for event in events:
        result = fold(result, event)
    return result
