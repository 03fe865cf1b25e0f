"""What a store holds, row by row, as read-only tools see it — the same for every store.

A :class:`StoreReader` is one read-only snapshot of a store (SQLite:
:func:`broker.store.open_sqlite_reader`; PostgreSQL:
:func:`broker.store.postgres._reader.open_postgres_reader`); ``verify`` works on any of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import attrs

__all__ = ["EventRow", "SessionInfo", "StoreReader", "StoredCheckpoint"]


@attrs.frozen(kw_only=True)
class SessionInfo:
    """One row of the sessions table."""

    session_id: str
    parent_id: str | None
    created_ms: int
    head_seq: int
    head_hash: bytes


@attrs.frozen(kw_only=True)
class EventRow:
    """One stored event: its JSON line exactly as written, and its chain fields."""

    session_id: str
    seq: int
    ts_ms: int
    line: str
    prev_hash: bytes
    hash: bytes


@attrs.frozen(kw_only=True)
class StoredCheckpoint:
    """A session's stored projection checkpoint (the JSON text of an ``ApprovalState``) and the
    fingerprint of the projection code that folded it."""

    session_id: str
    seq: int
    state: str
    projection: str


class StoreReader(Protocol):
    """A read-only snapshot of one store (blocking: use it from a thread or a CLI)."""

    @property
    def where(self) -> str:
        """How messages name the store: ``store file '…'``, ``postgresql store '…'``."""
        ...

    def sessions(self) -> list[SessionInfo]:
        """Every session, in creation order."""
        ...

    def session(self, session_id: str) -> SessionInfo | None:
        """The session *session_id*, or None."""
        ...

    def rows(self, session_id: str) -> Iterator[EventRow]:
        """*session_id*'s rows in seq order."""
        ...

    def linked_rows(self, session_id: str) -> Iterator[EventRow]:
        """*session_id*'s rows in seq order, for a tool that reads one session: as its chain
        links them where a store links its rows (fast; :meth:`rows` when the chain is not
        whole), else :meth:`rows`. ``verify`` reads :meth:`rows`, which has every row."""
        ...

    def orphan_session_ids(self) -> list[str]:
        """Session ids that have events but no session record."""
        ...

    def broken_links(self) -> list[tuple[str, int, str]]:
        """``(session id, seq, what)`` of each row whose link to its session's previous row,
        and each session whose link to its last row, is not what the store wrote (a store
        whose rows are linked: SQLite's schema version 2; others have none)."""
        ...

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, by session id."""
        ...
