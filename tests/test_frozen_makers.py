"""The positional makers of the classes made on every question (broker._events.maker): what
they make equals what __init__ makes, and a class they cannot make faithfully is refused."""

from __future__ import annotations

import attrs
import pytest

from broker._decision import Answer
from broker._events import ApprovalAsked, ApprovalDecided, maker
from broker._projection import ApprovalState
from broker._questions import Decision
from broker._vocabulary import Outcome, Policy, Source


@pytest.mark.parametrize(
    "made",
    [
        ApprovalState(policy=Policy.NEVER, turn=2, turn_open=True, pending=frozenset({"a"})),
        ApprovalAsked(id="q", tool_name="bash", reason="é \ud800"),
        ApprovalDecided(id="q", outcome=Outcome.REJECTED, policy=Policy.NEVER, rule_index=3),
        Decision(id="q", outcome=Outcome.ALLOWED_ONCE, source=Source.ANSWERER, message="ok"),
    ],
)
def test_a_maker_makes_what_init_makes(made: object) -> None:
    cls = type(made)
    names = [f.name for f in attrs.fields(cls)]  # type: ignore[arg-type]
    copy = maker(cls, " ".join(names))(*(getattr(made, name) for name in names))
    assert type(copy) is cls
    assert copy == made
    assert hash(copy) == hash(made)
    assert repr(copy) == repr(made)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.id = "other"  # type: ignore[attr-defined]


def test_a_maker_checks_the_field_order() -> None:
    with pytest.raises(ValueError, match="fields are, in order: id tool_name call_id"):
        maker(ApprovalAsked, "tool_name id call_id reason arguments_digest")


def test_a_class_with_validators_is_refused() -> None:
    with pytest.raises(ValueError, match="not a plain slotted attrs class"):
        maker(Answer, "outcome by expired message answers")
