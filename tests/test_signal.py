"""AbortSignal: fires once, wakes waiters, calls listeners synchronously, unsubscribes."""

from __future__ import annotations

import trio
import trio.testing

from broker import AbortSignal
from broker._signal import is_aborted


async def test_abort_is_idempotent_and_keeps_the_first_reason() -> None:
    signal = AbortSignal()
    assert not signal.aborted
    signal.abort("first")
    signal.abort("second")
    assert signal.aborted
    assert signal.reason == "first"


async def test_waiters_wake_and_listeners_run_once() -> None:
    signal = AbortSignal()
    calls: list[str] = []
    signal.subscribe(lambda: calls.append("a"))
    unsubscribe = signal.subscribe(lambda: calls.append("b"))
    unsubscribe()
    woke: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def waiter() -> None:
            await signal.wait()
            woke.append(True)

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        signal.abort()
        signal.abort()
    assert calls == ["a"]
    assert woke == [True]


async def test_is_aborted_accepts_every_signal_kind() -> None:
    event = trio.Event()
    assert not is_aborted(None)
    assert not is_aborted(event)
    event.set()
    assert is_aborted(event)
    signal = AbortSignal()
    signal.abort()
    assert is_aborted(signal)


async def test_a_listener_subscribed_after_the_abort_runs_at_once() -> None:
    """A question subscribes only once its asked is durable; an abort during that commit must
    not be missed (found by ``broker chaos --store``)."""
    signal = AbortSignal()
    signal.abort("gone")
    calls: list[str] = []
    unsubscribe = signal.subscribe(lambda: calls.append("late"))
    assert calls == ["late"]
    unsubscribe()  # harmless
    signal.abort("again")
    assert calls == ["late"]
    await trio.lowlevel.checkpoint()
