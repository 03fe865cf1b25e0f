"""What callers queue for the SQLite writer actor: one request type per kind of call.

Each request is resolved exactly once by the actor (:meth:`Request.succeed` or
:meth:`Request.fail`); its one waiting caller is rescheduled directly.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs
import trio

from ._protocol import StoreHead

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState

__all__ = [
    "AppendRequest",
    "CreateRequest",
    "HeadRequest",
    "ImportRequest",
    "ReadRequest",
    "Request",
    "wall_clock_ms",
]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the timestamp stored with each row (not in the event)."""
    return time.time_ns() // 1_000_000


@attrs.define(eq=False, kw_only=True)
class Request:
    """One call queued for the writer; resolved exactly once by the actor.

    Hot path: the one waiting task is parked and rescheduled directly (no :class:`trio.Event`,
    whose set of waiters one caller does not need).
    """

    session_id: str
    _done: bool = attrs.field(default=False, init=False)
    _error: BaseException | None = attrs.field(default=None, init=False)
    _waiter: trio.lowlevel.Task | None = attrs.field(default=None, init=False)

    @property
    def done(self) -> bool:
        """Resolved: :meth:`wait` will not block."""
        return self._done

    def fail(self, error: BaseException) -> None:
        """Resolve with *error* (no-op if already resolved)."""
        if not self._done:
            self._error = error
            self._resolve()

    def succeed(self) -> None:
        """Resolve successfully (no-op if already resolved)."""
        if not self._done:
            self._resolve()

    def _resolve(self) -> None:
        self._done = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self) -> None:
        """Wait for the resolution (one waiter at a time); raise the error it carries.

        Cancellation: the request stays queued and may still be carried out.
        """
        if self._done:
            await trio.lowlevel.checkpoint()
        else:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._error is not None:
            raise self._error


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
