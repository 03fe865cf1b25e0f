"""The inbox with people (issue 35, item 1): a person signs in with their own token (then a
cookie bound to that token), their name is what an answer records whatever the body says, the
shared token no longer answers once people are registered, and a removed person is out at
once."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
import trio

from broker import Broker, Outcome, Session
from broker.inbox import InboxKeys
from broker.rules import load_rules
from broker.store import Person, new_token, token_hash

from .inbox_support import TOKEN, Inbox, http, open_events, open_inbox
from .test_inbox import CSRF, answer_body, answering, asking


async def register(broker: Broker, name: str, *groups: str) -> str:
    token = new_token()
    person = Person(
        name=name, groups=groups, token_hash=token_hash(token), added_ms=time.time_ns() // 10**6
    )
    await broker.board.add_person(person)
    return token


async def sign_in(inbox: Inbox, token: str) -> str:
    """The first visit with a personal token: the person's cookie (``name=value``)."""
    first = await http(inbox.port, "GET", f"/?token={token}")
    assert first.status == 303
    assert first.headers["location"] == "/"
    cookie = first.headers["set-cookie"]
    assert cookie.endswith("; Path=/; HttpOnly; SameSite=Strict")
    assert token not in cookie
    return cookie.split(";")[0]


def as_person(cookie: str) -> dict[str, str]:
    return {"content-type": "application/json", "x-csrf-token": CSRF, "cookie": cookie}


async def test_a_person_signs_in_and_answers_as_themselves(
    approval_broker: Broker, approval_session: Session
) -> None:
    token = await register(approval_broker, "alice")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            cookie = await sign_in(inbox, token)
            page = await http(inbox.port, "GET", "/", headers={"cookie": cookie})
            assert b'<meta name="broker-person" content="alice">' in page.body
            async with asking(approval_broker, approval_session) as asked:
                forged = answer_body(asked.id, "rejected", "mallory")  # a forged by
                reply = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(cookie), body=forged
                )
                assert reply.status == 200, reply.body
                assert json.loads(reply.body)["by"] == "alice"
                await trio.testing.wait_all_tasks_blocked()
    [decision] = asked.decisions
    assert (decision.outcome, decision.answered_by) == (Outcome.REJECTED, "alice")


async def test_the_shared_token_does_not_answer_once_people_exist(
    approval_broker: Broker, approval_session: Session
) -> None:
    await register(approval_broker, "alice")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            page = await http(inbox.port, "GET", "/", headers=answering())
            assert page.status == 200  # it still reads
            async with asking(approval_broker, approval_session) as asked:
                body = answer_body(asked.id, "allowed-once", "alice")
                reply = await http(
                    inbox.port, "POST", "/api/answer", headers=answering(), body=body
                )
                assert reply.status == 403
                assert (
                    "this store has registered people: sign in with your own token"
                    in (json.loads(reply.body)["error"])
                )
                status = await approval_broker.board.status(asked.id)
                assert status is not None
                assert status.answer is None  # nothing recorded
    assert asked.decisions[0].outcome is Outcome.CANCELLED


async def test_a_removed_person_is_out_at_once(
    approval_broker: Broker, approval_session: Session
) -> None:
    token = await register(approval_broker, "alice")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            cookie = await sign_in(inbox, token)
            assert (
                await http(inbox.port, "GET", "/api/pending", headers={"cookie": cookie})
            ).status == 200
            assert await approval_broker.board.remove_person("alice")
            for headers in ({"cookie": cookie}, {"authorization": f"Bearer {token}"}):
                assert (
                    await http(inbox.port, "GET", "/api/pending", headers=headers)
                ).status == 401
            # Registered again, with a new token: the old cookie stays worthless.
            fresh = await register(approval_broker, "alice")
            assert (
                await http(inbox.port, "GET", "/api/pending", headers={"cookie": cookie})
            ).status == 401
            assert (await http(inbox.port, "GET", f"/?token={fresh}")).status == 303


async def test_a_removed_persons_open_stream_ends_at_once(approval_broker: Broker) -> None:
    """Removing a person ends their live feed within a poll interval (in any process: the
    check reads the board); the shared token's stream and another person's stay open."""
    alice = await register(approval_broker, "alice")
    bob = await register(approval_broker, "bob")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            alice_cookie = await sign_in(inbox, alice)
            bob_cookie = await sign_in(inbox, bob)
            async with (
                open_events(inbox.port, {"cookie": alice_cookie}) as alices,
                open_events(inbox.port, {"cookie": bob_cookie}) as bobs,
            ):
                assert (alices.status, bobs.status) == (200, 200)
                assert (await alices.next())[0] == "snapshot"
                assert (await bobs.next())[0] == "snapshot"
                assert await approval_broker.board.remove_person("alice")
                with pytest.raises(EOFError, match="the stream ended"):
                    await alices.next()
                with trio.move_on_after(0.3) as bob_waited:  # 30 poll intervals
                    await bobs.next()
                assert bob_waited.cancelled_caught  # bob's stream is still open
            async with open_events(inbox.port, {"cookie": alice_cookie}) as again:
                assert again.status == 401


async def test_a_forged_person_cookie_is_refused(approval_broker: Broker) -> None:
    await register(approval_broker, "alice")
    keys = InboxKeys(token=TOKEN)
    forged = f"{keys.person_cookie_name}=alice.{'0' * 64}"
    other = InboxKeys(token="another-token-0123456789")
    elsewhere = f"{keys.person_cookie_name}={other.person_cookie('alice', 'x' * 64)}"
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            for cookie in (forged, elsewhere, f"{keys.person_cookie_name}=alice"):
                reply = await http(inbox.port, "GET", "/api/pending", headers={"cookie": cookie})
                assert reply.status == 401, cookie


async def test_a_question_for_named_approvers_is_theirs_alone(
    approval_broker: Broker, approval_session: Session, tmp_path: pathlib.Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\ndecision = "ask"\ntool = "bash"\napprovers = ["group:ops"]\n')
    approval_broker.set_rules(load_rules(rules))
    alice = await register(approval_broker, "alice", "ops")
    bob = await register(approval_broker, "bob")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            as_alice, as_bob = await sign_in(inbox, alice), await sign_in(inbox, bob)
            async with asking(approval_broker, approval_session) as asked:

                async def listed(cookie: str) -> list[str]:
                    reply = await http(
                        inbox.port, "GET", "/api/pending", headers={"cookie": cookie}
                    )
                    return [q["id"] for q in json.loads(reply.body)["questions"]]

                assert await listed(as_alice) == [asked.id]
                assert await listed(as_bob) == []
                shared = await http(inbox.port, "GET", "/api/pending", headers=answering())
                assert json.loads(shared.body)["questions"] == []  # not to the shared token
                body = answer_body(asked.id, "allowed-once", "bob")
                refused = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(as_bob), body=body
                )
                assert refused.status == 403
                assert "may be answered only by group:ops" in json.loads(refused.body)["error"]
                status = await approval_broker.board.status(asked.id)
                assert status is not None
                assert status.answer is None
                ok = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(as_alice), body=body
                )
                assert ok.status == 200, ok.body
                await asked.decided.wait()
    assert [(d.outcome, d.answered_by) for d in asked.decisions] == [
        (Outcome.ALLOWED_ONCE, "alice")
    ]


async def test_two_person_approval_in_the_inbox(
    approval_broker: Broker, approval_session: Session, tmp_path: pathlib.Path
) -> None:
    """quorum = 2: alice's approval is recorded and shown ("1 of 2 approvals, by alice"), her
    replay is refused (403) and counts once, bob's decides; each as signed in, whatever the
    body's by says; the log records every answer given and how it was authenticated."""
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rules]]\ndecision = "ask"\ntool = "bash"\napprovers = ["group:ops"]\nquorum = 2\n'
    )
    approval_broker.set_rules(load_rules(rules))
    alice = await register(approval_broker, "alice", "ops")
    bob = await register(approval_broker, "bob", "ops")
    with trio.fail_after(10):
        async with open_inbox(approval_broker, poll_interval=0.01) as inbox:
            as_alice, as_bob = await sign_in(inbox, alice), await sign_in(inbox, bob)
            async with asking(approval_broker, approval_session) as asked:
                body = answer_body(asked.id, "allowed-once", "mallory")
                first = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(as_alice), body=body
                )
                assert first.status == 200, first.body
                assert json.loads(first.body) == {
                    "id": asked.id,
                    "by": "alice",
                    "approvals": ["alice"],
                    "quorum": 2,
                }
                replay = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(as_alice), body=body
                )
                assert replay.status == 403
                assert "alice has approved question" in json.loads(replay.body)["error"]
                listed = await http(inbox.port, "GET", "/api/pending", headers={"cookie": as_bob})
                [shown] = json.loads(listed.body)["questions"]
                assert (shown["quorum"], shown["approvals"]) == (2, ["alice"])
                assert asked.decisions == []
                second = await http(
                    inbox.port, "POST", "/api/answer", headers=as_person(as_bob), body=body
                )
                assert second.status == 200, second.body
                assert json.loads(second.body)["by"] == "alice, bob"
                await asked.decided.wait()
    [decision] = asked.decisions
    assert (decision.outcome, decision.answered_by) == (Outcome.ALLOWED_ONCE, "alice, bob")
    assert decision.answers == (
        "allowed-once by alice (inbox-session); "
        "refused: allowed-once by alice (inbox-session): approved already; "
        "allowed-once by bob (inbox-session)"
    )
