"""Read-only access to a SQLite store, for ``broker log`` and other tools (synchronous).

Synopsis::

    with open_sqlite_reader("broker.db") as reader:
        for info in reader.sessions():
            print(info.session_id, info.head_seq)

The file is opened with SQLite's ``mode=ro``: nothing in it can change, and no writer lock is
taken, so it works while a broker is writing (WAL readers do not block the writer). Everything
read through one reader comes from ONE snapshot (a read transaction held until close).
Blocking: use it from a thread or a CLI, not from a trio task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import attrs

from .._rows import EventRow, SessionInfo, StoredCheckpoint
from ._schema import connect_reader

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteReader", "open_sqlite_reader"]


@attrs.define(eq=False)
class SqliteReader:
    """A read-only snapshot of one store file; made by :func:`open_sqlite_reader`."""

    path: str
    _conn: sqlite3.Connection
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def where(self) -> str:
        """``store file '…'``."""
        return f"store file '{self.path}'"

    def sessions(self) -> list[SessionInfo]:
        """Every session, in creation order."""
        rows = self._conn.execute(
            "SELECT id, parent_id, created_ms, head_seq, head_hash FROM sessions ORDER BY rowid"
        )
        return [
            SessionInfo(
                session_id=session_id,
                parent_id=parent_id,
                created_ms=created_ms,
                head_seq=head_seq,
                head_hash=head_hash,
            )
            for session_id, parent_id, created_ms, head_seq, head_hash in rows
        ]

    def session(self, session_id: str) -> SessionInfo | None:
        """The session *session_id*, or None."""
        row = self._conn.execute(
            "SELECT id, parent_id, created_ms, head_seq, head_hash FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            return None
        return SessionInfo(
            session_id=row[0],
            parent_id=row[1],
            created_ms=row[2],
            head_seq=row[3],
            head_hash=row[4],
        )

    def rows(self, session_id: str) -> Iterator[EventRow]:
        """*session_id*'s rows in seq order (streamed, not loaded at once)."""
        cursor = self._conn.execute(
            "SELECT seq, ts_ms, line, prev_hash, hash FROM events WHERE session_id = ? "
            "ORDER BY seq",
            (session_id,),
        )
        for seq, ts_ms, line, prev_hash, digest in cursor:
            yield EventRow(
                session_id=session_id,
                seq=seq,
                ts_ms=ts_ms,
                line=line,
                prev_hash=prev_hash,
                hash=digest,
            )

    def orphan_session_ids(self) -> list[str]:
        """Session ids that have events but no sessions row (rows inserted behind our back)."""
        rows = self._conn.execute(
            "SELECT DISTINCT session_id FROM events "
            "WHERE session_id NOT IN (SELECT id FROM sessions) ORDER BY session_id"
        )
        return [session_id for (session_id,) in rows]

    def checkpoint(self, session_id: str) -> StoredCheckpoint | None:
        """*session_id*'s stored checkpoint, or None."""
        row = self._conn.execute(
            "SELECT seq, state, projection FROM checkpoints WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        return StoredCheckpoint(session_id=session_id, seq=row[0], state=row[1], projection=row[2])

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, by session id."""
        rows = self._conn.execute(
            "SELECT session_id, seq, state, projection FROM checkpoints ORDER BY session_id"
        )
        return [
            StoredCheckpoint(session_id=session_id, seq=seq, state=state, projection=projection)
            for session_id, seq, state, projection in rows
        ]

    def close(self) -> None:
        """End the snapshot and close the connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")
        self._conn.close()


@contextmanager
def open_sqlite_reader(path: str | os.PathLike[str]) -> Iterator[SqliteReader]:
    """Open the store file *path* read-only, as one snapshot, for the ``with`` block.

    Raises :class:`~broker.store.StoreOpenError` (naming the file and the problem) when it is
    missing, not a broker store, or of a newer schema version.
    """
    name = os.fspath(path)
    conn = connect_reader(name)
    reader = SqliteReader(name, conn)
    try:
        conn.execute("BEGIN")
        yield reader
    finally:
        reader.close()
