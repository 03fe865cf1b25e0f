"""Shielded waits for durability, bounded by one timer task for the whole host.

Synopsis (what the broker does)::

    waits = BoundedWaits(grace=5.0)
    await root_nursery.start(waits.run_timer)          # the timer: one task for every session
    ...
    if not await waits.wait(ticket):             # in any task: cancellation cannot stop it
        raise AuditAppendError("... not durable within settle_grace ...")

Once a question is decided, the task waiting for its ``approval/decided`` to become durable must
not be stopped by its caller's cancellation (a decision made is a decision recorded), and must
not wait forever on a store that never answers. A ``trio.CancelScope(shield=True,
deadline=...)`` per wait does both, but entering one costs more than the rest of an in-memory
question, and each deadline lands in trio's deadline heap. Here a waiting task parks with an
abort function that refuses cancellation (so a cancellation is delivered at its next
checkpoint, after the wait), is woken by the ticket's done-callback, and is bounded by the
timer task, which sleeps until the oldest wait's deadline and wakes whoever is still waiting
then. Every wait has the same bound, so deadlines arrive in order: an insertion-ordered map
holds exactly the waits outstanding, oldest first, each added and removed in O(1).

When the timer is not running (not started yet, or its nursery was cancelled), a wait falls back
to one shielded cancel scope with the same deadline; waits parked when the timer stops move to
that fallback, keeping their deadline.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import outcome
import trio

from .store import Ticket

if TYPE_CHECKING:
    from .store import Durability

__all__ = ["BoundedWaits"]


class _Parked(Protocol):
    """One parked task, in its host's map of outstanding waits until woken — once, with True
    (resolved), False (overdue) or None (the timer stopped: wait on without it). A store's own
    :class:`~broker.store._requests.Ticket` is its own entry; any other ticket gets a
    :class:`_Wait`."""

    @property
    def deadline(self) -> float: ...
    def wake(self, verdict: bool | None) -> None: ...


class _Wait:
    """The entry of a wait on a ticket that is not a :class:`Ticket` (see :class:`_Parked`)."""

    __slots__ = ("deadline", "task", "waits")

    def __init__(
        self,
        task: trio.lowlevel.Task,
        deadline: float,
        waits: collections.OrderedDict[_Parked, None],
    ) -> None:
        self.task = task
        self.deadline = deadline
        self.waits: collections.OrderedDict[_Parked, None] | None = waits
        waits[self] = None

    def wake(self, verdict: bool | None) -> None:
        waits = self.waits
        if waits is not None:
            self.waits = None
            del waits[self]
            trio.lowlevel.reschedule(self.task, outcome.Value(verdict))

    def resolved(self) -> None:
        """The ticket's done-callback."""
        self.wake(True)


def _refuse_cancellation(_raise_cancel: object) -> trio.lowlevel.Abort:
    # The wait is shielded: a cancellation (or KeyboardInterrupt) stays pending and is
    # delivered at the task's next checkpoint, once the wait is over.
    return trio.lowlevel.Abort.FAILED


@attrs.define(eq=False)
class BoundedWaits:
    """Waits that cancellation cannot interrupt, each bounded by *grace* seconds.

    Owns the timer task (:meth:`run_timer`, started by its host in the host's nursery) and the
    map of outstanding waits. Teardown: when the timer's task ends, every parked wait is woken
    to wait on in a shielded cancel scope of its own, until its own deadline.
    """

    grace: float
    # Outstanding waits, oldest (earliest deadline) first; a wait leaves it when woken.
    _waits: collections.OrderedDict[_Parked, None] = attrs.field(
        factory=collections.OrderedDict, init=False
    )
    _idle: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot, init=False)
    _running: bool = attrs.field(default=False, init=False)
    # The run's clock (its current_time), taken by the timer when it starts: every wait reads
    # it, and trio.current_time() reaches it through three more calls.
    _clock: Callable[[], float] = attrs.field(default=trio.current_time, init=False)

    @property
    def outstanding(self) -> int:
        """How many waits are parked with the timer."""
        return len(self._waits)

    async def wait(self, ticket: Durability) -> bool:
        """Wait until *ticket* is resolved (durable or failed): True; or, *grace* seconds on
        while it is not, False. The caller reads ``ticket.error``.

        Cancellation: cannot interrupt it — a cancellation arriving meanwhile is delivered at
        the caller's next checkpoint. Always a schedule point.
        """
        if ticket.done:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return True
        deadline = self._clock() + self.grace
        if self._running:
            waits = self._waits
            task = trio.lowlevel.current_task()
            if isinstance(ticket, Ticket):
                # The map holds entries of both kinds; a Ticket only adds and removes itself.
                ticket.park_bounded(task, deadline, waits)  # type: ignore[arg-type]
            else:
                entry = _Wait(task, deadline, waits)
                ticket.add_done_callback(entry.resolved)
            if len(waits) == 1:
                self._idle.unpark()
            verdict: bool | None = await trio.lowlevel.wait_task_rescheduled(_refuse_cancellation)
            if verdict is not None:
                return verdict
        # No timer: one shielded scope with the same deadline.
        with trio.CancelScope(shield=True, deadline=deadline):
            await _until_resolved(ticket)
        return ticket.done

    async def run_timer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The timer: ``await nursery.start(waits.run_timer)``. Sleeps until the oldest wait's
        deadline and wakes it as overdue if it is still parked.

        Cancellation: ends the timer; the waits parked then go on without it (each in a
        shielded scope with its own deadline), and later waits start that way.
        """
        waits = self._waits
        self._running = True
        self._clock = trio.lowlevel.current_clock().current_time
        try:
            task_status.started()
            while True:
                if not waits:
                    await self._idle.park()
                    continue
                oldest = next(iter(waits))
                if trio.current_time() < oldest.deadline:
                    # Waits added meanwhile are due later; one resolved meanwhile is found gone.
                    await trio.sleep_until(oldest.deadline)
                    continue
                oldest.wake(False)
                await trio.lowlevel.checkpoint()
        finally:
            self._running = False
            self._clock = trio.current_time
            while waits:
                next(iter(waits)).wake(None)


async def _until_resolved(ticket: Durability) -> None:
    """Wait for *ticket* through a done-callback (its error is the caller's to read)."""
    if ticket.done:
        await trio.lowlevel.checkpoint()
        return
    event = trio.Event()
    ticket.add_done_callback(event.set)
    await event.wait()
