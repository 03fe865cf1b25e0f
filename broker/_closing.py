"""How a closer tells a session that is slow to end from one that is stuck.

A session's actor ends once its nursery is cancelled (teardown step 4); one that does not end
holds a task that ignores cancellation, and its closer names it in the log. The bound is the
broker's ``settle_grace``, but the grace must measure a real wait, not the scheduler's queue:
when a hundred thousand sessions close at once, the first scheduler rounds run every closer
and every actor, and may by themselves outlast the grace. So a closer gives up only once no
session of its host has ended (:attr:`SessionHost.sessions_ended`) for a whole grace AND for
:data:`QUIET_ROUNDS` waits in a row, each of which spans at least one scheduler round.

One rule, two waiters: a session's own :meth:`Session.aclose` (a session with questions in
flight or a turn open) and the broker's single waiter for every quiet session it closes at
once (:meth:`Broker.aclose`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ._host import SessionHost

__all__ = ["QUIET_ROUNDS", "wait_ended_or_stuck"]

#: How many waits in a row (each at least one scheduler round) with no session ending, beside
#: a whole settle_grace, before a closer calls what it waits for stuck.
QUIET_ROUNDS = 8


async def wait_ended_or_stuck(
    host: SessionHost, ended: Callable[[], bool], wait: Callable[[], Awaitable[None]]
) -> bool:
    """Wait (with *wait*, which returns once *ended* may have become true) until *ended*;
    give up by the rule of the module docstring. Returns whether it ended.

    A whole grace is waited first, and again after each sign of progress: one timer for a
    closer while sessions are ending. Cancellation: run shielded (teardown); a cancellation
    just ends the wait, and the result says whether it ended.
    """
    grace = host.settle_grace
    seen, quiet_since, quiet_rounds = host.sessions_ended, trio.current_time(), 0
    bound = grace
    while not ended():
        with trio.move_on_after(bound):
            await wait()
        if ended():
            break
        if host.sessions_ended != seen:  # others are ending: the scheduler is at work
            seen, quiet_since, quiet_rounds = host.sessions_ended, trio.current_time(), 0
            bound = grace
            continue
        quiet_rounds += 1
        if quiet_rounds >= QUIET_ROUNDS and trio.current_time() - quiet_since >= grace:
            return False
        bound = grace / QUIET_ROUNDS  # quiet: count the rounds, each wait at least one
    await trio.lowlevel.checkpoint()
    return True
