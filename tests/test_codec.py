"""The one converter: golden JSON lines for every event type, round trips, clear decode errors."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker import (
    AgentMessage,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    Event,
    EventDecodeError,
    Outcome,
    Policy,
    SandboxModeSet,
    ToolCalled,
    ToolResulted,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
    decode_event,
    encode_event,
)

GOLDEN: list[tuple[Event, str]] = [
    (TurnStart(turn=1), '{"type":"turn/start","data":{"turn":1}}'),
    (
        TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
        '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}',
    ),
    (
        ApprovalAsked(id="a1", tool_name="bash"),
        '{"type":"approval/asked","data":{"id":"a1","toolName":"bash"}}',
    ),
    (
        ApprovalAsked(id="a1", tool_name="bash", call_id="call_00_x", reason="escalate sandbox"),
        '{"type":"approval/asked","data":{"id":"a1","toolName":"bash","callId":"call_00_x",'
        '"reason":"escalate sandbox"}}',
    ),
    (
        ApprovalAsked(id="a1", tool_name="édit", reason="写入 — ok"),
        '{"type":"approval/asked","data":{"id":"a1","toolName":"édit","reason":"写入 — ok"}}',
    ),
    (
        ApprovalDecided(id="a1", outcome=Outcome.ALLOWED_ONCE),
        '{"type":"approval/decided","data":{"id":"a1","outcome":"allowed-once"}}',
    ),
    (
        ApprovalDecided(id="a1", outcome=Outcome.ALLOWED_ONCE, remembered=True),
        '{"type":"approval/decided","data":{"id":"a1","outcome":"allowed-once","remembered":true}}',
    ),
    (
        ApprovalDecided(id="a1", outcome=Outcome.REJECTED, policy=Policy.NEVER),
        '{"type":"approval/decided","data":{"id":"a1","outcome":"rejected","policy":"never"}}',
    ),
    (
        ApprovalDecided(id="a1", outcome=Outcome.CANCELLED, recovered=True),
        '{"type":"approval/decided","data":{"id":"a1","outcome":"cancelled","recovered":true}}',
    ),
    (ApprovalPolicy(policy=Policy.ASK), '{"type":"approval/policy","data":{"policy":"ask"}}'),
    (
        ApprovalPolicy(policy=Policy.NEVER, source="delegation"),
        '{"type":"approval/policy","data":{"policy":"never","source":"delegation"}}',
    ),
    (ApprovalGrant(tool_name="bash"), '{"type":"approval/grant","data":{"toolName":"bash"}}'),
    (UserMessage(text="hi"), '{"type":"user/message","data":{"text":"hi"}}'),
    (AgentMessage(text="ok"), '{"type":"agent/message","data":{"text":"ok"}}'),
    (
        ToolCalled(call_id="c1", tool_name="bash", input={"command": "ls"}),
        '{"type":"tool/call","data":{"callId":"c1","toolName":"bash","input":{"command":"ls"}}}',
    ),
    (
        ToolResulted(call_id="c1", output="Error: no", is_error=True),
        '{"type":"tool/result","data":{"callId":"c1","output":"Error: no","isError":true}}',
    ),
    (SandboxModeSet(mode="read-only"), '{"type":"sandbox/mode","data":{"mode":"read-only"}}'),
]


@pytest.mark.parametrize(("event", "line"), GOLDEN, ids=[g[1][:48] for g in GOLDEN])
def test_golden_lines_are_byte_identical(event: Event, line: str) -> None:
    assert encode_event(event) == line
    assert decode_event(line) == event
    assert decode_event(line.encode()) == event


def test_outcome_values_cover_the_vocabulary_on_the_wire() -> None:
    for outcome in Outcome:
        line = encode_event(ApprovalDecided(id="x", outcome=outcome))
        assert json.loads(line)["data"]["outcome"] == outcome.value


ids = st.text(min_size=1, max_size=40)
optional = st.none() | st.text(max_size=80)
events = st.one_of(
    st.builds(TurnStart, turn=st.integers(min_value=1, max_value=10**6)),
    st.builds(
        TurnEnd,
        turn=st.integers(min_value=1, max_value=10**6),
        reason=st.builds(TurnEndReason, kind=st.text(min_size=1, max_size=20)),
    ),
    st.builds(ApprovalAsked, id=ids, tool_name=ids, call_id=optional, reason=optional),
    st.builds(
        ApprovalDecided,
        id=ids,
        outcome=st.sampled_from(Outcome),
        remembered=st.booleans(),
        policy=st.none() | st.sampled_from(Policy),
        recovered=st.booleans(),
    ),
    st.builds(ApprovalPolicy, policy=st.sampled_from(Policy), source=optional),
    st.builds(ApprovalGrant, tool_name=ids),
)


@given(events)
def test_round_trip_and_no_nulls(event: Event) -> None:
    line = encode_event(event)
    assert decode_event(line) == event
    assert "\n" not in line
    assert not _has_null(json.loads(line)["data"])


def _has_null(value: object) -> bool:
    """Whether a JSON value holds a null anywhere (optional keys must be omitted instead)."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return False


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", r"^not valid JSON: Expecting property name enclosed in double quotes at column 2$"),
        ("[]", r"^event must be a JSON object, got list$"),
        ('{"type":"approval/asked"}', r"^event 'approval/asked' has no data object$"),
        (
            '{"type":"approval/nope","data":{}}',
            r"^unknown event type 'approval/nope': expected one of agent/message, approval/asked, "
            r"approval/decided, approval/grant, approval/policy, approval/revoke, sandbox/mode, "
            r"tool/call, "
            r"tool/result, turn/end, turn/start, user/message$",
        ),
        (
            '{"type":"turn/start","data":{"turn":1},"extra":1}',
            r"^event has unexpected keys \['extra'\]: expected type and data$",
        ),
        (
            '{"type":"approval/grant","data":{"toolName":"bash","tool":"x"}}',
            r"^malformed 'approval/grant' event: unexpected keys \(tool\): expected only toolName, "
            r"id, command, by, atMs, expiresAtMs, ruleFile @ \$$",
        ),
        (
            '{"type":"approval/decided","data":{"id":"x","outcome":"allowed"}}',
            r"^malformed 'approval/decided' event: expected one of allowed-once, rejected, "
            r"cancelled, unavailable @ \$\.outcome$",
        ),
        (
            '{"type":"approval/asked","data":{"id":"x"}}',
            r"^malformed 'approval/asked' event: required field missing @ \$\.toolName$",
        ),
    ],
)
def test_decode_errors_are_ours_and_clear(line: str, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_event(line)


def test_snake_case_keys_are_refused() -> None:
    with pytest.raises(
        EventDecodeError, match=re.escape("unexpected keys (tool_name): expected only toolName")
    ):
        decode_event('{"type":"approval/grant","data":{"tool_name":"bash"}}')


@pytest.mark.parametrize(
    ("line", "path"),
    [
        (
            '{"type":"approval/decided","data":{"id":"x","outcome":"allowed-once",'
            '"remembered":"false"}}',
            "remembered",
        ),
        (
            '{"type":"approval/decided","data":{"id":"x","outcome":"allowed-once","remembered":1}}',
            "remembered",
        ),
        ('{"type":"turn/start","data":{"turn":"1"}}', "turn"),
        ('{"type":"turn/start","data":{"turn":true}}', "turn"),
        ('{"type":"approval/grant","data":{"toolName":5}}', "toolName"),
        ('{"type":"approval/decided","data":{"id":"x","outcome":1}}', "outcome"),
    ],
)
def test_no_json_type_is_coerced(line: str, path: str) -> None:
    """A garbled value is refused, never coerced: "false" must not become a remembered grant."""
    with pytest.raises(EventDecodeError, match=rf"@ \$\.{path}$"):
        decode_event(line)


def test_nested_paths_are_camel_case_per_identifier() -> None:
    with pytest.raises(EventDecodeError, match=r"@ \$\.reason\.kind$"):
        decode_event('{"type":"turn/end","data":{"turn":1,"reason":{"kind":3}}}')
