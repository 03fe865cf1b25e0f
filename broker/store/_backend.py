"""What a group-commit writer (:mod:`broker.store._writer`) needs of one store's connection.

The writer is store-neutral: inbox, grouping, staging (chain, heads, checkpoints), pipelining,
completion, recovery and final checkpoints are the same for every store. A :class:`Backend` is
the rest — the SQL and the connection — and its blocking methods run only on the writer's one
worker thread (:mod:`broker.store._worker_thread`), which owns the connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ._protocol import SessionRecord, StoreError

if TYPE_CHECKING:
    from .._events import Event
    from ._heads import SessionHead
    from ._plan import Plan

__all__ = ["Backend", "ConnectionLost", "LeasesLost"]


class ConnectionLost(StoreError):
    """The connection could not be rolled back and was closed; the writer is broken."""


class LeasesLost(ConnectionLost):
    """The connection was lost after this process had not renewed its leases for a whole ttl
    (it was paused, or cut off): another process may own its sessions now, so each is fenced
    (``fenced``: session id → the error its writes get) and the writer is broken."""

    def __init__(self, message: str, fenced: Mapping[str, StoreError]) -> None:
        super().__init__(message)
        self.fenced = fenced


class Backend(Protocol):
    """One store's connection and SQL, driven by a :class:`~broker.store._writer.GroupWriter`.

    Thread model: the methods marked *(worker thread)* are blocking and run only on the
    writer's worker thread; the others are cheap and run on the trio thread.
    """

    @property
    def label(self) -> str:
        """How errors name the store, e.g. ``sqlite store '/var/b.db'`` (trio thread)."""
        ...

    @property
    def location(self) -> str:
        """The store's bare location, e.g. ``/var/b.db`` (a URL without its password)."""
        ...

    @property
    def where(self) -> str:
        """How errors name where the data lives, e.g. ``store file '/var/b.db'``."""
        ...

    @property
    def thread_name(self) -> str:
        """The name of the writer's worker thread."""
        ...

    @property
    def io_errors(self) -> tuple[type[Exception], ...]:
        """The driver's errors that fail one transaction (rolled back; the writer carries
        on). Anything else from :meth:`write` is a bug and breaks the writer."""
        ...

    @property
    def lease_ttl(self) -> float | None:
        """How long a session's lease lasts, in seconds, in a store several processes write
        (the writer renews them every third of it); None for a store with one writer, whose
        :meth:`open` loads and recovers every session."""
        ...

    def open(self) -> dict[str, SessionHead]:
        """(worker thread) Connect, check the schema (creating it in an empty store) and
        return the committed heads the writer starts from, in creation order: every session's
        in a store with one writer, none in a shared one (a session is loaded by
        :meth:`claim`). Raises :class:`~broker.store.StoreOpenError` with nothing changed;
        releases what it took."""
        ...

    def claim(self, session_id: str, known: SessionHead | None) -> SessionHead | None:
        """(worker thread) Become the writer of *session_id* and return its committed head
        (*known*: the head this writer has), None when the store does not hold it. A shared
        store takes the session's lease here (epoch + 1) or raises
        :class:`~broker.store.SessionOwnedError` while another process holds a live one."""
        ...

    def release(self, session_ids: Sequence[str]) -> None:
        """(worker thread) Give the leases of *session_ids* back, all at once (nothing for a
        store with one writer)."""
        ...

    def renew(self) -> dict[str, StoreError]:
        """(worker thread) Renew the leases of the sessions this process owns; returns those
        found taken over by another process, each with the error its writes now get."""
        ...

    def prepare(self, plan: Plan) -> object:
        """(trio thread) Whatever :meth:`write` wants made before the hand-off (so the worker
        holds the GIL briefly); ``None`` if nothing."""
        ...

    def write(self, plan: Plan, prepared: object) -> Mapping[str, StoreError]:
        """(worker thread) Write *plan* as ONE transaction, durable when this returns.

        Returns the sessions of *plan* this process no longer owns (a shared store checks
        each session's lease epoch in the same transaction), each with its
        :class:`~broker.store.SessionFencedError`: nothing of theirs was written, everything
        else was. Raise ``plan.fault`` in place of COMMIT (rolled back), or after it when
        ``plan.fault_landed``. Any error rolls back; a failed rollback closes the connection
        and raises :class:`ConnectionLost`."""
        ...

    def write_error(self, exc: Exception) -> StoreError:
        """(trio thread) What each caller of a group that failed with *exc*, one of
        :attr:`io_errors`, is told."""
        ...

    def reread_heads(self, known: dict[str, SessionHead | None]) -> dict[str, SessionHead]:
        """(worker thread) The committed heads of *known*'s sessions (after a failed write: a
        COMMIT that raised may have landed); a known head that still matches is kept as is."""
        ...

    def read_sessions(self, session_ids: Sequence[str]) -> list[list[Event] | StoreError]:
        """(worker thread) Each session's events in order, or the error of a damaged row."""
        ...

    def read_records(self, session_ids: Sequence[str]) -> list[SessionRecord | None]:
        """(worker thread) Each session's record (its parent id), None for one not held."""
        ...

    def pending_in_log_order(self, wanted: dict[str, frozenset[str]]) -> dict[str, list[str]]:
        """(worker thread) For each session, its pending ask ids in the order of their asks."""
        ...

    def close(self) -> None:
        """(worker thread) Close the connection and release what :meth:`open` took
        (idempotent)."""
        ...
