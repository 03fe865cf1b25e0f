"""The one cattrs error formatter: every decoder names the path and says what is wrong."""

from __future__ import annotations

import pytest

from broker._cattrs_errors import StructureProblem, problems
from broker.store._checkpoint import CheckpointDecodeError, decode_state


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"turn":"1"}', "expected an integer, got string @ $.turn"),
        ('{"grants":[1]}', "expected an array of strings, got a number in it @ $.grants"),
        ('{"sandboxMode":3}', "expected a string, got number @ $.sandboxMode"),
        ('{"policy":"maybe"}', "expected one of ask, never @ $.policy"),
        ('{"turnOpen":true,"lease":1}', "unexpected keys (lease): expected only policy, "),
        ("[1]", "expected a JSON object, got list"),
    ],
)
def test_checkpoint_errors_name_the_wire_path(text: str, message: str) -> None:
    with pytest.raises(CheckpointDecodeError) as info:
        decode_state(text)
    assert str(info.value).startswith(message)


def test_a_hook_error_before_any_field_is_at_the_root() -> None:
    assert problems(StructureProblem("expected an object, got array")) == (
        "expected an object, got array @ $",
    )
    assert problems(KeyError("x")) == ("required field missing @ $",)


def test_many_or_long_unexpected_keys_are_clipped() -> None:
    from cattrs.errors import ForbiddenExtraKeysError

    from broker._projection import ApprovalState

    keys = {"k" * 50, "a", "b", "c", "d", "e"}
    (message,) = problems(ForbiddenExtraKeysError("", ApprovalState, keys), extra_keys_hint="no")
    assert message == "unexpected keys (a, b, c, d, e, ...): no @ $"
    (message,) = problems(ForbiddenExtraKeysError("", ApprovalState, {"k" * 50}))
    assert message.startswith("unexpected keys (" + "k" * 37 + "...): expected only policy, ")
