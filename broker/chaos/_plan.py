"""The seeded fault plan: what each ask of a chaos run will suffer, decided before it starts."""

from __future__ import annotations

import enum
import random

import attrs

__all__ = ["AskPlan", "Behaviour", "ChaosConfig", "StoreFault", "make_plans"]

TOOLS = ("bash", "edit", "read")


class Behaviour(enum.Enum):
    """What the session's answerer does with the question."""

    ALLOW = "allow"
    REJECT = "reject"
    CANCEL = "cancel"
    RAISE = "raise"
    RAISE_SYNC = "raise-sync"
    GARBAGE = "garbage"
    HANG = "hang"
    SLOW = "slow"
    DELEGATE = "delegate"


class StoreFault(enum.Enum):
    """Which of the ask's two audit appends the store fails."""

    NONE = "none"
    ASKED = "asked-append"
    DECIDED = "decided-append"


@attrs.frozen(kw_only=True)
class ChaosConfig:
    """A chaos run: ``asks`` questions over ``sessions`` sessions, faults drawn from ``seed``.

    ``fault_rate`` is the probability of each independent fault (abort, caller cancellation,
    answerer teardown, store failure); the answerer's behaviour is drawn for every ask.
    """

    seed: int
    asks: int = 1000
    sessions: int = 16
    fault_rate: float = 0.15
    # Asks in flight at once; hanging answerers hold their slot until withdrawn, so keep it
    # well above the number of hangs a run draws or later asks starve behind them.
    concurrency: int = 1024

    def __attrs_post_init__(self) -> None:
        for name in ("asks", "sessions", "concurrency"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be between 0 and 1, got {self.fault_rate!r}")


@attrs.frozen(kw_only=True)
class AskPlan:
    """The fate of ask number ``index`` (its ``call_id`` is ``ask-<index>``)."""

    index: int
    session: int
    tool: str
    start: float
    behaviour: Behaviour
    answer_delay: float
    abort_at: float | None  # seconds after start; 0.0 = already aborted when asked
    cancel_at: float | None  # the caller's own cancellation, seconds after start
    teardown_at: float | None  # the session's answerer is torn down this long after start
    store_fault: StoreFault

    @property
    def call_id(self) -> str:
        return f"ask-{self.index}"


def make_plans(config: ChaosConfig) -> list[AskPlan]:
    """The plan of every ask, a pure function of *config* (the seed fixes it)."""
    rng = random.Random(config.seed)
    behaviours = list(Behaviour)
    weights = [6, 3, 1, 1, 1, 1, 1, 2, 1]
    plans = []
    span = max(1.0, config.asks / 50)  # seconds of (virtual) time the asks are spread over

    def maybe(low: float, high: float) -> float | None:
        return rng.uniform(low, high) if rng.random() < config.fault_rate else None

    for index in range(config.asks):
        abort_at = maybe(0.0, 0.3)
        if abort_at is not None and rng.random() < 0.25:
            abort_at = 0.0
        fault = StoreFault.NONE
        if rng.random() < config.fault_rate / 3:
            fault = rng.choice([StoreFault.ASKED, StoreFault.DECIDED])
        plans.append(
            AskPlan(
                index=index,
                session=rng.randrange(config.sessions),
                tool=rng.choice(TOOLS),
                start=rng.uniform(0.0, span),
                behaviour=rng.choices(behaviours, weights)[0],
                answer_delay=rng.uniform(0.0, 0.2),
                abort_at=abort_at,
                cancel_at=maybe(0.0, 0.3),
                teardown_at=maybe(0.0, 0.3),
                store_fault=fault,
            )
        )
    return plans
