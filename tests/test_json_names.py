"""The codec helpers shared by the event codec and the ACP wire: one naming for both."""

from __future__ import annotations

import pytest

from broker._json_names import camel, camel_path, json_type
from broker.acp._errors import WireDecodeError
from broker.acp._wire import CancelNotification, from_wire


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "boolean"),
        (1, "number"),
        (1.5, "number"),
        ("x", "string"),
        ([], "array"),
        ({}, "object"),
    ],
)
def test_json_type_names(value: object, name: str) -> None:
    assert json_type(value) == name


def test_camel_names_and_paths() -> None:
    assert camel("tool_call_id") == "toolCallId"
    assert camel("id") == "id"
    assert camel_path("$.client_capabilities.terminal") == "$.clientCapabilities.terminal"


def test_the_wire_names_an_int_a_number() -> None:
    with pytest.raises(WireDecodeError, match=r"got number"):
        from_wire(CancelNotification, {"sessionId": 5})
