"""What PostgreSQL adds to the store-neutral group-commit writer: its connection and SQL.

:class:`PostgresBackend` is the :class:`~broker.store._backend.Backend` of a PostgreSQL store.
The writer (:mod:`broker.store._writer`) calls its blocking methods on its one worker thread,
which owns the psycopg connection (decision 0017: a thread, not psycopg's async API, which
needs asyncio). libpq releases the GIL while it waits on the server, so the trio thread stages
the next group meanwhile, as with SQLite.

One broker process writes a store at a time (until leases, issue 22 step 4): the writer's
connection holds a session-level advisory lock for the schema, dropped by the server when the
connection ends, so a crashed writer never leaves it behind.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import psycopg

from .._backend import ConnectionLost
from .._chain import GENESIS
from .._protocol import SessionRecord, StoreError, StoreLockedError
from .._url import redact_dsn
from ._jobs import (
    GroupArrays,
    Statements,
    group_arrays,
    load_heads,
    pending_in_log_order,
    read_records,
    read_sessions,
    reread_heads,
    write_group,
)
from ._schema import connect, prepare_schema

if TYPE_CHECKING:
    from psycopg import Connection

    from ..._events import Event
    from .._heads import SessionHead
    from .._plan import Plan

__all__ = ["PostgresBackend"]


@attrs.define(eq=False)
class PostgresBackend:
    """One store (a schema of a database): its connection, on the writer's thread."""

    dsn: str
    schema: str
    _statements: Statements = attrs.field(init=False)
    # Invariant: _conn is only touched on the writer's worker thread.
    _conn: Connection[tuple[object, ...]] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._statements = Statements.of(self.schema)

    @property
    def location(self) -> str:
        """The URL without its password (and the schema, when not the default)."""
        shown = redact_dsn(self.dsn)
        return shown if self.schema == "broker" else f"{shown} schema {self.schema}"

    @property
    def label(self) -> str:
        """``postgresql store '…'``."""
        return f"postgresql store '{self.location}'"

    @property
    def where(self) -> str:
        """``postgresql store '…'`` (the data lives in the database)."""
        return self.label

    @property
    def thread_name(self) -> str:
        """The worker thread's name."""
        database = urllib.parse.urlsplit(self.dsn).path.lstrip("/") or "postgres"
        return f"broker-postgres-writer:{database}"

    @property
    def io_errors(self) -> tuple[type[Exception], ...]:
        """``psycopg.Error``: a failed statement, a lost connection."""
        return (psycopg.Error,)

    def open(self) -> dict[str, SessionHead]:
        """Connect, take the writer lock, check (or create) the schema, load every head."""
        conn = connect(self.dsn)
        self._conn = conn
        # Closed by the writer's release (close) if anything below raises.
        self._lock(conn)
        prepare_schema(conn, self.where, self.schema)
        return load_heads(conn, self._statements, self.where)

    def _lock(self, conn: Connection[tuple[object, ...]]) -> None:
        key = f"broker-writer:{self.schema}"
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
        conn.commit()
        if row is None or row[0] is not True:
            raise StoreLockedError(
                f"{self.label} is locked by another writer (advisory lock {key!r}): close the "
                "other broker process, or wait for it to end"
            )

    def prepare(self, plan: Plan) -> GroupArrays:
        """*plan*'s columns as arrays (on the trio thread: the worker only sends them)."""
        return group_arrays(plan)

    def write(self, plan: Plan, prepared: object) -> None:
        """Write *plan* as one transaction (see :func:`._jobs.write_group`)."""
        conn = self._require_conn()
        arrays = prepared if isinstance(prepared, GroupArrays) else group_arrays(plan)
        try:
            write_group(conn, self._statements, plan, arrays, GENESIS)
        except ConnectionLost:
            self._conn = None  # write_group closed it
            raise

    def write_error(self, exc: Exception) -> StoreError:
        """A failed statement or a lost connection, with the fix."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(
            f"write to {self.where} failed: postgresql says {text!r}; nothing of this append "
            "was stored — check the server and the connection, then retry"
        )

    def reread_heads(self, known: dict[str, SessionHead | None]) -> dict[str, SessionHead]:
        """The committed heads of *known*'s sessions."""
        return reread_heads(self._require_conn(), self._statements, self.where, known)

    def read_sessions(self, session_ids: Sequence[str]) -> list[list[Event] | StoreError]:
        """Each session's events in order."""
        return read_sessions(self._require_conn(), self._statements, self.where, session_ids)

    def pending_in_log_order(self, wanted: dict[str, frozenset[str]]) -> dict[str, list[str]]:
        """Each session's pending asks, in the order they were asked."""
        return pending_in_log_order(self._require_conn(), self._statements, wanted)

    def read_records(self, session_ids: Sequence[str]) -> list[SessionRecord | None]:
        """Each session's record, None for one the store does not hold."""
        return read_records(self._require_conn(), self._statements, session_ids)

    def close(self) -> None:
        """Close the connection (the server drops the advisory lock with it; idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _require_conn(self) -> Connection[tuple[object, ...]]:
        if self._conn is None:
            raise ConnectionLost(f"the connection to {self.label} was closed after an error")
        return self._conn
