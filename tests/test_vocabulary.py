"""The closed vocabularies and the policy validator."""

from __future__ import annotations

import pytest

from broker import Delegation, Outcome, Policy
from broker._vocabulary import parse_policy


def test_outcome_vocabulary_is_exactly_the_four_values() -> None:
    assert [o.value for o in Outcome] == ["allowed-once", "rejected", "cancelled", "unavailable"]
    assert str(Outcome.ALLOWED_ONCE) == "allowed-once"


def test_policy_and_delegation_values() -> None:
    assert [p.value for p in Policy] == ["ask", "never"]
    assert [d.value for d in Delegation] == ["pin-never", "inherit"]


def test_parse_policy_accepts_the_closed_list() -> None:
    assert parse_policy("ask") is Policy.ASK
    assert parse_policy(Policy.NEVER) is Policy.NEVER


@pytest.mark.parametrize(
    ("value", "error"),
    [("Never", ValueError), (" ask", ValueError), (None, TypeError), (b"ask", TypeError)],
)
def test_parse_policy_refuses_everything_else(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r'^approval policy must be one of "ask" or "never"$'):
        parse_policy(value)


def test_the_public_api_is_explicit_and_every_error_is_a_broker_error() -> None:
    import inspect

    import broker
    from broker.acp import JsonRpcError
    from broker.store import StoreError

    assert "annotations" not in broker.__all__
    assert "store" not in broker.__all__
    assert all(hasattr(broker, name) for name in broker.__all__)
    errors = [
        obj
        for module in (broker, broker.store, broker.acp)
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Exception)
    ]
    assert errors
    assert all(issubclass(cls, broker.BrokerError) for cls in errors), [
        cls.__name__ for cls in errors if not issubclass(cls, broker.BrokerError)
    ]
    assert issubclass(StoreError, broker.BrokerError)
    assert issubclass(JsonRpcError, broker.BrokerError)


def test_tool_and_hook_errors_are_broker_errors_too() -> None:
    from broker import BrokerError
    from broker.hooks import HookSettingsError
    from broker.tools import SandboxUnavailableError

    assert issubclass(SandboxUnavailableError, BrokerError)
    assert issubclass(HookSettingsError, BrokerError)
