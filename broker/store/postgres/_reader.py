"""Read-only access to a PostgreSQL store, for ``broker log`` and other tools (synchronous).

Synopsis::

    with open_postgres_reader("postgresql://broker@db/broker") as reader:
        verify_reader(reader)                 # broker.store._logtools

Everything read through one reader comes from ONE snapshot (a ``REPEATABLE READ, READ ONLY``
transaction held until close); no writer lock is taken, so it works while a broker writes.
Blocking: use it from a thread or a CLI, not from a trio task.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import attrs
from psycopg import sql

from .._rows import EventRow, SessionInfo, StoredCheckpoint
from .._url import redact_dsn
from ._schema import DEFAULT_SCHEMA, check_schema_name, connect, prepare_schema

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["PostgresReader", "open_postgres_reader"]


@attrs.define(eq=False)
class PostgresReader:
    """A read-only snapshot of one PostgreSQL store; made by :func:`open_postgres_reader`."""

    dsn: str
    schema: str
    _conn: Connection[tuple[object, ...]]

    @property
    def where(self) -> str:
        """``postgresql store '…'`` (the URL without its password)."""
        shown = redact_dsn(self.dsn)
        suffix = "" if self.schema == DEFAULT_SCHEMA else f" schema {self.schema}"
        return f"postgresql store '{shown}{suffix}'"

    def _table(self, name: str) -> sql.Composed:
        return sql.SQL("{s}.{t}").format(s=sql.Identifier(self.schema), t=sql.Identifier(name))

    def sessions(self) -> list[SessionInfo]:
        """Every session, in creation order."""
        rows = self._conn.execute(
            sql.SQL(
                "SELECT id, parent_id, created_ms, head_seq, head_hash FROM {t} ORDER BY ord"
            ).format(t=self._table("sessions"))
        ).fetchall()
        return [_info(row) for row in rows]

    def session(self, session_id: str) -> SessionInfo | None:
        """The session *session_id*, or None."""
        row = self._conn.execute(
            sql.SQL(
                "SELECT id, parent_id, created_ms, head_seq, head_hash FROM {t} WHERE id = %s"
            ).format(t=self._table("sessions")),
            (session_id,),
        ).fetchone()
        return None if row is None else _info(row)

    def rows(self, session_id: str) -> Iterator[EventRow]:
        """*session_id*'s rows in seq order."""
        cursor = self._conn.execute(
            sql.SQL(
                "SELECT seq, ts_ms, line, prev_hash, hash FROM {t} WHERE session_id = %s "
                "ORDER BY seq"
            ).format(t=self._table("events")),
            (session_id,),
        )
        for seq, ts_ms, line, prev_hash, digest in cursor.fetchall():
            yield EventRow(
                session_id=session_id,
                seq=int(seq),  # type: ignore[call-overload]
                ts_ms=int(ts_ms),  # type: ignore[call-overload]
                line=str(line),
                prev_hash=bytes(prev_hash),  # type: ignore[call-overload]
                hash=bytes(digest),  # type: ignore[call-overload]
            )

    def orphan_session_ids(self) -> list[str]:
        """Session ids that have events but no sessions row (rows inserted behind our back)."""
        rows = self._conn.execute(
            sql.SQL(
                "SELECT DISTINCT session_id FROM {e} WHERE session_id NOT IN "
                "(SELECT id FROM {s}) ORDER BY session_id"
            ).format(e=self._table("events"), s=self._table("sessions"))
        )
        return [str(session_id) for (session_id,) in rows]

    def linked_rows(self, session_id: str) -> Iterator[EventRow]:
        """:meth:`rows`: PostgreSQL finds a session's rows by their key, not by links."""
        return self.rows(session_id)

    def broken_links(self) -> list[tuple[str, int, str]]:
        """None: PostgreSQL's rows are found by their (session_id, seq) key, not linked."""
        return []

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, by session id."""
        rows = self._conn.execute(
            sql.SQL(
                "SELECT session_id, seq, state, projection FROM {t} ORDER BY session_id"
            ).format(t=self._table("checkpoints"))
        )
        return [
            StoredCheckpoint(
                session_id=str(session_id),
                seq=int(seq),  # type: ignore[call-overload]
                state=str(state),
                projection=str(projection),
            )
            for session_id, seq, state, projection in rows
        ]

    def close(self) -> None:
        """End the snapshot and close the connection (idempotent)."""
        if not self._conn.closed:
            self._conn.rollback()
            self._conn.close()


def _info(row: tuple[object, ...]) -> SessionInfo:
    session_id, parent_id, created_ms, head_seq, head_hash = row
    return SessionInfo(
        session_id=str(session_id),
        parent_id=None if parent_id is None else str(parent_id),
        created_ms=int(created_ms),  # type: ignore[call-overload]
        head_seq=int(head_seq),  # type: ignore[call-overload]
        head_hash=bytes(head_hash),  # type: ignore[call-overload]
    )


@contextmanager
def open_postgres_reader(dsn: str, *, schema: str = DEFAULT_SCHEMA) -> Iterator[PostgresReader]:
    """Open the store in *schema* of *dsn* read-only, as one snapshot, for the ``with`` block.

    Raises :class:`~broker.store.StoreOpenError` (naming the URL without its password) when the
    server cannot be reached, or the schema is missing or not a broker store of a version this
    broker reads. Nothing is written.
    """
    check_schema_name(schema)
    conn = connect(dsn)
    reader = PostgresReader(dsn=dsn, schema=schema, conn=conn)
    try:
        prepare_schema(conn, reader.where, schema, create=False)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield reader
    finally:
        reader.close()
