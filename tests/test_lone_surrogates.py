"""A lone surrogate in a reason or a tool name (``json.loads('"\\ud800"')`` makes one from any
client's or model's JSON) is logged as its JSON escape and read back as given; it used to fail
the store's write (no codec writes it) and leave a durable store broken for every later
question."""

from __future__ import annotations

import pathlib

import pytest
import trio

from broker import ApprovalAsked, ApprovalRequest, Outcome, open_broker
from broker._codec import decode_event, encode_event, utf8_safe
from broker.store._logtools import open_reader, verify_store

REASON = "x \ud800 y \udfff é 😀"
TOOL = "bash\udc80"


def test_a_line_with_lone_surrogates_encodes_as_utf8_and_decodes_as_given() -> None:
    event = ApprovalAsked(id="q", tool_name=TOOL, reason=REASON)
    line = encode_event(event)
    assert line == (
        '{"type":"approval/asked","data":{"id":"q","toolName":"bash\\udc80",'
        '"reason":"x \\ud800 y \\udfff é 😀"}}'
    )
    line.encode()
    assert decode_event(line) == event
    # Lines without one are untouched (the seed's lines stay byte-identical).
    assert utf8_safe('{"a":"é 😀 \\u0000"}') == '{"a":"é 😀 \\u0000"}'


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.sqlite")
    return str(request.getfixturevalue("postgres_dsn"))


async def test_the_store_takes_them_and_keeps_serving(store: str) -> None:
    with trio.fail_after(20):
        async with open_broker(store=store, policy="never") as broker:
            async with broker.open_session() as session:
                for reason, tool in ((REASON, TOOL), ("plain", "bash")):
                    async with session.turn():
                        request = ApprovalRequest(
                            agent=session.agent, tool_name=tool, reason=reason
                        )
                        assert await broker.request(request) is Outcome.REJECTED
                session_id = session.id
    with open_reader(store) as reader:
        asked = [
            event
            for event in (decode_event(row.line) for row in reader.rows(session_id))
            if isinstance(event, ApprovalAsked)
        ]
    assert [(e.tool_name, e.reason) for e in asked] == [(TOOL, REASON), ("bash", "plain")]
    assert verify_store(store).sessions >= 1
