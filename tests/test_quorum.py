"""Two-person approval (issue 35, items 3 and 4): a rule's ``quorum = 2`` allows a question only
once two different approvers have allowed it, one reject rejects it at once, the same person
twice counts once; and every answer given — counted, deciding or refused — is recorded with who
gave it and how they were authenticated, in ``approval/decided`` (``answers``)."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
import trio.testing

from broker import ApprovalRequest, Broker, Decision, Outcome, Session, open_broker
from broker.rules import RulesFileError, load_rules
from broker.store import (
    Answered,
    AnswerGiven,
    MemoryBoard,
    NotAnApproverError,
    PendingQuestion,
    Person,
    answer_question,
    token_hash,
)

from .conftest import lines_of
from .test_people import add, answer_with, token_file
from .test_remote_processes import asker, broker, decision_of, store

__all__ = ["store"]

RULES = """\
[[rules]]
decision = "ask"
tool = "bash"
approvers = ["alice", "bob", "group:ops"]
quorum = 2
"""


def rules_file(tmp_path: pathlib.Path, text: str = RULES) -> pathlib.Path:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('decision = "allow"\ntool = "x"\nquorum = 2', "only an ask rule has one"),
        ('decision = "ask"\ntool = "x"\nquorum = 2', "quorum = 2 needs approvers to count"),
        ('decision = "ask"\ntool = "x"\napprovers = ["a"]\nquorum = 0', "from 1 to 9, got 0"),
        ('decision = "ask"\ntool = "x"\napprovers = ["a"]\nquorum = "2"', "whole number"),
        ('decision = "ask"\ntool = "x"\napprovers = ["a"]\nquorum = true', "whole number"),
        (
            'decision = "ask"\ntool = "x"\napprovers = ["a", "b"]\nquorum = 3',
            r"quorum = 3 can never be met by 2 approver\(s\)",
        ),
    ],
)
def test_a_bad_quorum_is_refused_at_load(tmp_path: pathlib.Path, text: str, problem: str) -> None:
    with pytest.raises(RulesFileError, match=problem):
        load_rules(rules_file(tmp_path, "[[rules]]\n" + text + "\n"))


def test_a_quorum_with_a_group_loads(tmp_path: pathlib.Path) -> None:
    [rule] = load_rules(rules_file(tmp_path))
    assert (rule.approvers, rule.quorum) == (("alice", "bob", "group:ops"), 2)


@attrs.define
class Asked:
    question: PendingQuestion
    decisions: list[Decision]


@asynccontextmanager
async def asking(broker: Broker, session: Session) -> AsyncIterator[Asked]:
    """One question of the quorum rule waiting on the board (a remote answerer)."""
    decisions: list[Decision] = []
    async with broker.answerer(broker.remote_answerer()), session.turn():
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                req = ApprovalRequest(agent=session.agent, tool_name="bash")
                decisions.append(await broker.request_decision(req))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            [question] = await broker.pending()
            yield Asked(question=question, decisions=decisions)


async def test_two_different_approvers_allow_and_a_repeat_or_a_stranger_never_counts(
    tmp_path: pathlib.Path,
) -> None:
    rules = load_rules(rules_file(tmp_path))
    async with open_broker(rules=rules) as b, b.open_session() as session:
        async with asking(b, session) as asked:
            qid = asked.question.id
            assert (asked.question.approvers, asked.question.quorum) == (
                ("alice", "bob", "group:ops"),
                2,
            )
            first = await b.answer(qid, "allowed-once", by="alice")
            assert first == Answered(decided=None, approvals=("alice",), quorum=2)
            assert first.progress() == "1 of 2 approvals, by alice"
            with pytest.raises(NotAnApproverError, match=r"alice has approved question .* already"):
                await b.answer(qid, "allowed-once", by="alice")  # a replay counts once
            with pytest.raises(NotAnApproverError, match=r"may be answered only by alice, bob"):
                await b.answer(qid, "allowed-once", by="carol")
            await trio.testing.wait_all_tasks_blocked()
            assert asked.decisions == []  # one approval decides nothing
            second = await b.answer(qid, "allowed-once", by="bob")
            assert second.decided is not None
            assert (second.decided.outcome, second.decided.by) == (
                Outcome.ALLOWED_ONCE,
                "alice, bob",
            )
        [decision] = asked.decisions
        assert (decision.outcome, decision.answered_by) == (Outcome.ALLOWED_ONCE, "alice, bob")
        decided = json.loads(lines_of(b, session)[-2])["data"]
        assert decided["answers"] == (
            "allowed-once by alice (in-process); "
            "refused: allowed-once by alice (in-process): approved already; "
            "refused: allowed-once by carol (in-process): not an approver; "
            "allowed-once by bob (in-process)"
        )


async def test_one_reject_rejects_at_once(tmp_path: pathlib.Path) -> None:
    rules = load_rules(rules_file(tmp_path))
    async with open_broker(rules=rules) as b, b.open_session() as session:
        async with asking(b, session) as asked:
            qid = asked.question.id
            await b.answer(qid, "allowed-once", by="alice")
            rejected = await b.answer(qid, "rejected", by="bob", message="not on a friday")
            assert rejected.decided is not None
            assert rejected.decided.outcome is Outcome.REJECTED
        [decision] = asked.decisions
        assert (decision.outcome, decision.answered_by) == (Outcome.REJECTED, "bob")
        decided = json.loads(lines_of(b, session)[-2])["data"]
        assert decided["answers"] == (
            "allowed-once by alice (in-process); rejected by bob (in-process)"
        )


async def test_a_group_member_counts_and_an_unidentified_answer_never_does() -> None:
    board = MemoryBoard()
    question = PendingQuestion(
        id="q1",
        session_id="s",
        agent="a",
        tool_name="bash",
        asked_at_ms=0,
        owner="o",
        approvers=("alice", "group:ops"),
        quorum=2,
    )
    await board.publish(question)
    await board.add_person(
        Person(name="dana", groups=("ops",), token_hash=token_hash("bkr_x"), added_ms=0)
    )
    # A typed name and the shared token say nobody: never an approver, however named.
    for how in (None, "shared-token"):
        with pytest.raises(NotAnApproverError, match="you are not identified"):
            await answer_question(board, "q1", Outcome.ALLOWED_ONCE, "alice", how=how)
    counted = await answer_question(board, "q1", Outcome.ALLOWED_ONCE, "dana", how="token")
    assert counted.progress() == "1 of 2 approvals, by dana"
    done = await answer_question(board, "q1", Outcome.ALLOWED_ONCE, "alice", how="inbox-session")
    assert done.decided is not None
    assert done.decided.by == "dana, alice"
    assert [(g.by, g.how, g.refused) for g in await board.given("q1")] == [
        ("alice", None, "not an approver"),
        ("alice", "shared-token", "not an approver"),
        ("dana", "token", None),
        ("alice", "inbox-session", None),
    ]
    with pytest.raises(ValueError, match="how must be one of"):
        await answer_question(board, "q1", Outcome.ALLOWED_ONCE, "alice", how="cookie")


def waiting_for(store: str, token: pathlib.Path) -> str:
    """The id of the one question *token*'s person may answer, once it is listed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        shown = broker("pending", store, "--json", "--token-file", str(token))
        if shown.returncode == 0 and (rows := json.loads(shown.stdout)):
            [row] = rows
            return str(row["id"])
        time.sleep(0.05)
    pytest.fail("no question appeared in broker pending")


def test_two_people_approve_from_the_command_line(store: str, tmp_path: pathlib.Path) -> None:
    """SQLite and PostgreSQL, in separate processes: each approver's token, the first approval
    counted and told, a repeat refused (exit 1), the second deciding; the asker's log has the
    whole story."""
    alice = token_file(tmp_path, add(store, "alice"), "alice")
    bob = token_file(tmp_path, add(store, "bob"), "bob")
    carol = token_file(tmp_path, add(store, "carol", "dev"), "carol")
    with asker(store, "--rules", str(rules_file(tmp_path))) as a:
        row = {"id": waiting_for(store, alice)}
        first = answer_with(store, row["id"], "allow", "--token-file", str(alice))
        assert first.returncode == 0, first.stderr
        assert "your approval is recorded (1 of 2 approvals, by alice)" in first.stdout
        again = answer_with(store, row["id"], "allow", "--token-file", str(alice))
        assert again.returncode == 1
        assert "alice has approved question" in again.stderr
        stranger = answer_with(store, row["id"], "allow", "--token-file", str(carol))
        assert stranger.returncode == 1
        assert "you are carol" in stranger.stderr
        listed = broker("pending", store, "--json", "--token-file", str(bob))
        [shown] = json.loads(listed.stdout)
        assert (shown["id"], shown["approvals"]) == (row["id"], "1 of 2 approvals, by alice")
        second = answer_with(store, row["id"], "allow", "--token-file", str(bob))
        assert second.returncode == 0, second.stderr
        decided = decision_of(a)
    assert decided["outcome"] == "allowed-once"
    assert decided["answeredBy"] == "alice, bob"
    assert decided["answers"] == (
        "allowed-once by alice (token); "
        "refused: allowed-once by alice (token): approved already; "
        "refused: allowed-once by carol (token): not an approver; "
        "allowed-once by bob (token)"
    )


def test_log_show_tells_the_whole_story(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    alice = token_file(tmp_path, add(store, "alice"), "alice")
    bob = token_file(tmp_path, add(store, "bob"), "bob")
    with asker(store, "--rules", str(rules_file(tmp_path))) as a:
        row = {"id": waiting_for(store, alice)}
        assert answer_with(store, row["id"], "allow", "--token-file", str(alice)).returncode == 0
        assert answer_with(store, row["id"], "reject", "--token-file", str(bob)).returncode == 0
        decision_of(a)
    listing = broker("log", "show", store)
    assert listing.returncode == 0, listing.stderr
    session = listing.stdout.splitlines()[1].split()[0]
    shown = broker("log", "show", store, session)
    assert shown.returncode == 0, shown.stderr
    assert (
        "rejected by bob [answerer: board] — answers: allowed-once by alice (token); "
        "rejected by bob (token)"
    ) in shown.stdout


def test_a_typed_name_cannot_forge_an_entry_in_the_record() -> None:
    """A name typed with --by (one-person stores) is quoted unless plain, so it cannot read as
    a second answer in ``answers``."""
    forged = AnswerGiven(
        question_id="q",
        outcome=Outcome.REJECTED,
        by="x (token); allowed-once by bob",
        how="typed",
        at_ms=0,
    )
    assert forged.describe() == 'rejected by "x (token); allowed-once by bob" (typed)'
    plain = AnswerGiven(question_id="q", outcome=Outcome.ALLOWED_ONCE, by="uid:root", at_ms=0)
    assert plain.describe() == "allowed-once by uid:root"
