"""What PostgreSQL adds to the store-neutral group-commit writer: its connection and SQL.

:class:`PostgresBackend` is the :class:`~broker.store._backend.Backend` of a PostgreSQL store.
The writer (:mod:`broker.store._writer`) calls its blocking methods on its one worker thread,
which owns the psycopg connection (decision 0017: a thread, not psycopg's async API, which
needs asyncio). libpq releases the GIL while it waits on the server, so the trio thread stages
the next group meanwhile, as with SQLite.

Many broker processes write one store; each session has one writer at a time, the holder of
its lease (:mod:`._leases`): nothing is loaded or recovered at open, a session's head is loaded
(and its crash tail closed) when this process creates or claims it, and every group checks in
its own transaction that this process still holds each session it writes.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import psycopg
from psycopg.types.numeric import Int8BinaryDumper

from .._backend import ConnectionLost, LeasesLost
from .._chain import GENESIS
from .._protocol import SessionRecord, StoreError, StoreLockedError, StoreOpenError
from .._url import redact_dsn
from . import _binary as binary
from ._jobs import (
    GroupArrays,
    Statements,
    group_arrays,
    load_session,
    pending_in_log_order,
    read_records,
    read_sessions,
    reread_heads,
    write_group,
)
from ._leases import Leases
from ._schema import ServerDurability, connect, prepare_schema, read_durability

if TYPE_CHECKING:
    from collections.abc import Mapping

    from psycopg import Connection

    from ..._events import Event
    from .._heads import SessionHead
    from .._plan import Plan

__all__ = ["RECONNECT_DELAYS", "PostgresBackend"]

log = logging.getLogger("broker.store")

#: The pauses before each attempt to connect again after the connection was lost (seconds).
RECONNECT_DELAYS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)


@attrs.define(eq=False)
class PostgresBackend:
    """One store (a schema of a database): its connection, on the writer's thread."""

    dsn: str
    schema: str
    #: Seconds a session's lease lasts without renewal.
    ttl: float = 10.0
    _statements: Statements = attrs.field(init=False)
    # Invariant: _conn and _leases are only touched on the writer's worker thread.
    _conn: Connection[tuple[object, ...]] | None = attrs.field(default=None, init=False)
    _leases: Leases = attrs.field(init=False)
    # When every lease this process holds was last renewed (time.monotonic(), which runs on
    # while the process is stopped).
    _renewed_at: float = attrs.field(factory=time.monotonic, init=False)
    # Opened and not closed: a lost connection is made again (_reconnect).
    _live: bool = attrs.field(default=False, init=False)
    # What the server said at the last connect (_check_durability); warned about at most once.
    _durability: ServerDurability | None = attrs.field(default=None, init=False)
    _warned: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._statements = Statements.of(self.schema)
        self._leases = Leases(
            schema=self.schema, where=self.where, ttl_ms=max(1, round(self.ttl * 1000))
        )

    @property
    def owner(self) -> str:
        """This process's owner id in the leases it takes (``pid@host#random``)."""
        return self._leases.owner

    @property
    def durability(self) -> ServerDurability | None:
        """``synchronous_commit`` and ``fsync`` as the server reported them on the writer's
        connection when it last connected (read back, never assumed); None before
        :meth:`open`."""
        return self._durability

    @property
    def lease_ttl(self) -> float:
        """Seconds a session's lease lasts without renewal."""
        return self.ttl

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
        """Connect, check (or create, or migrate) the schema, prepare the connection; no head
        is loaded (a session's is, when it is created or claimed)."""
        conn = connect(self.dsn)
        self._conn = conn
        # Closed by the writer's release (close) if anything below raises.
        self._lock(conn)
        prepare_schema(conn, self.where, self.schema)
        self._prepare(conn)
        self._check_durability(conn)
        self._renewed_at = time.monotonic()
        self._live = True
        return {}

    def _prepare(self, conn: Connection[tuple[object, ...]]) -> None:
        # A writer paused inside a transaction (SIGSTOP) would hold its sessions' rows: the
        # server ends such a transaction once it has idled for a lease's ttl.
        # The group's arrays are sent as UTF-8 text (._binary), whatever the database's encoding.
        conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false), "
            "set_config('application_name', %s, false), "
            "set_config('client_encoding', 'UTF8', false)",
            (str(self._leases.ttl_ms), f"broker {self.owner}"[:63]),
        )
        conn.commit()
        # Every int is sent as int8: a group's arrays keep one type (psycopg would pick int2,
        # int4 or int8 by value), so the group statement stays one prepared statement.
        conn.adapters.register_dumper(int, Int8BinaryDumper)
        binary.register(conn.adapters)

    def _check_durability(self, conn: Connection[tuple[object, ...]]) -> None:
        """Read what *conn*'s server does with a commit (once per connection, never per
        group) and warn, once per store, when it would acknowledge one it has not made
        durable."""
        self._durability = read_durability(conn)
        warning = self._durability.warning(self.label)
        if warning is not None and not self._warned:
            self._warned = True
            log.warning("%s", warning)

    def _reconnect(self) -> Connection[tuple[object, ...]]:
        """A new connection after the last one was lost, tried at most
        ``len(RECONNECT_DELAYS)`` times with growing pauses (blocking the worker thread ~1.5 s
        at most); raises ``psycopg.OperationalError`` if none answers, so that one job fails
        (its callers fail closed) and the next job tries again. The leases are this process's
        as before — the fence in each group says if one was taken meanwhile."""
        last: Exception | None = None
        for delay in RECONNECT_DELAYS:
            time.sleep(delay)
            try:
                conn = connect(self.dsn)
            except StoreOpenError as exc:
                last = exc
                continue
            try:
                self._lock(conn)
                self._prepare(conn)
                self._check_durability(conn)  # a new connection may reach another server
            except BaseException:
                conn.close()
                raise
            return conn
        raise psycopg.OperationalError(
            f"the connection to {self.label} was lost and {len(RECONNECT_DELAYS)} attempts "
            f"to connect again failed (the last: {last})"
        )

    def _lock(self, conn: Connection[tuple[object, ...]]) -> None:
        # Shared between brokers with leases; a broker of schema version 1 took this lock
        # exclusively (one writer per store): the two never write one store at once.
        key = f"broker-writer:{self.schema}"
        row = conn.execute("SELECT pg_try_advisory_lock_shared(hashtext(%s))", (key,)).fetchone()
        conn.commit()
        if row is None or row[0] is not True:
            raise StoreLockedError(
                f"{self.label} is locked by a broker that writes it alone (advisory lock "
                f"{key!r}, an older broker): stop that process, or upgrade it"
            )

    def claim(self, session_id: str, known: SessionHead | None) -> SessionHead | None:
        """Take *session_id*'s lease (epoch + 1) and load its head (see :meth:`Leases.claim`)."""
        conn = self._require_conn()

        def load(
            head_seq: int, head_hash: bytes, checkpoint: tuple[int, str] | None
        ) -> SessionHead:
            return load_session(
                conn, self._statements, self.where, session_id, head_seq, head_hash, checkpoint
            )

        return self._leases.claim(conn, session_id, load)

    def release(self, session_ids: Sequence[str]) -> None:
        """Give the leases of *session_ids* back, in one statement."""
        self._leases.release(self._require_conn(), session_ids)

    def renew(self) -> dict[str, StoreError]:
        """Renew every lease this process holds; return the sessions found taken over."""
        conn = self._require_conn()
        try:
            lost: dict[str, StoreError] = dict(self._leases.renew(conn))
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                conn.close()
                self._conn = None  # the next job connects again
                gone = self._lost(exc)
                if isinstance(gone, LeasesLost):
                    raise gone from exc
            raise
        self._renewed_at = time.monotonic()
        return lost

    def _lost(self, exc: Exception) -> ConnectionLost:
        """The connection is gone (*exc*): if no lease was renewed for a whole ttl, every
        session this process held may be another's now — fenced (:class:`LeasesLost`)."""
        silent = time.monotonic() - self._renewed_at
        if silent < self.ttl:
            return exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc))
        return LeasesLost(
            f"the connection was lost after {silent:.1f}s without a lease renewal: {exc}",
            self._leases.lost_all(silent),
        )

    def prepare(self, plan: Plan) -> GroupArrays:
        """*plan*'s columns as arrays (on the trio thread: the worker only sends them)."""
        return group_arrays(plan)

    def write(self, plan: Plan, prepared: object) -> Mapping[str, StoreError]:
        """Write *plan* as one transaction, fenced (see :func:`._jobs.write_group`)."""
        conn = self._require_conn()
        arrays = prepared if isinstance(prepared, GroupArrays) else group_arrays(plan)
        try:
            return write_group(conn, self._statements, plan, arrays, GENESIS, self._leases)
        except ConnectionLost as exc:
            self._conn = None  # write_group closed it; the next job connects again
            lost = self._lost(exc)
            if isinstance(lost, LeasesLost):
                raise lost from exc
            # Only this group failed (its COMMIT may have landed: the writer re-reads the
            # heads it touched, on a new connection).
            raise psycopg.OperationalError(f"the connection was lost: {exc}") from exc

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
        """Give back the leases this process holds, close the connection (the server drops
        the advisory lock with it; idempotent). Leases that cannot be given back expire."""
        self._live = False
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._leases.release(conn)
            except psycopg.Error:
                pass
            finally:
                conn.close()

    def _require_conn(self) -> Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:  # closed: lost during a group's write
            if not self._live:
                raise ConnectionLost(f"the connection to {self.label} was closed after an error")
            self._conn = self._reconnect()
        return self._conn
