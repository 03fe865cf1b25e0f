"""A submission's ticket, and what callers queue for a store's writer actor
(:mod:`broker.store._writer`): one request type per kind of call.

A :class:`Ticket` is the :class:`~broker.store._protocol.Durability` a store hands out: resolved
exactly once (``succeed`` or ``fail``), then its one waiting caller is rescheduled directly.
Every request is a ticket, so a session's durable submission (an :class:`AppendRequest`) is one
object from the session to the writer and back: its events, its lines, the seq it follows, the
projection to checkpoint, its waiter and its resolution. An in-memory store hands out
:data:`DURABLE`, a ticket resolved from the start.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING

import attrs
import outcome
import trio

from ._protocol import SessionRecord, StoreHead

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState

__all__ = [
    "DURABLE",
    "AppendRequest",
    "ClaimRequest",
    "CreateRequest",
    "HeadRequest",
    "ImportRequest",
    "LookupRequest",
    "ReadRequest",
    "ReleaseRequest",
    "RenewRequest",
    "Request",
    "Ticket",
    "wall_clock_ms",
]


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


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the timestamp stored with each row (not in the event)."""
    return time.time_ns() // 1_000_000


@attrs.define(eq=False, kw_only=True)
class Request(Ticket):
    """One call queued for the writer, for *session_id*; a :class:`Ticket` the actor resolves.

    Cancellation of :meth:`wait`: the request stays queued and may still be carried out.
    """

    session_id: str


@attrs.define(eq=False, kw_only=True)
class CreateRequest(Request):
    """Record a session (and its parent)."""

    parent_id: str | None


@attrs.define(eq=False, kw_only=True)
class AppendRequest(Request):
    """Append *events* (already encoded to *lines* by the caller) atomically.

    A session's submission (the one append path) carries ``seq`` — the seq its events follow —
    and ``state``, the projection after them, which the writer checkpoints without folding
    again. A convenience append (tools, recovery) leaves both None: the writer places it after
    the session's last event and folds it.
    """

    events: tuple[Event, ...]
    lines: tuple[str, ...]
    seq: int | None = None
    state: ApprovalState | None = None


@attrs.define(eq=False, kw_only=True)
class ImportRequest(AppendRequest):
    """Create a session that must not exist yet and append *events*, in one transaction."""

    parent_id: str | None


@attrs.define(eq=False, kw_only=True)
class HeadRequest(Request):
    """Read a session's acknowledged head once every write queued before it is settled."""

    head: StoreHead = attrs.field(factory=StoreHead, init=False)


@attrs.define(eq=False, kw_only=True)
class ReadRequest(Request):
    """Read a session's events; the result is left in ``events``."""

    events: list[Event] = attrs.field(factory=list, init=False)


@attrs.define(eq=False, kw_only=True)
class LookupRequest(Request):
    """Read a session's record; the result (None: not held) is left in ``record``."""

    record: SessionRecord | None = attrs.field(default=None, init=False)


@attrs.define(eq=False, kw_only=True)
class ClaimRequest(Request):
    """Take a session over (resume): its lease in a shared store, its crash tail closed; the
    head it is resumed from is left in ``head``."""

    head: StoreHead = attrs.field(factory=StoreHead, init=False)


@attrs.define(eq=False, kw_only=True)
class ReleaseRequest(Request):
    """Give a session's lease back once every write queued before it is settled."""


@attrs.define(eq=False, kw_only=True)
class RenewRequest(Request):
    """Renew the leases of every session this process owns (``session_id`` is unused)."""
