"""The terminal answerer of ``broker demo``: what it shows and how it reads the answer."""

from __future__ import annotations

import io

import pytest
import trio

from broker import AnswerNext, ApprovalRequest, Outcome, open_broker
from broker.cli._terminal import MAX_TRIES, TerminalAnswerer

REASON = "escalate sandbox to workspace-write: the user asked for it"
DISPLAY = "run `touch x` with workspace-write access: the user asked for it"


async def ask(answerer: TerminalAnswerer, *, display: str | None = DISPLAY) -> Outcome:
    async def unreachable() -> Outcome:
        raise AssertionError("the terminal answerer is terminal: it must not delegate")

    next_: AnswerNext = unreachable
    async with open_broker() as broker, broker.open_session() as session:
        req = ApprovalRequest(
            agent=session.agent,
            tool_name="bash",
            call_id="c1",
            reason=REASON,
            display_reason=display,
        )
        with trio.fail_after(5):
            return await answerer(req, next_)


@pytest.mark.parametrize(
    ("typed", "outcome"),
    [
        ("a\n", Outcome.ALLOWED_ONCE),
        ("allow\n", Outcome.ALLOWED_ONCE),
        ("y\n", Outcome.ALLOWED_ONCE),
        ("YES\n", Outcome.ALLOWED_ONCE),
        (" r \n", Outcome.REJECTED),
        ("reject\n", Outcome.REJECTED),
        ("n\n", Outcome.REJECTED),
        ("no\n", Outcome.REJECTED),
    ],
)
async def test_recognised_answers(typed: str, outcome: Outcome) -> None:
    assert await ask(TerminalAnswerer(stdin=io.StringIO(typed))) is outcome


async def test_a_typo_asks_again(capsys: pytest.CaptureFixture[str]) -> None:
    assert await ask(TerminalAnswerer(stdin=io.StringIO("alow\nyes\n"))) is Outcome.ALLOWED_ONCE
    out = capsys.readouterr().out
    assert "'alow' is not an answer: type a (or y) to allow once, r (or n) to reject" in out
    assert out.count("answer [a/r]: ") == 2


async def test_an_empty_line_takes_the_default_shown(capsys: pytest.CaptureFixture[str]) -> None:
    assert await ask(TerminalAnswerer(stdin=io.StringIO("\n"))) is Outcome.REJECTED
    out = capsys.readouterr().out
    assert "(default: r)" in out
    assert "(no answer: rejecting, the default)" in out


async def test_end_of_input_and_endless_garbage_fail_closed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await ask(TerminalAnswerer(stdin=io.StringIO(""))) is Outcome.REJECTED
    assert "(end of input: rejecting, fail closed)" in capsys.readouterr().out
    garbage = io.StringIO("maybe\n" * (MAX_TRIES + 1) + "a\n")
    assert await ask(TerminalAnswerer(stdin=garbage)) is Outcome.REJECTED
    out = capsys.readouterr().out
    assert out.count("is not an answer") == MAX_TRIES
    assert f"(no recognised answer after {MAX_TRIES} tries: rejecting, fail closed)" in out


async def test_the_justification_is_shown_once(capsys: pytest.CaptureFixture[str]) -> None:
    await ask(TerminalAnswerer(fixed=Outcome.REJECTED))
    out = capsys.readouterr().out
    assert out.count("the user asked for it") == 1
    assert f"│ asks:    {DISPLAY}" in out
    await ask(TerminalAnswerer(fixed=Outcome.REJECTED), display=None)
    assert f"│ reason:  {REASON}" in capsys.readouterr().out


async def test_always_is_offered_with_its_rule_and_remembers_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    remembered: list[str | None] = []
    async with open_broker() as broker, broker.open_session() as session:

        async def remember(req: ApprovalRequest) -> object:
            await trio.lowlevel.checkpoint()
            command = req.arguments["command"] if req.arguments else None
            remembered.append(command)
            return None

        answerer = TerminalAnswerer(stdin=io.StringIO("s\n"), remember=remember)
        req = ApprovalRequest(
            agent=session.agent, tool_name="bash", arguments={"command": "npm run build"}
        )
        with trio.fail_after(5):
            assert await answerer(req, _never) is Outcome.ALLOWED_ONCE
        # Nothing safe to remember: no [s] choice, and "s" is not an answer.
        risky = ApprovalRequest(
            agent=session.agent, tool_name="bash", arguments={"command": "curl x | sh"}
        )
        answerer = TerminalAnswerer(stdin=io.StringIO("s\nr\n"), remember=remember)
        with trio.fail_after(5):
            assert await answerer(risky, _never) is Outcome.REJECTED
    assert remembered == ["npm run build"]
    shown = capsys.readouterr().out
    assert "[s] Always allow bash: npm run (this session)" in shown
    assert shown.count("[s] Always allow") == 1


async def _never() -> Outcome:
    raise AssertionError("the terminal answerer is terminal: it must not delegate")
