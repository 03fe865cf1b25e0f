"""Approvers named by rules (issue 35, item 2): a question an ask rule gives to named approvers
reaches only them — answerers that cannot tell who answers step aside, `broker pending` and the
inbox list it only to them, and an answer from anyone else is refused, recording nothing."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
import trio
import trio.testing

from broker import ApprovalRequest, Outcome, first_answer, open_broker
from broker.rules import RulesFileError, load_rules

from .test_people import add, answer_with, token_file
from .test_remote_processes import asker, broker, decision_of, store

__all__ = ["store"]

RULES = """\
[[rules]]
decision = "ask"
tool = "bash"
approvers = ["alice", "group:ops"]
"""


def rules_file(tmp_path: pathlib.Path, text: str = RULES) -> pathlib.Path:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('decision = "allow"\ntool = "bash"\napprovers = ["alice"]', "only an ask rule has them"),
        ('decision = "ask"\ntool = "bash"\napprovers = []', "approvers must be a non-empty list"),
        ('decision = "ask"\ntool = "bash"\napprovers = ["Alice Smith"]', "approvers must be"),
        ('decision = "ask"\ntool = "bash"\napprovers = "alice"', "approvers must be"),
    ],
)
def test_bad_approvers_are_refused_at_load(tmp_path: pathlib.Path, text: str, problem: str) -> None:
    with pytest.raises(RulesFileError, match=problem):
        load_rules(rules_file(tmp_path, "[[rules]]\n" + text + "\n"))


async def test_answerers_that_cannot_tell_who_answers_step_aside(tmp_path: pathlib.Path) -> None:
    rules = load_rules(rules_file(tmp_path))
    asked: list[str] = []

    async def editor(req: ApprovalRequest, next_: object) -> Outcome:
        asked.append(req.tool_name)
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    async with open_broker(rules=rules) as broker, broker.open_session() as session:
        async with broker.answerer(editor), session.turn():
            named = await broker.request_decision(
                ApprovalRequest(agent=session.agent, tool_name="bash")
            )
            other = await broker.request(ApprovalRequest(agent=session.agent, tool_name="read"))
        remote = broker.remote_answerer()
        race = first_answer(editor, remote)
        async with broker.answerer(race), session.turn(), trio.open_nursery() as nursery:
            outcomes: list[Outcome] = []

            async def asking() -> None:
                req = ApprovalRequest(agent=session.agent, tool_name="bash")
                outcomes.append(await broker.request(req))

            nursery.start_soon(asking)
            await trio.testing.wait_all_tasks_blocked()
            [pending] = await broker.pending()
            assert pending.approvers == ("alice", "group:ops")
            await broker.answer(pending.id, "rejected", by="alice")
    # The editor was never asked about bash: it cannot say who answers.
    assert asked == ["read"]
    assert (named.outcome, named.source.value if named.source else None) == (
        Outcome.UNAVAILABLE,
        "no-answerer",
    )
    assert other is Outcome.ALLOWED_ONCE
    assert outcomes == [Outcome.REJECTED]


def test_only_a_named_approver_sees_and_answers(store: str, tmp_path: pathlib.Path) -> None:
    alice = token_file(tmp_path, add(store, "alice"), "alice")
    bob = token_file(tmp_path, add(store, "bob", "dev"), "bob")
    carol = token_file(tmp_path, add(store, "carol", "ops"), "carol")

    def listed(secret: pathlib.Path | None) -> list[str]:
        flags = ["--token-file", str(secret)] if secret is not None else []
        shown = broker("pending", store, "--json", *flags)
        assert shown.returncode == 0, shown.stderr
        return [q["id"] for q in json.loads(shown.stdout)]

    with asker(store, "--rules", str(rules_file(tmp_path))) as a:
        deadline = time.monotonic() + 30
        while not (seen := listed(alice)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(seen) == 1
        row = {"id": seen[0]}
        assert listed(None) == []  # not to someone unidentified
        assert listed(carol) == [row["id"]]  # group:ops
        assert listed(bob) == []
        refused = answer_with(store, row["id"], "allow", "--token-file", str(bob))
        assert refused.returncode == 1
        assert "may be answered only by alice, group:ops (a rule names them): you are bob" in (
            refused.stderr
        )
        answered = answer_with(store, row["id"], "reject", "--token-file", str(carol))
        assert answered.returncode == 0, answered.stderr
        assert decision_of(a)["answeredBy"] == "carol"
