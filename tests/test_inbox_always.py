"""*Always allow* in the inbox, where the asker offers it: the answer remembers the tool for
the session (``approval/grant``) and allows once; where it is not offered it is refused (400)
and nothing is recorded. And the session view on a PostgreSQL store."""

from __future__ import annotations

import json

import trio
import trio.testing

from broker import ApprovalRequest, Broker, Decision, Outcome, Session, open_broker

from .conftest import types_of
from .inbox_support import Inbox, http, open_inbox
from .test_inbox import BEARER, answering


async def ask_and_answer(
    broker: Broker, session: Session, inbox: Inbox, *, offered: bool
) -> tuple[int, dict[str, object], list[Decision]]:
    decisions: list[Decision] = []
    async with broker.answerer(broker.remote_answerer(allow_always=offered)), session.turn():
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                req = ApprovalRequest(agent=session.agent, tool_name="bash", call_id="c1")
                decisions.append(await broker.request_decision(req))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            (question,) = await broker.pending(session.id)
            assert question.offers_always is offered
            body = {"id": question.id, "outcome": "allowed-once", "by": "alice", "always": True}
            reply = await http(
                inbox.port,
                "POST",
                "/api/answer",
                headers=answering(),
                body=json.dumps(body).encode(),
            )
            if reply.status != 200:
                await broker.answer(question.id, "rejected", by="bob")
    return reply.status, json.loads(reply.body), decisions


async def test_always_allow_where_offered_grants_then_allows(
    approval_broker: Broker, approval_session: Session
) -> None:
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            status, body, decisions = await ask_and_answer(
                approval_broker, approval_session, inbox, offered=True
            )
    assert status == 200, body
    assert [d.outcome for d in decisions] == [Outcome.ALLOWED_ONCE]
    assert types_of(approval_broker, approval_session)[1:4] == [
        "approval/asked",
        "approval/grant",
        "approval/decided",
    ]


async def test_always_allow_where_not_offered_is_400_and_records_nothing(
    approval_broker: Broker, approval_session: Session
) -> None:
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            status, body, decisions = await ask_and_answer(
                approval_broker, approval_session, inbox, offered=False
            )
    assert status == 400
    assert "does not offer always-allow" in str(body)
    assert [(d.outcome, d.answered_by) for d in decisions] == [(Outcome.REJECTED, "bob")]
    assert "approval/grant" not in types_of(approval_broker, approval_session)


async def test_the_session_view_reads_a_postgresql_log(postgres_dsn: str) -> None:
    with trio.fail_after(30):
        async with open_broker(store=postgres_dsn) as broker, broker.open_session() as session:
            async with open_inbox(broker, poll_interval=0.01) as inbox:
                async with session.turn():
                    pass
                seen = await http(
                    inbox.port, "GET", f"/api/session?id={session.id}", headers=BEARER
                )
    assert seen.status == 200, seen.body
    view = json.loads(seen.body)
    assert [row["type"] for row in view["rows"]] == ["turn/start", "turn/end"]
