"""The event-store contract the service is written against: one append path for every store.

A store keeps, per session id, an ordered log of events. The session that owns a log
*sequences* each event itself — precondition, sequence number, projection fold, once, on the
trio thread, with no await in between — and hands the result to the store with the synchronous
:meth:`EventStore.submit`. The store only persists what it is handed: it chains, groups and
checkpoints, and resolves the returned :class:`Durability` once the events are durable. It never
folds a second time and puts no second actor between the asker and its writer. The in-memory
store is the same path with durability already done (``submit`` returns a resolved ticket).

The one promise that matters to the seam: a :class:`Durability` resolves successfully only once
its events are durable, in order, after everything submitted earlier for that session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from .._errors import BrokerError
from .._projection import ApprovalState

if TYPE_CHECKING:
    from .._events import Event

__all__ = [
    "Durability",
    "EventStore",
    "SessionFencedError",
    "SessionOwnedError",
    "SessionRecord",
    "StoreError",
    "StoreHead",
    "StoreLockedError",
    "StoreOpenError",
]


class StoreError(BrokerError):
    """An append or read could not be completed; nothing about it was acknowledged."""


class StoreOpenError(StoreError):
    """A store could not be opened (a file that is not a broker store, a server that does not
    answer, a schema of a newer version); nothing in it was changed."""


class StoreLockedError(StoreOpenError):
    """Another writer (in this or another process) holds the store's writer lock."""


class SessionFencedError(StoreError):
    """This process no longer owns the session: another one took it over (a newer lease epoch).

    Nothing of the refused append landed. The session that gets it fails its callers closed and
    ends; it must not write again.
    """


class SessionOwnedError(StoreError):
    """The session is owned by another live process (its lease has not expired): not taken."""


@attrs.frozen(kw_only=True)
class SessionRecord:
    """What a store knows of a session besides its events: its id and its parent's id."""

    session_id: str
    parent_id: str | None


@attrs.frozen(kw_only=True)
class StoreHead:
    """A session's acknowledged position: the seq of its last durable event (0 for an empty
    log) and the projection after it."""

    seq: int = 0
    state: ApprovalState = attrs.field(factory=ApprovalState)


class Durability(Protocol):
    """What :meth:`EventStore.submit` returns: resolves once the submitted events are durable.

    A ticket that is already failed when :meth:`EventStore.submit` returns it means the store
    took nothing of the submission: its log, and the seq it expects next for that session, are
    as they were (the session keeps its projection and goes on, without re-reading the head).
    """

    @property
    def done(self) -> bool:
        """Resolved (durable or failed): :meth:`wait` will not block."""
        ...

    @property
    def error(self) -> BaseException | None:
        """Once resolved: None when the events are durable, else why they are not."""
        ...

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once resolved (at once if it already is): synchronously, on the trio
        thread, in the order callbacks were added. *fn* must not raise. This is how a waiter
        that cancellation must not interrupt waits (see :mod:`broker._bounded_waits`)."""
        ...

    async def wait(self) -> None:
        """Wait until resolved; raise :class:`StoreError` if the events were not made durable
        (then none of them counts as appended, nor does anything the session submitted after
        them). One waiter at a time.

        Cancellation: just stops waiting — the events may still land (recovery closes what a
        crash leaves open).
        """
        ...


class EventStore(Protocol):
    """Durable, per-session, append-only event logs, fed by the sessions that own them.

    Concurrency: only the owner of a session submits to it, in seq order; submissions of
    different sessions arrive interleaved and a store commits them together (group commit).
    """

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """Record that *session_id* exists (child of *parent_id*), owned by this process, with
        an empty log; durable before it returns.

        Cancellation: if cancelled, the session may or may not have been recorded.
        """
        ...

    async def claim(self, session_id: str) -> StoreHead:
        """Become the writer of the existing *session_id* (resume) and return its head.

        A store shared between processes takes the session's lease here — raising
        :class:`SessionOwnedError` (naming the owner and when its lease expires) while another
        process holds a live one — and closes the crash tail the previous owner left (pending
        questions ``cancelled``, ``recovered: true``; an open turn ``interrupted``). Raises
        :class:`StoreError` when the store does not hold *session_id*.

        Cancellation: if cancelled, the lease may or may not have been taken.
        """
        ...

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        """Hand over *events*, already sequenced by the session: they follow its event *seq*
        (they are ``seq + 1 …``) and *state* is the projection after the last of them.

        Synchronous and never blocking. Raises :class:`StoreError` at once — nothing handed
        over — when the store is closed, or when *seq* is not the session's last submitted seq
        (after a failed write: its last acknowledged one, see :meth:`head`).
        """
        ...

    @property
    def congested(self) -> bool:
        """The store's bound of submitted, unwritten events is reached: wait for room first."""
        ...

    async def wait_for_room(self) -> None:
        """Wait until :attr:`congested` is false. Cancellation: just stops waiting."""
        ...

    async def head(self, session_id: str) -> StoreHead:
        """The acknowledged head of *session_id* (empty for an unknown one), once any re-read
        after a failed write is done — where its owner resumes sequencing after a failure.

        Cancellation: safe; nothing is changed.
        """
        ...

    async def release(self, session_id: str) -> None:
        """Its owner closed *session_id*: once what was submitted for it is written, a shared
        store gives up the lease. Never raises a :class:`StoreError` (a lease left behind just
        expires). Cancellation: safe."""
        ...

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Convenience for tools, imports and tests (not the session's path): sequence *events*
        after the session's last submitted one, fold them, submit and wait.

        Raises :class:`StoreError` when they could not be made durable; then none of them counts
        as appended. Cancellation: the events may still land.
        """
        ...

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """The record of *session_id*, or None when the store does not hold it.

        Cancellation: safe; nothing is changed.
        """
        ...

    async def read(self, session_id: str) -> list[Event]:
        """Every durable event of *session_id*, in append order.

        Cancellation: safe; nothing is changed.
        """
        ...

    async def aclose(self) -> None:
        """Write what was submitted, then release the store; later calls raise.

        Cancellation: still releases what it holds.
        """
        ...
