"""The decide-or-delegate waterfall, shared by answerers (spec 4) and pre-execute gates (8.1).

Each step of a chain is asked in order with a ``next`` it may await to delegate to the rest of
the chain; the first value returned without delegating wins, and the end of the chain gives the
chain's own default (``unavailable`` for answerers, allow for gates). ``next()`` may be awaited
more than once: the rest of the chain is consulted only the first time, and the same value is
returned again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

__all__ = ["run_chain"]

S = TypeVar("S")
T = TypeVar("T")


async def run_chain(
    steps: Sequence[S],
    ask: Callable[[S, Callable[[], Awaitable[T]]], Awaitable[T]],
    end: Callable[[], T],
) -> T:
    """Ask ``steps[0]`` with a ``next`` that runs the rest; past the last step, ``end()``.

    *ask* is how one step is consulted (it contains that step's failures). Cancellation:
    propagates. Checkpoints at the end of the chain; a step that never yields is not forced to.
    """

    async def consult(index: int) -> T:
        if index == len(steps):
            await trio.lowlevel.checkpoint()
            return end()
        memo: list[T] = []

        async def next_() -> T:
            if not memo:
                memo.append(await consult(index + 1))
                return memo[0]
            await trio.lowlevel.checkpoint()
            return memo[0]

        return await ask(steps[index], next_)  # noqa: ASYNC910 (see the docstring)

    return await consult(0)
