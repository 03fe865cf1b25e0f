"""The approvalState projection: what each event does, and a size independent of the log's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    ApprovalState,
    Event,
    Outcome,
    Policy,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker._projection import fold, fold_all


def test_each_event_moves_the_state() -> None:
    state = fold_all(
        [
            TurnStart(turn=1),
            ApprovalAsked(id="a", tool_name="bash"),
            ApprovalAsked(id="b", tool_name="bash"),
            ApprovalDecided(id="a", outcome=Outcome.REJECTED),
            ApprovalPolicy(policy=Policy.NEVER),
            ApprovalGrant(tool_name="bash"),
        ]
    )
    assert state == ApprovalState(
        policy=Policy.NEVER,
        turn=1,
        turn_open=True,
        grants=frozenset({"bash"}),
        pending=frozenset({"b"}),
        events=6,
    )
    state = fold(state, TurnEnd(turn=1, reason=TurnEndReason(kind="completed")))
    assert not state.turn_open
    assert state.turn == 1


def test_the_fold_is_pure() -> None:
    empty = ApprovalState()
    fold(empty, ApprovalGrant(tool_name="bash"))
    assert empty == ApprovalState()


@given(st.integers(min_value=1, max_value=300), st.sampled_from(["bash", "edit", "read"]))
def test_size_does_not_grow_with_the_number_of_events(n: int, tool: str) -> None:
    log: list[Event] = []
    for turn in range(1, n + 1):
        log += [
            TurnStart(turn=turn),
            ApprovalAsked(id=f"q{turn}", tool_name=tool),
            ApprovalDecided(id=f"q{turn}", outcome=Outcome.ALLOWED_ONCE),
            ApprovalGrant(tool_name=tool),
            TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")),
        ]
    state = fold_all(log)
    assert state.pending == frozenset()
    assert state.grants == frozenset({tool})
    assert state.turn == n
    assert state.events == 5 * n
