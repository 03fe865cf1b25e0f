"""The decide-or-delegate waterfall, shared by answerers (contract §4) and pre-execute gates (8.1).

Each step of a chain is asked in order with a ``next`` it may await to delegate to the rest of
the chain; the first value returned without delegating wins, and the end of the chain gives the
chain's own default (``unavailable`` for answerers, allow for gates). ``next()`` may be awaited
more than once: the rest of the chain is consulted only the first time, and the same value is
returned again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import trio

__all__ = ["run_chain"]

S = TypeVar("S")
T = TypeVar("T")


def run_chain(
    steps: Sequence[S],
    ask: Callable[[S, Callable[[], Awaitable[T]]], Awaitable[T]],
    end: Callable[[], T],
) -> Awaitable[T]:
    """Ask ``steps[0]`` with a ``next`` that runs the rest; past the last step, ``end()``.

    *ask* is how one step is consulted (it contains that step's failures). Returns the
    awaitable of the whole chain (no coroutine of its own: this is the hot path of every
    question). Cancellation: propagates. Checkpoints at the end of the chain; a step that never
    yields is not forced to.
    """
    return _consult(steps, ask, end, 0)


async def _consult(
    steps: Sequence[S],
    ask: Callable[[S, Callable[[], Awaitable[T]]], Awaitable[T]],
    end: Callable[[], T],
    index: int,
) -> T:
    if index == len(steps):
        await trio.lowlevel.checkpoint()
        return end()
    return await ask(steps[index], _Next(steps, ask, end, index + 1))  # noqa: ASYNC910


class _Next(Generic[S, T]):
    """The ``next`` handed to step ``index - 1``: consults the rest of the chain once and
    returns the same value every later time it is awaited."""

    __slots__ = ("_ask", "_done", "_end", "_index", "_steps", "_value")

    def __init__(
        self,
        steps: Sequence[S],
        ask: Callable[[S, Callable[[], Awaitable[T]]], Awaitable[T]],
        end: Callable[[], T],
        index: int,
    ) -> None:
        self._steps, self._ask, self._end, self._index = steps, ask, end, index
        self._done = False

    async def __call__(self) -> T:
        if not self._done:
            self._value = await _consult(self._steps, self._ask, self._end, self._index)
            self._done = True
            return self._value
        await trio.lowlevel.checkpoint()
        return self._value
