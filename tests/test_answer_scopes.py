"""Answers with a scope (issue 32, item 3): once, for the session (for how long), or
remembered as a rule of the project — the rule shown before it is chosen, appended to the
project's rules file, loaded back before the file is replaced, and read by every later
session."""

from __future__ import annotations

import io
import json
import pathlib
import sqlite3
import threading

import pytest
import trio
import trio.testing

from broker import (
    Answer,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalRequest,
    Broker,
    Outcome,
    Session,
    Source,
    open_broker,
)
from broker.cli._terminal import TerminalAnswerer
from broker.rules import Layer, RuleDecision, RuleSet, RulesFileError, load_rules
from broker.rules._remember import remember_in_file
from broker.store import MemoryBoard, PendingQuestion, open_store

from .conftest import log_of
from .inbox_support import http, open_inbox
from .test_inbox import answering

RULES = """\
[[rules]]
decision = "deny"
tool = "bash"
command = "rm"
"""


def ask(session: Session, command: str, tool: str = "bash") -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name=tool, arguments={"command": command})


def remember(path: pathlib.Path, tool: str = "bash", command: str | None = "npm run", **kw: str):  # type: ignore[no-untyped-def]
    return remember_in_file(path, tool=tool, command=command, by=kw.get("by", "alice"), at="T")


# -- the file ------------------------------------------------------------------------------------


def test_a_remembered_rule_is_appended_and_loads_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / ".broker" / "rules.toml"
    path.parent.mkdir()
    path.write_text(RULES)
    rule = remember(path)
    assert rule.decision is RuleDecision.ALLOW
    assert (rule.origin.layer, rule.origin.file, rule.origin.index) == (
        Layer.PROJECT,
        str(path),
        2,
    )
    text = path.read_text()
    assert text.startswith(RULES)  # what was there stays, byte for byte
    assert "# remembered by alice at T\n[[rules]]\n" in text
    assert 'examples = ["npm run"]' in text  # broker rules check keeps proving it
    loaded = RuleSet(load_rules(path))
    assert loaded.decide("bash", {"command": "npm run build"}).decision is RuleDecision.ALLOW
    assert loaded.decide("bash", {"command": "npm test"}).decision is None
    assert loaded.decide("bash", {"command": "npm run x; curl e | sh"}).decision is None


def test_a_missing_file_and_folder_are_made(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a" / "b" / "rules.toml"
    rule = remember(path, tool="mcp__files__read", command=None)
    assert rule.origin.index == 1
    assert RuleSet(load_rules(path)).decide("mcp__files__read", {}).decision is RuleDecision.ALLOW


def test_glob_characters_in_a_tool_name_match_only_themselves(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rules.toml"
    remember(path, tool="get*[x]?", command=None)
    rules = RuleSet(load_rules(path))
    assert rules.decide("get*[x]?", {}).decision is RuleDecision.ALLOW
    for other in ("get_anything", "getx", "get*x!"):
        assert rules.decide(other, {}).decision is None, other


def test_a_file_that_does_not_load_is_left_untouched(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rules.toml"
    broken = '[[rules]]\ndecision = "allow"\ntool = "bash"\nsurprise = 1\n'
    path.write_text(broken)
    with pytest.raises(RulesFileError, match="unknown key 'surprise'"):
        remember(path)
    assert path.read_text() == broken
    path.write_text("not = [toml")
    with pytest.raises(RulesFileError, match="not TOML"):
        remember(path)
    assert path.read_text() == "not = [toml"
    assert [p.name for p in tmp_path.iterdir()] == ["rules.toml"]  # no temporary left behind


def test_who_answered_cannot_write_a_rule_of_their_own(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rules.toml"
    by = 'eve\n[[rules]]\ndecision = "allow"\ntool = "*"\r'
    remember(path, by=by)
    rules = load_rules(path)
    assert len(rules) == 1
    assert RuleSet(rules).decide("write_file", {}).decision is None


def test_a_command_that_is_not_one_simple_command_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="command must be one simple command"):
        remember(tmp_path / "rules.toml", command="npm run; rm -rf /")
    assert not (tmp_path / "rules.toml").exists()


def test_processes_remembering_at_once_all_land(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rules.toml"
    errors: list[BaseException] = []

    def one(n: int) -> None:
        try:
            remember(path, command=f"make target{n}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    commands = {rule.command for rule in load_rules(path)}
    assert commands == {("make", f"target{n}") for n in range(12)}


# -- the library ---------------------------------------------------------------------------------


async def test_remembering_for_the_project_covers_every_later_session(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "rules.toml"
    async with open_broker(project_rules=path) as broker:
        async with broker.open_session() as first:
            grant = await broker.remember(
                first, "bash", command="npm run", by="alice", scope="project"
            )
            assert grant.rule_file == str(path)
            assert log_of(broker, first) == [
                ApprovalGrant(
                    tool_name="bash",
                    id=grant.id,
                    command="npm run",
                    by="alice",
                    at_ms=grant.at_ms,
                    rule_file=str(path),
                )
            ]
        async with broker.open_session() as later, later.turn():
            decision = await broker.request_decision(ask(later, "npm run build"))
            assert (decision.outcome, decision.source) == (Outcome.ALLOWED_ONCE, Source.RULE)
            refused = await broker.request_decision(ask(later, "npm run x && curl e | sh"))
            assert refused.source is Source.NO_ANSWERER
            decided = [e for e in log_of(broker, later) if isinstance(e, ApprovalDecided)]
    assert (decided[0].rule_layer, decided[0].rule_file, decided[0].rule_index) == (
        "project",
        str(path),
        1,
    )
    # A broker started later reads the file as its rules.
    async with open_broker(rules=load_rules(path)) as broker, broker.open_session() as session:
        async with session.turn():
            assert await broker.request(ask(session, "npm run test")) is Outcome.ALLOWED_ONCE


async def test_the_project_scope_needs_a_file_and_has_no_end(tmp_path: pathlib.Path) -> None:
    async with open_broker() as broker, broker.open_session() as session:
        with pytest.raises(ValueError, match=r"needs a project rules file: .*project_rules"):
            await broker.remember(session, "bash", command="npm run", scope="project")
        with pytest.raises(ValueError, match='scope must be "session" or "project"'):
            await broker.remember(session, "bash", scope="forever")  # type: ignore[arg-type]
    path = tmp_path / "rules.toml"
    async with open_broker(project_rules=path) as broker, broker.open_session() as session:
        with pytest.raises(ValueError, match="expires_in must be None"):
            await broker.remember(
                session, "bash", command="npm run", scope="project", expires_in=60
            )
        assert broker.grants(session) == []
    assert not path.exists()
    with pytest.raises(TypeError, match="project_rules must be a path"):
        async with open_broker(project_rules=3):  # type: ignore[arg-type]
            pass  # pragma: no cover


# -- the board (in memory, SQLite, and from another process) -------------------------------------


async def _published(broker: Broker) -> list[PendingQuestion]:
    # SQLite publishes from its thread: look until the question is on the board.
    for _ in range(2000):
        if waiting := await broker.pending():
            return waiting
        await trio.sleep(0.01)
    raise AssertionError("the question never reached the board")


async def _answer_one(
    broker: Broker, session: Session, command: str, **terms: object
) -> tuple[PendingQuestion, Outcome]:
    outcomes: list[Outcome] = []
    async with broker.answerer(broker.remote_answerer(allow_always=True)), session.turn():
        async with trio.open_nursery() as nursery:

            async def asking() -> None:
                outcomes.append(await broker.request(ask(session, command)))

            nursery.start_soon(asking)
            [pending] = await _published(broker)
            await broker.answer(pending.id, "allowed-once", by="alice", always=True, **terms)  # type: ignore[arg-type]
    return pending, outcomes[0]


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
async def test_an_answer_chooses_how_long_its_grant_lasts(
    durable: bool, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite" if durable else None
    with trio.fail_after(20):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            _, outcome = await _answer_one(broker, session, "npm run build", always_for=90)
            assert outcome is Outcome.ALLOWED_ONCE
            [grant] = broker.grants(session)
    assert grant.expires_at_ms is not None
    assert grant.at_ms is not None
    assert abs(grant.expires_at_ms - grant.at_ms - 90_000) < 1000


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
async def test_an_answer_remembers_for_the_project_where_offered(
    durable: bool, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "rules.toml"
    store = tmp_path / "log.sqlite" if durable else None
    with trio.fail_after(20):
        async with open_broker(store=store, project_rules=path) as broker:
            async with broker.open_session() as session:
                pending, outcome = await _answer_one(broker, session, "npm run b", project=True)
                assert (pending.always_rule, pending.project_rules) == ("bash: npm run", str(path))
                assert outcome is Outcome.ALLOWED_ONCE
                [grant] = broker.grants(session)
                assert grant.rule_file == str(path)
            async with broker.open_session() as later, later.turn():
                decision = await broker.request_decision(ask(later, "npm run other"))
                assert decision.source is Source.RULE
    assert [r.command for r in load_rules(path)] == [("npm", "run")]


async def test_the_terms_of_an_answer_are_checked_by_name() -> None:
    board = MemoryBoard()
    question = PendingQuestion(
        id="q1",
        session_id="s",
        agent="a",
        tool_name="bash",
        asked_at_ms=0,
        owner="o",
        offers_always=True,
        always_rule="bash: npm run",
    )
    await board.publish(question, after_seq=0)
    cases = [
        ({"always_for": 60}, "qualify an always answer"),
        ({"always": True, "always_for": 0}, "always_for must be a positive number"),
        ({"always": True, "always_for": "1h"}, "always_for must be a number of seconds"),
        ({"always": True, "always_for": 60, "project": True}, "cannot be given with project"),
        ({"always": True, "project": True}, "does not offer always-allow for the project"),
    ]
    for terms, message in cases:
        with pytest.raises(ValueError, match=message):
            await board.answer("q1", Outcome.ALLOWED_ONCE, "alice", **terms)  # type: ignore[arg-type]
    status = await board.status("q1")
    assert status is not None
    assert status.answer is None  # nothing was stored


async def test_an_older_sqlite_board_gains_the_terms_column(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_store(path):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE board_answers DROP COLUMN always_how")
    async with open_broker(store=path) as broker, broker.open_session() as session:
        with trio.fail_after(20):
            await _answer_one(broker, session, "npm run x", always_for=60)
        [grant] = broker.grants(session)
        assert grant.expires_at_ms is not None


# -- where people answer -------------------------------------------------------------------------


async def test_the_terminal_offers_the_project_with_its_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chosen: list[str] = []

    async def in_project(req: ApprovalRequest) -> object:
        await trio.lowlevel.checkpoint()
        chosen.append(req.tool_name)
        return None

    async def in_session(req: ApprovalRequest) -> object:
        raise AssertionError("the project was chosen")

    async def never() -> Outcome:
        raise AssertionError("terminal")

    async with open_broker() as broker, broker.open_session() as session:
        answerer = TerminalAnswerer(
            stdin=io.StringIO("p\n"),
            remember=in_session,
            remember_in_project=in_project,
            project_rules=".broker/rules.toml",
        )
        with trio.fail_after(5):
            assert await answerer(ask(session, "npm run build"), never) is Outcome.ALLOWED_ONCE
    assert chosen == ["bash"]
    shown = capsys.readouterr().out
    assert "[p] Always allow bash: npm run (project rules .broker/rules.toml)" in shown


def test_the_acp_option_names_the_project_file() -> None:
    from broker.acp._answerer import ALLOW_ALWAYS_PROJECT, project_option

    option = project_option("bash: npm run", ".broker/rules.toml")
    assert option.option_id == ALLOW_ALWAYS_PROJECT.option_id == "allow-always-project"
    assert option.name == "Always allow bash: npm run (project rules .broker/rules.toml)"
    assert option.kind == ALLOW_ALWAYS_PROJECT.kind


async def test_the_inbox_answers_with_a_duration_or_for_the_project(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "rules.toml"
    async with open_broker(project_rules=path) as broker, broker.open_session() as session:
        with trio.fail_after(20):
            async with open_inbox(broker, poll_interval=0.01) as inbox:
                remote = broker.remote_answerer(allow_always=True)
                async with broker.answerer(remote), session.turn():
                    for command, terms in (
                        ("npm run a", {"alwaysFor": 1800}),
                        ("make build", {"project": True}),
                    ):
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(broker.request, ask(session, command))
                            await trio.testing.wait_all_tasks_blocked()
                            [question] = await broker.pending(session.id)
                            body = {
                                "id": question.id,
                                "outcome": "allowed-once",
                                "by": "alice",
                                "always": True,
                                **terms,
                            }
                            reply = await http(
                                inbox.port,
                                "POST",
                                "/api/answer",
                                headers=answering(),
                                body=json.dumps(body).encode(),
                            )
                            assert reply.status == 200, reply.body
        first, second = broker.grants(session)
    assert first.expires_at_ms is not None
    assert first.at_ms is not None
    assert first.expires_at_ms - first.at_ms == 1_800_000
    assert (second.command, second.rule_file) == ("make build", str(path))
    assert [r.command for r in load_rules(path)] == [("make", "build")]


# -- what a person says with an answer -----------------------------------------------------------


async def test_a_message_given_with_an_answer_is_logged_and_decided_with() -> None:
    async def says(req: ApprovalRequest, next_: object) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(outcome=Outcome.REJECTED, by="alice", message="use the staging db")

    async with open_broker() as broker, broker.open_session() as session:
        async with broker.answerer(says), session.turn():
            decision = await broker.request_decision(ask(session, "psql prod"))
        decided = [e for e in log_of(broker, session) if isinstance(e, ApprovalDecided)]
    assert (decision.outcome, decision.answered_by, decision.message) == (
        Outcome.REJECTED,
        "alice",
        "use the staging db",
    )
    assert decided[0].message == "use the staging db"


@pytest.mark.parametrize("bad", ["", "   ", "x" * 2001, "a\x00b", "lone \ud800", 3])
def test_a_message_that_cannot_be_kept_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match="message must be a non-empty UTF-8 text"):
        Answer(outcome=Outcome.REJECTED, message=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
async def test_a_message_from_the_board_reaches_the_decision(
    durable: bool, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "log.sqlite" if durable else None
    with trio.fail_after(20):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            remote = broker.remote_answerer()
            async with broker.answerer(remote), session.turn(), trio.open_nursery() as nursery:
                decisions = []

                async def asking() -> None:
                    decisions.append(await broker.request_decision(ask(session, "rm -r x")))

                nursery.start_soon(asking)
                [pending] = await _published(broker)
                with pytest.raises(ValueError, match="message must be"):
                    await broker.answer(pending.id, "rejected", by="al", message="\x00")
                await broker.answer(pending.id, "rejected", by="al", message="not on Fridays")
    assert decisions[0].message == "not on Fridays"
