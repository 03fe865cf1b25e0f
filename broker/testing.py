"""Test helpers for code that asks the broker: a scripted answerer and pytest fixtures.

Enable the fixtures in a ``conftest.py``::

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
asked a question it had no scripted answer for. This module imports pytest; the rest of the
package does not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

import attrs
import pytest
import trio

from ._broker import Broker, open_broker
from ._vocabulary import Outcome
from .store._memory import MemoryStore

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
    spec section 9; :meth:`check` (called by the fixture at teardown) then fails the test.
    """

    script: deque[Step] = attrs.field(factory=deque, converter=_steps)
    asked: list[ApprovalRequest] = attrs.field(factory=list, init=False)
    unexpected: list[ApprovalRequest] = attrs.field(factory=list, init=False)

    def push(self, *steps: Step) -> None:
        """Append *steps* to the script."""
        self.script.extend(steps)

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
        """Raise :class:`AssertionError` if any question arrived without a scripted step."""
        if self.unexpected:
            tools = ", ".join(repr(r.tool_name) for r in self.unexpected)
            raise AssertionError(
                f"scripted answerer was asked {len(self.unexpected)} unexpected question(s) "
                f"(tools {tools}): push() an outcome for each question the test expects"
            )

    def assert_exhausted(self) -> None:
        """Raise :class:`AssertionError` if scripted steps were left unused."""
        if self.script:
            raise AssertionError(
                f"scripted answerer has {len(self.script)} unused step(s): {list(self.script)!r}"
            )


async def _checkpointed(outcome: Outcome) -> Outcome:
    await trio.lowlevel.checkpoint()
    return outcome


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
async def scripted_answerer(approval_broker: Broker) -> AsyncIterator[ScriptedAnswerer]:
    """A :class:`ScriptedAnswerer` registered (unscoped) for the test; checked at teardown."""
    answerer = ScriptedAnswerer()
    async with approval_broker.answerer(answerer):
        yield answerer
    answerer.check()
