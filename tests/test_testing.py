"""broker.testing: the scripted answerer and the fixtures downstream harnesses use."""

from __future__ import annotations

import pytest
import trio

from broker import AnswerNext, ApprovalRequest, Broker, Outcome, Session
from broker.testing import DELEGATE, ScriptedAnswerer

from .conftest import types_of


async def test_fixtures_give_a_live_broker_and_session(
    approval_broker: Broker, approval_session: Session, scripted_answerer: ScriptedAnswerer
) -> None:
    scripted_answerer.push(Outcome.ALLOWED_ONCE, Outcome.REJECTED)
    async with approval_session.turn():
        first = ApprovalRequest(agent=approval_session.agent, tool_name="bash")
        assert await approval_broker.request(first) is Outcome.ALLOWED_ONCE
        second = ApprovalRequest(agent=approval_session.agent, tool_name="edit")
        assert await approval_broker.request(second) is Outcome.REJECTED
    assert scripted_answerer.asked == [first, second]
    assert scripted_answerer.asked[0] is first
    scripted_answerer.assert_exhausted()
    assert types_of(approval_broker, approval_session).count("approval/decided") == 2


async def test_unexpected_question_fails_closed_and_is_reported(
    approval_broker: Broker, approval_session: Session
) -> None:
    answerer = ScriptedAnswerer()
    async with approval_broker.answerer(answerer), approval_session.turn():
        question = ApprovalRequest(agent=approval_session.agent, tool_name="bash")
        assert await approval_broker.request(question) is Outcome.CANCELLED
    assert answerer.unexpected == [question]
    with pytest.raises(
        AssertionError,
        match=r"^scripted answerer was asked 1 unexpected question\(s\) \(tools 'bash'\): "
        r"push\(\) an outcome for each question the test expects$",
    ):
        answerer.check()


async def test_steps_can_delegate_or_be_functions(
    approval_broker: Broker, approval_session: Session
) -> None:
    async def hold(req: ApprovalRequest) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.REJECTED if req.tool_name == "rm" else Outcome.ALLOWED_ONCE

    async def terminal(_r: ApprovalRequest, _n: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    answerer = ScriptedAnswerer([DELEGATE, hold])
    async with approval_broker.answerer(answerer), approval_broker.answerer(terminal):
        async with approval_session.turn():
            outcomes = [
                await approval_broker.request(
                    ApprovalRequest(agent=approval_session.agent, tool_name=tool)
                )
                for tool in ("bash", "rm")
            ]
    assert outcomes == [Outcome.ALLOWED_ONCE, Outcome.REJECTED]
    with pytest.raises(AssertionError, match=r"^scripted answerer has 1 unused step\(s\)"):
        ScriptedAnswerer([Outcome.REJECTED]).assert_exhausted()


DOWNSTREAM_TEST = """
from broker import ApprovalRequest, Outcome


async def test_leaves_a_step(approval_broker, approval_session, scripted_answerer):
    scripted_answerer.push(Outcome.ALLOWED_ONCE, Outcome.REJECTED)
    async with approval_session.turn():
        req = ApprovalRequest(agent=approval_session.agent, tool_name="bash")
        assert await approval_broker.request(req) is Outcome.ALLOWED_ONCE
"""


@pytest.mark.parametrize("strict", [True, False])
def test_the_ini_option_fails_a_test_that_leaves_steps_unused(
    pytester: pytest.Pytester, strict: bool
) -> None:
    pytester.makeconftest('pytest_plugins = ["broker.testing"]\n')
    pytester.makeini(
        "[pytest]\ntrio_mode = true\n"
        + ("approval_fail_on_unused_steps = true\n" if strict else "")
    )
    pytester.makepyfile(test_downstream=DOWNSTREAM_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    if strict:
        # pytest-trio runs async fixtures inside the test: a teardown failure fails the test.
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            ["*scripted answerer has 1 unused step(s): [<Outcome.REJECTED*"]
        )
    else:
        result.assert_outcomes(passed=1)
