"""The :class:`~broker.store._protocol.Durability` tickets the stores hand out.

A ticket is resolved once and wakes its one waiter; the writer's queued requests
(:mod:`broker.store._requests`) are tickets too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, MutableMapping

import attrs
import outcome
import trio

__all__ = ["DURABLE", "Ticket"]


@attrs.define(eq=False, slots=True)
class Ticket:
    """Resolved exactly once (:meth:`succeed` or :meth:`fail`); then its one waiter is
    rescheduled directly (no :class:`trio.Event`, whose set of waiters one caller does not
    need) and its done-callbacks run."""

    # Plain attributes, not properties: every question reads both on its append path, and
    # a property is a Python call each time. Written only by succeed/fail.
    #: Resolved: :meth:`wait` will not block.
    done: bool = False
    #: What it failed with, if it did.
    error: BaseException | None = None
    _waiter: trio.lowlevel.Task | None = None
    _callback: Callable[[], None] | None = None
    #: While a task waits on it shielded and bounded (:class:`broker._bounded_waits.BoundedWaits`):
    #: when the wait is overdue. The ticket is then the wait itself, in its host's map of
    #: outstanding waits (``_waits``): no second object per durable question.
    deadline: float = 0.0
    _waits: MutableMapping[Ticket, None] | None = None

    def fail(self, error: BaseException) -> None:
        """Resolve with *error* (no-op if already resolved)."""
        if not self.done:
            self.error = error
            self._resolve()

    def succeed(self) -> None:
        """Resolve successfully (no-op if already resolved)."""
        if not self.done:
            self._resolve()

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once resolved (at once if it is): synchronously, on the trio thread,
        in the order added. *fn* must not raise."""
        if self.done:
            fn()
            return
        previous = self._callback
        self._callback = fn if previous is None else functools.partial(_both, previous, fn)

    def park_bounded(
        self, task: trio.lowlevel.Task, deadline: float, waits: MutableMapping[Ticket, None]
    ) -> None:
        """Make *task* this ticket's bounded waiter until *deadline*, listed in *waits*: it is
        woken once, by :meth:`wake` — with True when the ticket resolves. The caller parks
        *task* next (``wait_task_rescheduled``)."""
        self._waiter = task
        self.deadline = deadline
        self._waits = waits
        waits[self] = None

    def wake(self, verdict: bool | None) -> None:
        """End a bounded wait: leave the waits map and reschedule the waiter with *verdict*
        (True resolved, False overdue, None: its timer stopped). A no-op once woken."""
        waits = self._waits
        if waits is not None:
            self._waits = None
            del waits[self]
            task = self._waiter
            self._waiter = None
            assert task is not None  # park_bounded set it
            trio.lowlevel.reschedule(task, outcome.Value(verdict))

    def _resolve(self) -> None:
        self.done = True
        if self._waits is not None:
            self.wake(True)
        else:
            waiter = self._waiter
            if waiter is not None:
                self._waiter = None
                trio.lowlevel.reschedule(waiter)
        callback = self._callback
        if callback is not None:
            self._callback = None
            callback()

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self) -> None:
        """Wait for the resolution (one waiter at a time); raise the error it carries.

        Cancellation: just stops waiting; what was submitted (or queued) may still be done.
        """
        if self.done:
            await trio.lowlevel.checkpoint()
        else:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self.error is not None:
            raise self.error


def _both(first: Callable[[], None], second: Callable[[], None]) -> None:
    first()
    second()


DURABLE = Ticket(done=True)
"""The ticket of a store whose submissions are durable when handed over (in memory)."""
