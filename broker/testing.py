"""Test helpers for code that asks the broker: a scripted answerer and pytest fixtures.

Install with the ``testing`` extra (``pip install 'trio-approval-broker[testing]'``: pytest and
pytest-trio), run async tests under trio, and enable the fixtures, e.g. in ``pyproject.toml``::

    [tool.pytest.ini_options]
    trio_mode = true                        # async tests and fixtures run under trio
    approval_fail_on_unused_steps = true    # optional: unused scripted steps fail the test

and in a ``conftest.py``::

    pytest_plugins = ["broker.testing"]

then::

    async def test_my_tool_asks(approval_broker, approval_session, scripted_answerer):
        scripted_answerer.push(Outcome.ALLOWED_ONCE)
        async with approval_session.turn():
            ...  # code under test asks through approval_broker
        assert [r.tool_name for r in scripted_answerer.asked] == ["bash"]

``approval_broker`` is a nursery-scoped broker on a fresh :class:`MemoryStore` (policy ``ask``),
``approval_session`` an open session of it, and ``scripted_answerer`` a
:class:`ScriptedAnswerer` registered unscoped for the test; the test fails at teardown if it was
asked a question it had no scripted answer for — and, with ``approval_fail_on_unused_steps``
(or ``scripted_answerer.fail_on_unused = True``), if scripted steps were left unused. This
module imports pytest; the rest of the package does not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, ClassVar, TypeAlias

import attrs
import pytest
import trio

from ._broker import Broker, open_broker
from ._vocabulary import Outcome
from .store import MemoryStore

if TYPE_CHECKING:
    from ._answerers import AnswerNext
    from ._request import ApprovalRequest
    from ._session import Session

__all__ = [
    "DELEGATE",
    "ScriptedAnswerer",
    "approval_broker",
    "approval_session",
    "scripted_answerer",
]


@attrs.frozen
class _Delegate:
    def __repr__(self) -> str:
        return "DELEGATE"


#: A script entry that answers by delegating: ``return await next()``.
DELEGATE = _Delegate()

Step: TypeAlias = Outcome | _Delegate | Callable[["ApprovalRequest"], Awaitable[Outcome]]


def _steps(steps: Iterable[Step]) -> deque[Step]:
    return deque(steps)


@attrs.define(eq=False)
class ScriptedAnswerer:
    """An answerer that replays a script: one step per question, in order.

    A step is an :class:`Outcome`, :data:`DELEGATE`, or an ``async def step(req) -> Outcome``
    (to hold a question open, inspect it, or fail). Every question is recorded in
    :attr:`asked` (the request objects themselves). A question with no step left is recorded in
    :attr:`unexpected` and answered ``cancelled`` — fail closed, like the snapshot harness of
    contract §9; :meth:`check` (called by the fixture at teardown) then fails the test, as
    it does for unused steps when *fail_on_unused* is set.
    """

    script: deque[Step] = attrs.field(factory=deque, converter=_steps)
    #: Make :meth:`check` fail on steps left unused too (a question the test expected that
    #: never came).
    fail_on_unused: bool = False
    asked: list[ApprovalRequest] = attrs.field(factory=list, init=False)
    unexpected: list[ApprovalRequest] = attrs.field(factory=list, init=False)

    def push(self, *steps: Step) -> None:
        """Append *steps* to the script."""
        self.script.extend(steps)

    #: What the log calls it (``answerer`` of ``approval/decided``).
    answerer_name: ClassVar[str] = "scripted"

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        """Answer *req* with the next step. Cancellation: propagates (the question withdrew)."""
        self.asked.append(req)
        if not self.script:
            self.unexpected.append(req)
            return await _checkpointed(Outcome.CANCELLED)
        step = self.script.popleft()
        if isinstance(step, _Delegate):
            return await next_()
        if isinstance(step, Outcome):
            return await _checkpointed(step)
        return await step(req)

    def check(self) -> None:
        """Raise :class:`AssertionError` if any question arrived without a scripted step, or
        (with *fail_on_unused*) if steps were left unused."""
        if self.unexpected:
            tools = ", ".join(repr(r.tool_name) for r in self.unexpected)
            raise AssertionError(
                f"scripted answerer was asked {len(self.unexpected)} unexpected question(s) "
                f"(tools {tools}): push() an outcome for each question the test expects"
            )
        if self.fail_on_unused:
            self.assert_exhausted()

    def assert_exhausted(self) -> None:
        """Raise :class:`AssertionError` if scripted steps were left unused."""
        if self.script:
            raise AssertionError(
                f"scripted answerer has {len(self.script)} unused step(s): {list(self.script)!r}: "
                "the code under test asked fewer questions than scripted; drop the extra steps"
            )


async def _checkpointed(outcome: Outcome) -> Outcome:
    await trio.lowlevel.checkpoint()
    return outcome


_UNUSED_INI = "approval_fail_on_unused_steps"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ini option :data:`_UNUSED_INI` (default off)."""
    parser.addini(
        _UNUSED_INI,
        type="bool",
        default=False,
        help="broker.testing: fail a test whose scripted_answerer has unused steps at teardown",
    )


@pytest.fixture
async def approval_broker() -> AsyncIterator[Broker]:
    """A broker (policy ``ask``, in-memory store) living for the test, closed at teardown."""
    async with open_broker(store=MemoryStore()) as broker:
        yield broker


@pytest.fixture
async def approval_session(approval_broker: Broker) -> AsyncIterator[Session]:
    """An open session of :func:`approval_broker`, closed at teardown."""
    async with approval_broker.open_session() as session:
        yield session


@pytest.fixture
async def scripted_answerer(
    approval_broker: Broker, pytestconfig: pytest.Config
) -> AsyncIterator[ScriptedAnswerer]:
    """A :class:`ScriptedAnswerer` registered (unscoped) for the test; checked at teardown
    (unused steps too when the ini option ``approval_fail_on_unused_steps`` is true)."""
    answerer = ScriptedAnswerer(fail_on_unused=bool(pytestconfig.getini(_UNUSED_INI)))
    async with approval_broker.answerer(answerer):
        yield answerer
    answerer.check()
