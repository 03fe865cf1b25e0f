"""SIGINT and SIGTERM for the long-running commands: settle, close, exit 130 / 143.

``trio.open_signal_receiver`` turns the signal into a cancellation of the command's own work, so
the ordinary teardown runs: every pending question settles ``cancelled`` with its audit pair, an
open turn ends, the store writes its checkpoints and closes. The process then exits with the
shell's convention, 128 + the signal number, and prints one line — never a traceback.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVarTuple

import trio

from .._collapse import collapse_single

__all__ = ["run_until_signalled"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Ts = TypeVarTuple("Ts")


async def run_until_signalled(command: str, fn: Callable[[*Ts], Awaitable[int]], *args: *Ts) -> int:
    """Run ``fn(*args)`` and return its status, or 128 + N when signal N arrived first.

    A second signal while the teardown runs is acknowledged once and otherwise ignored: the
    teardown is bounded, and cutting it short would leave unpaired questions. Signals that
    arrive after the receiver closed are recorded by a plain handler (no traceback, no second
    death); once a signal stopped the command, later ones are ignored until the process exits.
    Cancellation: the caller's cancellation propagates after *fn*'s own teardown.
    """
    caught: list[int] = []

    def remember(signum: int, _frame: object) -> None:
        caught.append(signum)

    # Python-level handlers the receiver restores on exit: trio re-delivers what the receiver
    # did not consume, and these record it instead of raising KeyboardInterrupt or dying.
    previous = {signum: signal.signal(signum, remember) for signum in _SIGNALS}
    try:
        status = await _run(command, caught, fn, *args)
    finally:
        for signum, handler in previous.items():
            # Once a signal stopped the command, the process is on its way out: later ones are
            # ignored (SIG_IGN, which also survives interpreter finalisation, where Python puts
            # its own handlers back to the default), so a second press during the command's
            # cleanup — a temporary workspace being removed, say — neither prints a
            # KeyboardInterrupt traceback nor kills the process before its exit status is set.
            signal.signal(signum, signal.SIG_IGN if caught else handler)
    if caught:
        name = signal.Signals(caught[0]).name
        print(
            f"broker {command}: {name} received: pending questions settled as cancelled, "
            "the session log was closed",
            file=sys.stderr,
        )
        return 128 + caught[0]
    return status


async def _run(
    command: str, caught: list[int], fn: Callable[[*Ts], Awaitable[int]], *args: *Ts
) -> int:
    status = 0
    with trio.open_signal_receiver(*_SIGNALS) as signals, collapse_single():
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    if not caught:
                        work.cancel(reason=f"{signal.Signals(signum).name} received")
                    elif len(caught) == 1:
                        print(
                            f"broker {command}: {signal.Signals(signum).name} again: already "
                            "stopping (settling pending questions, closing the log)",
                            file=sys.stderr,
                        )
                    caught.append(signum)

            work = trio.CancelScope()
            nursery.start_soon(watch)
            with work:
                status = await fn(*args)
            # The watcher keeps consuming signals until the work, teardown included, is over.
            nursery.cancel_scope.cancel(reason=f"{command} finished")
    return status
