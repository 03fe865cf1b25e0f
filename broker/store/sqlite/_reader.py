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
from ._schema import connect_reader, schema_version
from ._walk import CHAIN_CHECK_SQL, CHAIN_SQL

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteReader", "open_sqlite_reader"]


@attrs.define(eq=False)
class SqliteReader:
    """A read-only snapshot of one store file; made by :func:`open_sqlite_reader`."""

    path: str
    _conn: sqlite3.Connection
    _closed: bool = attrs.field(default=False, init=False)
    # How rows() finds a session's rows: version 1's (session_id, seq) key, or the index
    # _session_index builds (version 2); read inside the snapshot, on first use.
    _rows_sql: str | None = attrs.field(default=None, init=False)
    # The snapshot's schema version, read once (it cannot change within the snapshot).
    _version: int | None = attrs.field(default=None, init=False)

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
        """*session_id*'s rows in seq order (streamed, not loaded at once): every row the file
        holds for it, whether or not its session's chain links it (so ``broker log verify``
        sees a row inserted or renumbered behind the store's back)."""
        if self._rows_sql is None:
            self._rows_sql = self._session_index()
        return self._event_rows(self._rows_sql, session_id)

    def linked_rows(self, session_id: str) -> Iterator[EventRow]:
        """*session_id*'s rows in seq order as its chain links them, for a tool that reads one
        session (``broker log show``, an export of one session): O(its rows), where
        :meth:`rows` first indexes the whole snapshot (~0.4 s a million rows) in version 2.

        When the walk from the session's head is not its whole chain (a link or a row was
        changed behind the store's back), every row the file holds for it instead
        (:meth:`rows`), so what reads them reports the damage. A row no link reaches beside a
        whole chain is not shown here; ``broker log verify`` (which reads :meth:`rows`) finds it.
        """
        if self._rows_sql is not None or self._schema_version() == 1:
            return self.rows(session_id)  # indexed already, or keyed by session
        found = self._conn.execute(
            "SELECT head_seq FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        head_seq = 0 if found is None else found[0]
        count, distinct, first, last, ends = self._conn.execute(
            CHAIN_CHECK_SQL, (session_id,)
        ).fetchone()
        whole = count == distinct == head_seq and (
            head_seq == 0 or (first == 1 and last == head_seq and ends == 1)
        )
        if not whole:
            return self.rows(session_id)
        return self._event_rows(CHAIN_SQL, session_id)

    def _event_rows(self, query: str, session_id: str) -> Iterator[EventRow]:
        """The rows *query* (``seq, ts_ms, line, prev_hash, hash`` of session ``?1``) yields,
        streamed."""
        cursor = self._conn.execute(query, (session_id,))
        for seq, ts_ms, line, prev_hash, digest in cursor:
            yield EventRow(
                session_id=session_id,
                seq=seq,
                ts_ms=ts_ms,
                line=line,
                prev_hash=prev_hash,
                hash=digest,
            )

    def _schema_version(self) -> int:
        if self._version is None:
            self._version = schema_version(self._conn)
        return self._version

    def _session_index(self) -> str:
        """The query of rows(): version 1 has a (session_id, seq) key; version 2 has none (its
        writer walks chains, ._walk), so the first call indexes the snapshot's rows by session
        in a connection-local table, O(events log events) once, for every later call."""
        if self._schema_version() == 1:
            return (
                "SELECT seq, ts_ms, line, prev_hash, hash FROM events WHERE session_id = ? "
                "ORDER BY seq"
            )
        self._conn.execute(
            "CREATE TEMP TABLE by_session AS SELECT session_id, seq, id FROM main.events"
        )
        self._conn.execute("CREATE INDEX temp.by_session_key ON by_session (session_id, seq)")
        return (
            "SELECT e.seq, e.ts_ms, e.line, e.prev_hash, e.hash FROM temp.by_session AS k "
            "JOIN main.events AS e ON e.id = k.id WHERE k.session_id = ? ORDER BY k.seq"
        )

    def orphan_session_ids(self) -> list[str]:
        """Session ids that have events but no sessions row (rows inserted behind our back)."""
        rows = self._conn.execute(
            "SELECT DISTINCT session_id FROM events "
            "WHERE session_id NOT IN (SELECT id FROM sessions) ORDER BY session_id"
        )
        return [session_id for (session_id,) in rows]

    def broken_links(self) -> list[tuple[str, int, str]]:
        """Rows of schema version 2 that do not link to their session's previous row (seq 1 to
        none), and sessions whose head row is not their last: what the writer's walks
        (._walk) would stop at. One pass over the file; none in version 1 (no links)."""
        if self._schema_version() == 1:
            return []
        rows = self._conn.execute(
            "SELECT e.session_id, e.seq, p.session_id, p.seq FROM events AS e "
            "LEFT JOIN events AS p ON p.id = e.prev_row AND e.prev_row < e.id "
            "WHERE NOT coalesce((e.seq = 1 AND e.prev_row IS NULL) OR (p.session_id = "
            "e.session_id AND p.seq = e.seq - 1), false) ORDER BY e.session_id, e.seq"
        ).fetchall()
        broken = [
            (session_id, seq, _link_problem(seq, linked_id, linked_seq))
            for session_id, seq, linked_id, linked_seq in rows
        ]
        heads = self._conn.execute(
            "SELECT s.id, s.head_seq, h.session_id, h.seq FROM sessions AS s "
            "LEFT JOIN events AS h ON h.id = s.head_row "
            "WHERE NOT coalesce((s.head_seq = 0 AND s.head_row IS NULL) OR (h.session_id = s.id "
            "AND h.seq = s.head_seq), false) ORDER BY s.rowid"
        ).fetchall()
        broken.extend(
            (
                session_id,
                head_seq,
                f"the session's head row is not its seq {head_seq} (a link was changed behind "
                "the store's back)",
            )
            for session_id, head_seq, _, _ in heads
        )
        return broken

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


def _link_problem(seq: int, linked_id: str | None, linked_seq: int | None) -> str:
    found = "no earlier row" if linked_seq is None else f"seq {linked_seq} of {linked_id!r}"
    wanted = f"seq {seq - 1}" if seq > 1 else "no row"
    return f"the row links to {found}, not to {wanted} (a link was changed behind the store's back)"


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
