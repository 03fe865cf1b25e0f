"""The inbox over HTTP (no browser): who may read and answer, what an answer records, the live
stream and its bounds. The page in a real browser: ``test_inbox_browser.py``; the command:
``test_inbox_cli.py``."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from broker import (
    AbortSignal,
    AnswerRefusedError,
    ApprovalRequest,
    Broker,
    Decision,
    Outcome,
    Session,
    open_broker,
)
from broker.inbox import InboxKeys, InboxListenError, serve_inbox
from broker.inbox._feed import Feed
from broker.store.board import MemoryBoard, PendingQuestion

from .conftest import lines_of
from .inbox_support import TOKEN, Inbox, http, open_events, open_inbox

CSRF = InboxKeys(token=TOKEN).csrf
BEARER = {"authorization": f"Bearer {TOKEN}"}


@attrs.define
class Asked:
    id: str
    signal: AbortSignal
    decisions: list[Decision]
    decided: trio.Event


@asynccontextmanager
async def asking(broker: Broker, session: Session, **fields: Any) -> AsyncIterator[Asked]:
    """One question asked through the remote answerer, waiting on the board while the block
    runs; the block must see it settled (or it is withdrawn on the way out)."""
    signal = AbortSignal()
    decisions: list[Decision] = []
    decided = trio.Event()
    fields = {"tool_name": "bash", "call_id": "call_1", "reason": "rm -rf build"} | fields
    async with broker.answerer(broker.remote_answerer()), session.turn():
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                req = ApprovalRequest(agent=session.agent, signal=signal, **fields)
                decisions.append(await broker.request_decision(req))
                decided.set()

            nursery.start_soon(ask)
            # Polled: on SQLite the board is written from a worker thread.
            with trio.fail_after(5):
                for _ in range(1000):
                    if found := await broker.pending(session.id):
                        break
                    await trio.sleep(0.005)
            (question,) = found
            yield Asked(question.id, signal, decisions, decided)
            signal.abort("the test block ended")


def answer_body(qid: str, outcome: str = "allowed-once", by: str = "alice") -> bytes:
    return json.dumps({"id": qid, "outcome": outcome, "by": by}).encode()


def answering(**more: str) -> dict[str, str]:
    return {"content-type": "application/json", "x-csrf-token": CSRF, **BEARER, **more}


@pytest.fixture
async def inbox(approval_broker: Broker) -> AsyncIterator[Inbox]:
    async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
        yield inbox


async def test_without_the_token_every_route_answers_401_with_no_data_and_no_answer(
    approval_broker: Broker, approval_session: Session, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with asking(approval_broker, approval_session) as asked:
            for method, path in [
                ("GET", "/"),
                ("GET", "/inbox.js"),
                ("GET", "/events"),
                ("GET", "/api/pending"),
                ("GET", "/nowhere"),
                ("POST", "/api/answer"),
            ]:
                for headers in [
                    {},
                    {"authorization": "Bearer wrong-token-0123456789"},
                    {"cookie": f"{InboxKeys(token=TOKEN).cookie_name}=forged"},
                    {"content-type": "application/json", "x-csrf-token": CSRF},
                ]:
                    reply = await http(
                        inbox.port, method, path, headers=headers, body=answer_body(asked.id)
                    )
                    assert reply.status == 401, (method, path, headers)
                    assert asked.id.encode() not in reply.body
                    assert b"rm -rf" not in reply.body
            wrong = await http(inbox.port, "GET", "/api/pending?token=not-the-token-0123456")
            assert wrong.status == 401
            status = await approval_broker.board.status(asked.id)
            assert status is not None
            assert status.answer is None
            assert status.settled is None
    assert asked.decisions[0].outcome is Outcome.CANCELLED


async def test_the_first_visit_trades_the_token_for_a_strict_httponly_cookie(
    inbox: Inbox,
) -> None:
    keys = InboxKeys(token=TOKEN)
    with trio.fail_after(10):
        first = await http(inbox.port, "GET", f"/?token={TOKEN}")
        assert first.status == 303
        assert first.headers["location"] == "/"  # the token leaves the address bar
        assert first.headers["set-cookie"] == (
            f"{keys.cookie_name}={keys.cookie_value}; Path=/; HttpOnly; SameSite=Strict"
        )
        cookie = first.headers["set-cookie"].split(";")[0]
        page = await http(inbox.port, "GET", "/", headers={"cookie": cookie})
    assert page.status == 200
    assert f'<meta name="csrf-token" content="{CSRF}">'.encode() in page.body
    assert TOKEN.encode() not in page.body
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "default-src 'none'" in policy
    assert page.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    "csrf", [None, "", "0" * 64, CSRF[:-1] + ("0" if CSRF[-1] != "0" else "1")]
)
async def test_an_answer_without_the_right_csrf_token_is_403_and_records_nothing(
    approval_broker: Broker, approval_session: Session, inbox: Inbox, csrf: str | None
) -> None:
    headers = {"content-type": "application/json", **BEARER}
    if csrf is not None:
        headers["x-csrf-token"] = csrf
    with trio.fail_after(10):
        async with asking(approval_broker, approval_session) as asked:
            reply = await http(
                inbox.port, "POST", "/api/answer", headers=headers, body=answer_body(asked.id)
            )
            assert reply.status == 403
            assert json.loads(reply.body) == {
                "error": "csrf token missing or wrong: send the X-CSRF-Token the page was "
                "served with (reload the page)"
            }
            await trio.sleep(0.05)  # the asker would have read an answer by now
            status = await approval_broker.board.status(asked.id)
            assert status is not None
            assert (status.answer, status.settled) == (None, None)
            assert [q.id for q in await approval_broker.pending()] == [asked.id]
    assert asked.decisions[0].outcome is Outcome.CANCELLED
    assert "answeredBy" not in lines_of(approval_broker, approval_session)[-2]


async def test_an_answer_decides_the_question_with_answered_by_and_a_replay_is_refused(
    approval_broker: Broker, approval_session: Session, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with asking(approval_broker, approval_session) as asked:
            body = answer_body(asked.id, "rejected", "alice")
            reply = await http(inbox.port, "POST", "/api/answer", headers=answering(), body=body)
            assert reply.status == 200
            assert json.loads(reply.body) == {"id": asked.id, "outcome": "rejected", "by": "alice"}
            await trio.testing.wait_all_tasks_blocked()
            assert asked.decisions
            replay = await http(inbox.port, "POST", "/api/answer", headers=answering(), body=body)
            other = answer_body(asked.id, "allowed-once", "mallory")
            late = await http(inbox.port, "POST", "/api/answer", headers=answering(), body=other)
    (decision,) = asked.decisions
    assert (decision.outcome, decision.answered_by) == (Outcome.REJECTED, "alice")
    assert lines_of(approval_broker, approval_session)[2] == (
        f'{{"type":"approval/decided","data":{{"id":"{asked.id}","outcome":"rejected",'
        '"answeredBy":"alice","source":"answerer","answerer":"board",'
        '"answers":"rejected by alice (shared-token)"}}'
    )
    for refused in (replay, late):
        assert refused.status == 409
        assert json.loads(refused.body) == {
            "id": asked.id,
            "by": "alice",
            "error": f"question {asked.id!r} is no longer pending: it was settled as rejected",
            "recorded": "rejected",
        }


async def test_bad_answers_are_refused_by_name_and_change_nothing(
    approval_broker: Broker, approval_session: Session, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with asking(approval_broker, approval_session) as asked:

            async def post(body: bytes, **headers: str) -> tuple[int, Any]:
                reply = await http(
                    inbox.port, "POST", "/api/answer", headers=answering(**headers), body=body
                )
                return reply.status, json.loads(reply.body)

            assert await post(answer_body("no-such-id")) == (
                404,
                {
                    "id": "no-such-id",
                    "error": "unknown question id 'no-such-id': broker pending STORE lists the "
                    "questions waiting for an answer",
                },
            )
            status, reply = await post(answer_body(asked.id, "cancelled"))
            assert status == 400
            assert reply["error"].startswith("outcome must be 'allowed-once' or 'rejected'")
            status, reply = await post(answer_body(asked.id, by=" "))
            assert status == 400
            assert reply["error"].startswith("by must be a non-empty name")
            status, reply = await post(json.dumps({"id": asked.id, "outcome": "rejected"}).encode())
            assert (status, reply["error"]) == (400, "body: required field missing @ $.by")
            status, reply = await post(b"{not json")
            assert (status, reply["error"]) == (400, 'body must be JSON: {"id", "outcome", "by"}')
            status, reply = await post(answer_body(asked.id), **{"content-type": "text/plain"})
            assert status == 415
            status, reply = await post(b"x" * 9000)
            assert (status, reply["error"]) == (
                413,
                "body must be at most 8192 bytes: send id, outcome, by",
            )
            wrong_method = await http(inbox.port, "GET", "/api/answer", headers=BEARER)
            assert wrong_method.status == 405
            current = await approval_broker.board.status(asked.id)
            assert current is not None
            assert (current.answer, current.settled) == (None, None)
    assert asked.decisions[0].outcome is Outcome.CANCELLED


async def test_produced_fields_leave_the_server_with_controls_visibly_escaped(
    approval_broker: Broker, approval_session: Session, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with asking(
            approval_broker,
            approval_session,
            tool_name="bash\x1b[2K",
            reason="rm -rf /\r\u202eevil\nline two",
            display_reason="<script>alert(1)</script>",
        ):
            reply = await http(inbox.port, "GET", "/api/pending", headers=BEARER)
    (question,) = json.loads(reply.body)["questions"]
    assert question["toolName"] == "bash\\x1b[2K"
    assert question["reason"] == "rm -rf /\\x0d\\u202eevil\nline two"
    # Markup is text: the page puts it in textContent (the browser test proves it stays inert).
    assert question["displayReason"] == "<script>alert(1)</script>"


async def test_the_stream_sends_the_list_then_what_was_added_and_how_it_settled(
    approval_broker: Broker, approval_session: Session, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with open_events(inbox.port, BEARER) as events:
            assert events.status == 200
            name, data = await events.next()
            assert (name, json.loads(data)["questions"]) == ("snapshot", [])
            async with asking(approval_broker, approval_session, reason="first") as asked:
                name, data = await events.next()
                change = json.loads(data)
                assert name == "change"
                assert [q["reason"] for q in change["added"]] == ["first"]
                assert change["total"] == 1
                await approval_broker.answer(asked.id, "allowed-once", by="bob")
                name, data = await events.next()
            assert json.loads(data)["gone"] == [
                {"id": asked.id, "outcome": "allowed-once", "by": "bob"}
            ]
            async with asking(approval_broker, approval_session) as withdrawn:
                await events.next()  # added
                withdrawn.signal.abort("moved on")
                name, data = await events.next()
            assert json.loads(data)["gone"] == [{"id": withdrawn.id, "outcome": "cancelled"}]


async def test_on_sqlite_the_stream_names_who_settled_a_question_the_board_pruned(
    tmp_path: pathlib.Path,
) -> None:
    """A SQLite board drops a decided question's rows as soon as it lists the pending ones
    (the feed's own poll does): the settled card still names who answered, read from the
    ``approval/decided`` event, and a late answer is told who it was."""
    async with open_broker(store=tmp_path / "s.sqlite") as broker:
        session = await broker.start_session()
        async with open_inbox(broker, poll_interval=0.01) as inbox:
            with trio.fail_after(10):
                async with open_events(inbox.port, BEARER) as events:
                    await events.next()  # the snapshot
                    async with asking(broker, session) as asked:
                        await events.next()  # added
                        await broker.answer(asked.id, "allowed-once", by="bob")
                        await asked.decided.wait()
                        name, data = await events.next()
                    assert (name, json.loads(data)["gone"]) == (
                        "change",
                        [{"id": asked.id, "outcome": "allowed-once", "by": "bob"}],
                    )
                    assert await broker.pending() == []  # pruned
                    with pytest.raises(AnswerRefusedError) as info:
                        await broker.answer(asked.id, "rejected", by="carol")
                    assert info.value.answered_by == "bob"


async def test_pages_that_went_away_leave_no_listener_behind(
    approval_broker: Broker, inbox: Inbox
) -> None:
    # More connect-and-leave cycles than the feed admits pages at once (64): each page that
    # went away must have been dropped, or the last ones would be refused with 503.
    with trio.fail_after(20):
        for _ in range(70):
            async with open_events(inbox.port, BEARER) as events:
                assert events.status == 200
                assert (await events.next())[0] == "snapshot"


async def test_a_page_that_does_not_keep_up_is_dropped_not_buffered() -> None:
    board = MemoryBoard()
    feed = Feed(board, queue_size=2)
    scope = trio.CancelScope()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(feed.run_poller)
            async with feed.subscribe(scope) as (_first, changes):
                for n in range(4):
                    await board.publish(
                        PendingQuestion(
                            id=f"q{n}", session_id="s", agent="a", tool_name="t",
                            asked_at_ms=n, owner="o",
                        )
                    )  # fmt: skip
                    await feed.poll_once()
                assert scope.cancel_called
                assert [json.loads(m.split(b"data: ")[1])["added"][0]["id"] for m in [
                    changes.receive_nowait(), changes.receive_nowait()
                ]] == ["q0", "q1"]  # fmt: skip
                with pytest.raises(trio.EndOfChannel):
                    changes.receive_nowait()
            nursery.cancel_scope.cancel()


async def test_serve_inbox_refuses_a_taken_port_and_a_weak_token_by_name(
    approval_broker: Broker, inbox: Inbox
) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            with pytest.raises(InboxListenError) as info:
                await nursery.start(
                    partial(serve_inbox, approval_broker, token=TOKEN, port=inbox.port)
                )
            assert info.value.strerror == (
                f"port {inbox.port} on 127.0.0.1 is in use (another inbox?): pass another port, "
                "or 0 for any free one"
            )
            with pytest.raises(ValueError, match=r"^token must be a secret of at least 16 "):
                await nursery.start(partial(serve_inbox, approval_broker, token="short", port=0))
            with pytest.raises(ValueError, match=r"^port must be an integer from 0 to 65535 "):
                await nursery.start(partial(serve_inbox, approval_broker, token=TOKEN, port=-1))


async def test_the_session_view_reads_an_sqlite_log_and_refuses_what_it_cannot_show(
    tmp_path: pathlib.Path, inbox: Inbox
) -> None:
    with trio.fail_after(20):
        memory = await http(inbox.port, "GET", "/api/session?id=x", headers=BEARER)
        assert (memory.status, json.loads(memory.body)) == (
            404,
            {
                "error": (
                    "no session view here: the inbox reads session logs from a SQLite or "
                    "PostgreSQL store"
                )
            },
        )
        async with open_broker(store=str(tmp_path / "log.sqlite")) as broker:
            async with broker.open_session() as session, open_inbox(broker) as sqlite_inbox:
                async with asking(broker, session, reason="shown in the log") as asked:
                    await broker.answer(asked.id, "rejected", by="bob")
                    await trio.testing.wait_all_tasks_blocked()
                    with trio.fail_after(5):
                        await asked.decided.wait()
                    seen = await http(
                        sqlite_inbox.port, "GET", f"/api/session?id={session.id}", headers=BEARER
                    )
                    unknown = await http(
                        sqlite_inbox.port, "GET", "/api/session?id=nope", headers=BEARER
                    )
                    missing = await http(sqlite_inbox.port, "GET", "/api/session", headers=BEARER)
                    stranger = await http(sqlite_inbox.port, "GET", f"/api/session?id={session.id}")
    assert seen.status == 200
    view = json.loads(seen.body)
    assert (view["sessionId"], view["total"]) == (session.id, 3)
    assert [row["type"] for row in view["rows"]] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
    ]
    # The words of broker log show (one describer for both), without its column padding.
    assert re.fullmatch(
        rf"decided {asked.id} rejected by bob \[answerer: board\] — answers: rejected by bob "
        rf"\(in-process\) \(asked at #2, \d+\.\d{{3}}s\)",
        view["rows"][2]["text"],
    )
    assert re.fullmatch(
        rf"asked {asked.id} tool \S+ .*-> decided at #3 after .*", view["rows"][1]["text"]
    )
    assert unknown.status == 404
    assert json.loads(unknown.body)["error"].startswith("session 'nope' is not in store file '")
    assert (missing.status, json.loads(missing.body)) == (
        400,
        {"error": "id is required: /api/session?id=SESSION_ID"},
    )
    assert stranger.status == 401
    assert b"shown in the log" not in stranger.body


@attrs.define(eq=False)
class CountingBoard:
    """A memory board that counts how often the feed reads it."""

    board: MemoryBoard = attrs.field(factory=MemoryBoard)
    reads: int = 0

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        self.reads += 1
        return await self.board.pending(session_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.board, name)


async def test_the_feed_reads_the_board_once_an_interval_and_only_while_a_page_listens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    board = CountingBoard()
    feed = Feed(board, interval=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run_poller)
        await trio.sleep(10)
        assert board.reads == 0  # nobody listens: nothing runs
        scope = trio.CancelScope()
        async with feed.subscribe(scope):
            assert board.reads == 1  # the page's snapshot is fresh
            await trio.sleep(1.05)
            assert board.reads == 11  # one read per interval, however many pages
            async with feed.subscribe(trio.CancelScope()):  # joins at the next read
                await trio.sleep(1)
            assert board.reads == 22  # still one read per interval with two pages
        await trio.sleep(0.2)  # the poller notices nobody is left
        after = board.reads
        await trio.sleep(10)
        assert board.reads == after
        nursery.cancel_scope.cancel()


async def test_grants_are_listed_and_revoked_from_the_page(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    with trio.fail_after(20):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            grant = await broker.remember(session, "bash", command="npm run", by="alice")
            async with open_inbox(broker) as page:
                listed = await http(page.port, "GET", "/api/grants", headers=BEARER)
                assert listed.status == 200
                [shown] = json.loads(listed.body)["grants"]
                assert (shown["id"], shown["command"], shown["by"], shown["status"]) == (
                    grant.id,
                    "npm run",
                    "alice",
                    "active",
                )
                body = json.dumps({"id": grant.id, "by": "bob"}).encode()
                forged = await http(
                    page.port,
                    "POST",
                    "/api/revoke",
                    headers={"content-type": "application/json", **BEARER},
                    body=body,
                )
                assert forged.status == 403  # no CSRF token: nothing revoked
                assert await broker.board.grant_revocation(grant.id) is None
                unknown = json.dumps({"id": "g-0000000000000000", "by": "bob"}).encode()
                missing = await http(
                    page.port, "POST", "/api/revoke", headers=answering(), body=unknown
                )
                assert missing.status == 404
                done = await http(page.port, "POST", "/api/revoke", headers=answering(), body=body)
                assert (done.status, json.loads(done.body)) == (
                    200,
                    {"id": grant.id, "outcome": "revoked", "by": "bob"},
                )
                listed = await http(page.port, "GET", "/api/grants", headers=BEARER)
                assert json.loads(listed.body)["grants"][0]["status"] == "revoked by bob"
            async with session.turn():
                req = ApprovalRequest(
                    agent=session.agent, tool_name="bash", arguments={"command": "npm run x"}
                )
                decision = await broker.request_decision(req)
    assert decision.outcome is Outcome.UNAVAILABLE  # asked again: nobody here to answer
