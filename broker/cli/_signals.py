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
from typing import TypeVarTuple, Unpack

import trio

from .._collapse import collapse_single

__all__ = ["run_until_signalled"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Ts = TypeVarTuple("Ts")


async def run_until_signalled(
    command: str, fn: Callable[[Unpack[Ts]], Awaitable[int]], *args: *Ts
) -> int:
    """Run ``fn(*args)`` and return its status, or 128 + N when signal N arrived first.

    Cancellation: the caller's cancellation propagates after *fn*'s own teardown.
    """
    caught: list[int] = []
    status = 0
    with trio.open_signal_receiver(*_SIGNALS) as signals, collapse_single():
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    caught.append(signum)
                    nursery.cancel_scope.cancel(reason=f"{signal.Signals(signum).name} received")
                    return

            nursery.start_soon(watch)
            status = await fn(*args)
            nursery.cancel_scope.cancel(reason=f"{command} finished")
    if caught:
        name = signal.Signals(caught[0]).name
        print(
            f"broker {command}: {name} received: pending questions settled as cancelled, "
            "the session log was closed",
            file=sys.stderr,
        )
        return 128 + caught[0]
    return status
