"""What callers queue for a store's writer actor (:mod:`broker.store._writer`): one request
type per kind of call.

Each request is a :class:`~broker.store._ticket.Ticket`: resolved exactly once by the actor
(``succeed`` or ``fail``); its one waiting caller is rescheduled directly.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs

from ._protocol import SessionRecord, StoreHead
from ._ticket import Ticket

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState

__all__ = [
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
    "wall_clock_ms",
]


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
