"""What SQLite adds to the store-neutral group-commit writer: its file, lock and connection.

:class:`SqliteBackend` is the :class:`~broker.store._backend.Backend` of a SQLite store. The
writer (:mod:`broker.store._writer`) calls its blocking methods on its one worker thread, which
owns the ``sqlite3`` connection (a connection stays on the thread that made it).

A group is written as ONE SQL statement (an INSERT into a connection-local view whose trigger
reads the group from JSON arrays, made on the trio thread by :meth:`SqliteBackend.prepare`), so
SQLite holds no GIL from the start of the group to its COMMIT and the trio thread stages the
next group in parallel. An SQLite without JSON functions, a group with a NUL in a session id, or
a group of fewer than ``_ONE_STATEMENT_MIN_ROWS`` rows is written statement by statement.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

import attrs

from .._backend import ConnectionLost
from .._protocol import SessionRecord, StoreError, StoreOpenError
from ._group import group_parameters, install_group_write, nul_free
from ._jobs import next_row_id, read_sessions, reread_heads, write_group
from ._load import load_heads, pending_in_log_order
from ._lock import WriterLock
from ._schema import Synchronous, check_writer_path, connect_writer, read_synchronous, weaker_than

if TYPE_CHECKING:
    from ..._events import Event
    from .._heads import SessionHead
    from .._plan import Plan

__all__ = ["SqliteBackend"]

# Write a group as one statement from this many rows on: the trigger costs ~40 us more per
# transaction than plain statements, which a few rows do not win back.
_ONE_STATEMENT_MIN_ROWS = 16
_NONE_FENCED: Mapping[str, StoreError] = MappingProxyType({})


@attrs.define(eq=False)
class SqliteBackend:
    """One store file: its writer lock and its one connection (on the writer's thread)."""

    path: str
    synchronous: Synchronous
    _lock: WriterLock = attrs.field(init=False)
    # Invariant: _conn is only touched on the writer's worker thread.
    _conn: sqlite3.Connection | None = attrs.field(default=None, init=False)
    # Whether groups are written as one statement (see _group._GROUP_DDL); set at open.
    _one_statement: bool = attrs.field(default=False, init=False)
    # PRAGMA synchronous as the connection reported it at open, on the worker thread.
    _reported: str | None = attrs.field(default=None, init=False)
    # The id the next event row gets (the writer assigns them: it holds the file's lock);
    # None: read it from the file first (at open, and after any failed write).
    _next_id: int | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._lock = WriterLock(self.path)

    @property
    def label(self) -> str:
        """``sqlite store '…'``."""
        return f"sqlite store '{self.path}'"

    @property
    def location(self) -> str:
        """The file's path."""
        return self.path

    @property
    def where(self) -> str:
        """``store file '…'``."""
        return f"store file '{self.path}'"

    @property
    def thread_name(self) -> str:
        """The worker thread's name."""
        return f"broker-sqlite-writer:{os.path.basename(self.path)}"

    @property
    def reported_synchronous(self) -> str | None:
        """``PRAGMA synchronous`` as the writer's own connection reported it when it was opened
        (``"FULL"``, ``"NORMAL"``, …), read back rather than assumed; None before :meth:`open`."""
        return self._reported

    @property
    def io_errors(self) -> tuple[type[Exception], ...]:
        """``sqlite3.Error``: a full disk, an I/O error."""
        return (sqlite3.Error,)

    @property
    def lease_ttl(self) -> None:
        """None: one writer per file (its lock), no leases."""
        return None

    def open(self) -> dict[str, SessionHead]:
        """Check the path, take the lock, connect, load every head, prepare the group write."""
        check_writer_path(self.path)
        self._lock.acquire()
        try:
            conn = connect_writer(self.path, self.synchronous)
        except BaseException:
            self._lock.release()
            raise
        self._conn = conn  # closed by the writer's release (close) if anything below raises
        # Read back, never assumed: what this connection, the one every commit goes through,
        # says it does. Once, at open; never on the append path.
        self._reported = read_synchronous(conn)
        if weaker_than(self._reported, self.synchronous):
            raise StoreOpenError(
                f"cannot open store file '{self.path}': the writer's connection reports "
                f"synchronous={self._reported} after synchronous={self.synchronous} was set, "
                "so an acknowledged append could be lost; use an sqlite build whose "
                "PRAGMA synchronous is not overridden (compile options, a custom vfs)"
            )
        try:
            heads = load_heads(conn, self.path)
        except sqlite3.Error as exc:
            raise StoreOpenError(
                f"cannot open store file '{self.path}': sqlite says {str(exc)!r}"
            ) from exc
        self._one_statement = install_group_write(conn)
        return heads

    def prepare(self, plan: Plan) -> tuple[object, ...] | None:
        """The parameters of the one-statement write of *plan*, or None to write it statement
        by statement. Made on the trio thread: the worker then holds the GIL only briefly before
        SQLite releases it, so handing it a job costs the trio thread no more than a wake-up."""
        if self._one_statement and len(plan.rows) >= _ONE_STATEMENT_MIN_ROWS and nul_free(plan):
            return group_parameters(plan)
        return None

    def write(self, plan: Plan, prepared: object) -> Mapping[str, StoreError]:
        """Write *plan* as one transaction (see :func:`._jobs.write_group`); the file's lock
        makes this process the owner of every session: none is ever fenced."""
        conn = self._require_conn()
        parameters = prepared if isinstance(prepared, tuple) else None
        base = self._next_id
        if base is None:
            base = next_row_id(conn)
        # Unknown until it is read again, should this write fail (its COMMIT may have landed).
        self._next_id = None
        try:
            write_group(conn, plan, parameters, base)
        except ConnectionLost:
            self._conn = None  # write_group closed it
            raise
        self._next_id = base + len(plan.rows)
        return _NONE_FENCED

    def claim(self, session_id: str, known: SessionHead | None) -> SessionHead | None:
        """*known*: every head was loaded, and recovery ran, at open (the lock is the file's)."""
        return known

    def release(self, session_ids: Sequence[str]) -> None:
        """Nothing: the lock is the file's, not the session's."""

    def renew(self) -> dict[str, StoreError]:
        """Nothing to renew: no leases."""
        return {}

    def write_error(self, exc: Exception) -> StoreError:
        """A full disk or an I/O error, with the fix."""
        return StoreError(
            f"write to store file '{self.path}' failed: sqlite says {str(exc)!r}; "
            "nothing of this append was stored — free disk space or fix the file, then retry"
        )

    def reread_heads(self, known: dict[str, SessionHead | None]) -> dict[str, SessionHead]:
        """The committed heads of *known*'s sessions."""
        return reread_heads(self._require_conn(), self.path, known)

    def read_sessions(self, session_ids: Sequence[str]) -> list[list[Event] | StoreError]:
        """Each session's events in order."""
        return read_sessions(self._require_conn(), self.path, session_ids)

    def read_records(self, session_ids: Sequence[str]) -> list[SessionRecord | None]:
        """Each session's record, None for one the file does not hold."""
        conn = self._require_conn()
        records: list[SessionRecord | None] = []
        for session_id in session_ids:
            row = conn.execute(
                "SELECT parent_id FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            records.append(
                None if row is None else SessionRecord(session_id=session_id, parent_id=row[0])
            )
        return records

    def pending_in_log_order(self, wanted: dict[str, frozenset[str]]) -> dict[str, list[str]]:
        """Each session's pending asks, in the order they were asked."""
        conn = self._require_conn()
        return {
            session_id: pending_in_log_order(conn, session_id, pending)
            for session_id, pending in wanted.items()
        }

    def close(self) -> None:
        """Close the connection, then drop the lock (idempotent)."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                conn.close()
        finally:
            self._lock.release()

    def _require_conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ConnectionLost(f"the connection to '{self.path}' was closed after an error")
        return self._conn
