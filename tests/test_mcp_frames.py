"""The MCP gate's strict framing (``broker/mcp/_frames.py``): one reading for every peer."""

from __future__ import annotations

import pytest

from broker.mcp._frames import FrameError, Kind, classify, id_key, is_gated_method, parse_frame


def test_ids_that_python_confuses_are_different_keys() -> None:
    assert len({id_key(1), id_key("1"), id_key(True), id_key(1.0)}) == 4


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"a":{"b":1,"b":2}}', r"^duplicate key 'b' in a JSON object: send each key once$"),
        (b'{"x":Infinity}', r"^Infinity is not JSON$"),
        (b"\xc3\x28", r"^not UTF-8 \(invalid continuation byte at byte 0\)$"),
        (b"[" * 65 + b"]" * 65, r"^JSON nested deeper than 64 levels$"),
        (b'{"s":"' + b"[" * 100 + b'"}', None),  # brackets inside a string are not depth
    ],
)
def test_strict_parsing(line: bytes, problem: str | None) -> None:
    if problem is None:
        assert parse_frame(line) == {"s": "[" * 100}
        return
    with pytest.raises(FrameError, match=problem):
        parse_frame(line)


def test_anything_with_a_method_is_a_request_or_a_notification() -> None:
    assert classify({"id": 1, "method": "tools/call", "result": {}}) is Kind.REQUEST
    assert classify({"method": "tools/call"}) is Kind.NOTIFICATION
    assert classify({"id": 1, "error": {}}) is Kind.RESPONSE
    with pytest.raises(FrameError, match=r"^method must be a string$"):
        classify({"id": 1, "method": 5})
    with pytest.raises(FrameError, match=r"^neither a request, a notification nor a response$"):
        classify({"id": 1})


@pytest.mark.parametrize("method", ["tools/call", "Tools/Call", " tools/call\t", "TOOLS/CALL"])
def test_loose_spellings_of_tools_call_are_gated(method: str) -> None:
    assert is_gated_method(method)
    assert not is_gated_method("tools/list")
