"""The chaos harness: a short seeded run keeps every invariant, and the checks can fail."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Set as AbstractSet

import pytest

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    Event,
    Outcome,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker.chaos import ChaosConfig, run_chaos
from broker.chaos._checks import check_logs, never_reached
from broker.chaos._plan import make_plans


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_seeded_run_keeps_every_invariant(seed: int) -> None:
    report = run_chaos(ChaosConfig(seed=seed, asks=400, sessions=8, fault_rate=0.2))
    assert report.violations == ()
    assert report.ok
    # The run really exercised the faults it claims to.
    for kind in (
        "answerer-raise",
        "answerer-raise-sync",
        "answerer-garbage",
        "answerer-hang",
        "injected-store-failure",
        "abort-before",
    ):
        assert report.faults.get(kind, 0) > 0, kind
    assert all(count > 0 for count in report.outcomes.values()), report.outcomes
    # Every decided that failed after its asked had landed left a crash tail, closed by
    # recovery; one submitted with its asked (no answerer needed) failed with it, leaving none.
    assert report.faults["injected-store-decided-alone"] > 0
    assert report.recovered == report.faults["injected-store-decided-alone"]
    assert all(lag <= 1 for lag in report.abort_lags)


@pytest.mark.parametrize("seed", [1, 3])
def test_a_long_seeded_run_keeps_every_invariant(seed: int) -> None:
    """Seeds that once ended a turn around a question whose decided write had failed (the
    projection had folded it): the next turn() raised and the run crashed (< 1 s each)."""
    report = run_chaos(ChaosConfig(seed=seed, asks=5000, sessions=64))
    assert report.violations == ()
    assert report.recovered == report.faults["injected-store-decided-alone"] > 0


def test_the_plan_is_a_function_of_the_seed() -> None:
    config = ChaosConfig(seed=42, asks=50, sessions=4)
    assert make_plans(config) == make_plans(config)
    assert make_plans(config) != make_plans(ChaosConfig(seed=43, asks=50, sessions=4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"asks": 0}, r"^asks must be a positive integer, got 0$"),
        ({"fault_rate": 1.5}, r"^fault_rate must be between 0 and 1, got 1\.5$"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChaosConfig(seed=1, **kwargs)  # type: ignore[arg-type]


# -- the checks catch what they claim to catch -------------------------------------------------


def asked(i: str, tool: str = "bash") -> ApprovalAsked:
    return ApprovalAsked(id=i, tool_name=tool, call_id=f"call-{i}")


def check(
    events: list[Event],
    *,
    allow: AbstractSet[str] = frozenset(),
    failed: AbstractSet[str] = frozenset(),
) -> list[str]:
    violations: list[str] = []
    check_logs(
        {"s": [TurnStart(turn=1), *events]},
        answered_allow=set(allow),
        failed_ids=set(failed),
        violations=violations,
    )
    return violations


def test_an_allow_nobody_gave_is_a_violation() -> None:
    ok = [asked("a"), ApprovalDecided(id="a", outcome=Outcome.ALLOWED_ONCE)]
    assert check(ok, allow={"call-a"}) == []
    [violation] = check(ok)
    assert "call-a was allowed-once, but no answerer returned allowed-once" in violation


def test_a_remembered_allow_needs_an_earlier_grant() -> None:
    remembered = ApprovalDecided(id="a", outcome=Outcome.ALLOWED_ONCE, remembered=True)
    assert check([ApprovalGrant(tool_name="bash"), asked("a"), remembered]) == []
    assert len(check([asked("a"), remembered, ApprovalGrant(tool_name="bash")])) == 1
    assert len(check([ApprovalGrant(tool_name="edit"), asked("a"), remembered])) == 1


def test_pairing_violations() -> None:
    [unpaired] = check([asked("a")])
    assert "asked a (call-a) has no decided" in unpaired
    assert check([asked("a")], failed={"a"}) == []
    double, rule = check(
        [
            asked("a"),
            ApprovalDecided(id="a", outcome=Outcome.REJECTED),
            ApprovalDecided(id="a", outcome=Outcome.REJECTED),
        ]
    )
    assert "has 2 decided events" in double
    assert "rule pairing: approval/decided id 'a' repeats the decision at seq 3" in rule
    orphan, rule = check([ApprovalDecided(id="z", outcome=Outcome.REJECTED)])
    assert "decided z has no asked" in orphan
    assert rule == (
        "session 's' seq 2: rule pairing: approval/decided id 'z' has no earlier approval/asked "
        "(a decided never comes before its asked)"
    )


def test_the_verify_rules_run_on_every_chaos_log() -> None:
    # A pair that leaves its turn: what the issue found, checked by the same rules as verify.
    [outside] = check(
        [
            asked("a"),
            TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
            ApprovalDecided(id="a", outcome=Outcome.ALLOWED_ONCE),
        ],
        allow={"call-a"},
    )
    assert outside == (
        "session 's' seq 4: rule turn-enclosure: approval/decided id 'a' outside an open turn "
        "(every asked and decided must lie between turn/start and turn/end)"
    )
    [recovered] = check(
        [asked("a"), ApprovalDecided(id="a", outcome=Outcome.CANCELLED, recovered=True)]
    )
    assert "was closed cancelled by recovery although its decided append was not failed" in (
        recovered
    )
    closed = [asked("a"), ApprovalDecided(id="a", outcome=Outcome.CANCELLED, recovered=True)]
    assert check(closed, failed={"a"}) == []


def test_a_never_session_reaching_an_answerer_is_a_violation() -> None:
    violations: list[str] = []
    never_reached([("s1", "ask-1"), ("s2", "ask-2")], {"s2"}, violations)
    assert violations == ["session s2 is under never, yet an answerer was asked ask-2"]


@pytest.mark.slow
def test_the_cli_prints_figures_and_exits_zero() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "broker.cli",
            "chaos",
            "--seed",
            "5",
            "--asks",
            "300",
            "--sessions",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "violations: 0" in done.stdout
    assert done.stderr == ""


def test_asks_queued_behind_hung_ones_are_not_reported_as_hung() -> None:
    """A tight limiter filled by hanging answerers: the asks queued behind them start only
    after the teardown and settle there; none is mistaken for a hung request."""
    report = run_chaos(ChaosConfig(seed=11, asks=300, sessions=4, concurrency=4))
    assert report.violations == ()
    assert report.settled_by_teardown > 0


@pytest.mark.parametrize("seed", [3, 4])
def test_turns_ending_while_questions_are_pending_keep_every_pair_inside(seed: int) -> None:
    report = run_chaos(ChaosConfig(seed=seed, asks=400, sessions=8, fault_rate=0.3))
    assert report.faults.get("turn-ended-while-pending", 0) > 0
    assert report.violations == ()
