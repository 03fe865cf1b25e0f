"""Shielded waits for durability, bounded by one timer (broker._bounded_waits)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from broker._bounded_waits import BoundedWaits
from broker.store._requests import Ticket


async def _quiet() -> None:
    with trio.fail_after(5):
        await trio.testing.wait_all_tasks_blocked()


@pytest.mark.parametrize("kind", ["store ticket", "foreign durability"])
async def test_a_wait_returns_true_once_the_ticket_resolves(kind: str) -> None:
    """A store's own Ticket is its own entry in the waits; any other Durability (a third-party
    store's) gets one of its own, woken through its done-callback."""
    waits = BoundedWaits(grace=5.0)
    ticket = Ticket()
    durability: Ticket | _Foreign = ticket if kind == "store ticket" else _Foreign(ticket)
    verdicts: list[bool] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(waits.run_timer)

        async def wait() -> None:
            verdicts.append(await waits.wait(durability))

        nursery.start_soon(wait)
        await _quiet()
        assert waits.outstanding == 1
        assert verdicts == []
        ticket.succeed()
        await _quiet()
        assert verdicts == [True]
        assert waits.outstanding == 0
        nursery.cancel_scope.cancel()


async def test_a_failed_ticket_also_ends_the_wait_and_its_error_is_the_callers() -> None:
    waits = BoundedWaits(grace=5.0)
    ticket = Ticket()
    async with trio.open_nursery() as nursery:
        await nursery.start(waits.run_timer)
        nursery.start_soon(_fail_soon, ticket)
        assert await waits.wait(ticket) is True
        assert isinstance(ticket.error, OSError)
        nursery.cancel_scope.cancel()


async def _fail_soon(ticket: Ticket) -> None:
    await trio.sleep(0.1)
    ticket.fail(OSError("disk full"))


async def test_cancellation_cannot_interrupt_a_wait_and_arrives_at_the_next_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits = BoundedWaits(grace=5.0)
    ticket = Ticket()
    seen: list[object] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(waits.run_timer)
        caller = trio.CancelScope()

        async def wait() -> None:
            with caller:
                seen.append(await waits.wait(ticket))
                seen.append("returned")
                await trio.lowlevel.checkpoint()
                seen.append("not reached")
            seen.append(caller.cancelled_caught)

        nursery.start_soon(wait)
        await _quiet()
        caller.cancel()
        await trio.sleep(1)  # less than the grace: the wait goes on
        assert seen == []
        ticket.succeed()
        await _quiet()
        assert seen == [True, "returned", True]
        nursery.cancel_scope.cancel()


async def test_a_ticket_that_never_resolves_is_overdue_after_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits = BoundedWaits(grace=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(waits.run_timer)
        start = trio.current_time()
        assert await waits.wait(Ticket()) is False
        assert trio.current_time() - start == 5.0
        assert waits.outstanding == 0
        nursery.cancel_scope.cancel()


async def test_each_wait_has_its_own_deadline(autojump_clock: trio.testing.MockClock) -> None:
    waits = BoundedWaits(grace=5.0)
    ended: list[tuple[str, float]] = []
    late = Ticket()
    async with trio.open_nursery() as outer:
        await outer.start(waits.run_timer)
        start = trio.current_time()

        async def wait(name: str, ticket: Ticket) -> None:
            verdict = await waits.wait(ticket)
            ended.append((f"{name} {verdict}", trio.current_time() - start))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "first", Ticket())
            await trio.sleep(2)
            nursery.start_soon(wait, "second", Ticket())
            nursery.start_soon(wait, "third", late)
            await trio.sleep(4)
            late.succeed()
        outer.cancel_scope.cancel()
    assert ended == [("first False", 5.0), ("third True", 6.0), ("second False", 7.0)]


async def test_without_the_timer_a_wait_is_bounded_by_a_scope_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits = BoundedWaits(grace=3.0)  # its timer never started
    start = trio.current_time()
    assert await waits.wait(Ticket()) is False
    assert trio.current_time() - start == 3.0
    resolved = Ticket()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_succeed_soon, resolved)
        assert await waits.wait(resolved) is True
    assert waits.outstanding == 0


async def _succeed_soon(ticket: Ticket) -> None:
    await trio.sleep(1)
    ticket.succeed()


async def test_waits_parked_when_the_timer_stops_keep_their_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits = BoundedWaits(grace=5.0)
    ended: list[tuple[bool, float]] = []
    async with trio.open_nursery() as outer:
        timer = trio.CancelScope()

        async def run_timer() -> None:
            with timer:
                await waits.run_timer()

        outer.start_soon(run_timer)
        await _quiet()
        start = trio.current_time()

        async def wait() -> None:
            ended.append((await waits.wait(Ticket()), trio.current_time() - start))

        outer.start_soon(wait)
        await trio.sleep(2)
        assert waits.outstanding == 1
        timer.cancel()  # e.g. a scope around the broker was cancelled
        await _quiet()
        assert waits.outstanding == 0
    assert ended == [(False, 5.0)]


async def test_an_already_resolved_ticket_is_a_schedule_point_only() -> None:
    waits = BoundedWaits(grace=5.0)
    ticket = Ticket()
    ticket.succeed()
    with trio.CancelScope() as scope:
        scope.cancel()
        assert await waits.wait(ticket) is True  # not interrupted, even cancelled
        assert waits.outstanding == 0


async def test_ticket_callbacks_run_once_in_order_and_at_once_when_resolved() -> None:
    ticket = Ticket()
    calls: list[str] = []
    ticket.add_done_callback(lambda: calls.append("first"))
    ticket.add_done_callback(lambda: calls.append("second"))
    assert calls == []
    ticket.fail(OSError("x"))
    ticket.succeed()  # already resolved: nothing runs again
    assert calls == ["first", "second"]
    ticket.add_done_callback(lambda: calls.append("late"))
    assert calls == ["first", "second", "late"]
    await trio.lowlevel.checkpoint()


class _Foreign:
    """A Durability that is not the stores' Ticket (a third-party store's): waited through its
    done-callback, with an entry of its own in the waits map."""

    def __init__(self, inner: Ticket | None = None) -> None:
        self.inner = Ticket() if inner is None else inner

    @property
    def done(self) -> bool:
        return self.inner.done

    @property
    def error(self) -> BaseException | None:
        return self.inner.error

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self.inner.add_done_callback(fn)

    async def wait(self) -> None:
        await self.inner.wait()


async def test_a_ticket_of_another_kind_is_overdue_after_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits = BoundedWaits(grace=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(waits.run_timer)
        start = trio.current_time()
        foreign, ticket = _Foreign(), Ticket()
        verdicts: list[tuple[str, bool, float]] = []

        async def wait(name: str, durability: Ticket | _Foreign) -> None:
            verdicts.append((name, await waits.wait(durability), trio.current_time() - start))

        nursery.start_soon(wait, "foreign", foreign)
        await trio.sleep(1)
        nursery.start_soon(wait, "ticket", ticket)
        await trio.sleep(10)
        assert verdicts == [("foreign", False, 5.0), ("ticket", False, 6.0)]
        assert waits.outstanding == 0
        nursery.cancel_scope.cancel()
