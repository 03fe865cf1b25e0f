"""The fast line encoder is only a shortcut: for every event class it serves, any value gives
exactly the converter's line (hypothesis over the whole of each field's type)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker._codec import _FAST_LINES, encode_event, encode_event_generic
from broker._events import ApprovalAsked, ApprovalDecided, Event, ToolCalled, TurnEnd
from broker._vocabulary import Outcome, Policy

# Every printable and control character, lone surrogates, U+2028/2029, quotes, backslashes.
text = st.text(alphabet=st.characters(codec=None), max_size=30)


def test_the_simple_event_classes_take_the_fast_path() -> None:
    assert ApprovalAsked in _FAST_LINES
    assert ApprovalDecided in _FAST_LINES
    # Nested or free-form data stays on the converter.
    assert TurnEnd not in _FAST_LINES
    assert ToolCalled not in _FAST_LINES


def _values(field: attrs.Attribute[Any]) -> st.SearchStrategy[Any]:
    name = str(field.type)
    base: st.SearchStrategy[Any]
    if "Outcome" in name:
        base = st.sampled_from(list(Outcome))
    elif "Policy" in name:
        base = st.sampled_from(list(Policy))
    elif "bool" in name:
        base = st.booleans()
    elif "int" in name:
        base = st.integers(min_value=-(2**70), max_value=2**70)
    else:
        base = text
    if "None" in name:
        base = st.none() | base
    return base


FAST_CLASSES: list[type[Event]] = sorted(_FAST_LINES, key=lambda cls: cls.TYPE)


@pytest.mark.parametrize("cls", FAST_CLASSES)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fast_line_equals_the_converter_line(cls: type[Event], data: st.DataObject) -> None:
    kwargs = {f.name: data.draw(_values(f), label=f.name) for f in attrs.fields(cls)}
    if data.draw(st.integers(0, 9), label="mistyped") == 0:
        # A value of the wrong type must fall back to the converter, not make another line.
        name = data.draw(st.sampled_from(sorted(kwargs)), label="field")
        kwargs[name] = data.draw(st.integers(0, 3) | st.booleans() | st.floats(), label="bad")
    event = cls(**kwargs)
    try:
        expected = encode_event_generic(event)
    except Exception as exc:  # the converter refuses it: so must the fast path
        with pytest.raises(type(exc)):
            encode_event(event)
        return
    assert encode_event(event) == expected
