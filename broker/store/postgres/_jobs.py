"""The blocking SQL a PostgreSQL writer runs on its worker thread, against its one connection.

Each function takes the connection and runs on the writer's thread only; the writer actor
(:mod:`broker.store._writer`, through :class:`~broker.store.postgres._backend.PostgresBackend`)
decides when, and what their results mean. A group is ONE transaction: its rows by ``COPY``
(measured ~4x faster per 256-row group than one ``INSERT … SELECT unnest(…)``: 1.3 against
5.5 ms here) into a temporary table of the connection, its creates by one multi-row statement,
then ONE statement that fences and writes (:attr:`Statements.fence`): it moves the heads of the
sessions this process still holds at its epoch — locking their rows — and, for those sessions
only, the rows and checkpoints; then COMMIT. A session the fence does not return was taken
over: nothing of it is written, the rest of the group is.

Why the rows go through a temporary table: a writer paused (SIGSTOP) in the middle of a
``COPY`` into ``events`` would hold uncommitted index entries that block its successor's first
append for as long as it stays paused (a ``COPY`` waiting for its client is not cancelled by a
timeout). Paused at a statement boundary instead, its transaction is idle, and the server ends
it after ``idle_in_transaction_session_timeout`` (the lease's ttl, set at open).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

import attrs
import psycopg
from psycopg import sql

from ..._codec import EventDecodeError, decode_event
from .._backend import ConnectionLost
from .._checkpoint import PROJECTION_FINGERPRINT
from .._heads import SessionHead, fold_session, order_pending
from .._protocol import SessionRecord, StoreError, StoreOpenError
from ._leases import NOW_MS

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from psycopg import Connection

    from ..._events import Event
    from .._plan import Plan
    from ._leases import Leases

    Conn = Connection[tuple[object, ...]]

__all__ = [
    "GroupArrays",
    "Statements",
    "group_arrays",
    "load_session",
    "pending_in_log_order",
    "read_records",
    "read_sessions",
    "reread_heads",
    "write_group",
]


@attrs.frozen
class Statements:
    """The SQL of one store schema, composed once."""

    creates: sql.Composed
    auto_creates: sql.Composed
    group_rows: sql.SQL
    copy_rows: sql.SQL
    fence: sql.Composed
    schema: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        s = sql.Identifier(schema)
        return cls(
            # ORDER BY n: sessions are numbered (ord) in the order they were created. A new
            # session is this process's at epoch 1; an existing one is changed only if it is.
            creates=sql.SQL(
                "INSERT INTO {s}.sessions AS t (id, parent_id, created_ms, head_seq, head_hash, "
                "owner, epoch, lease_expires_ms) "
                "SELECT id, parent, %s, 0, %s, %s, 1, " + NOW_MS + " + %s "
                "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS v(id, parent, n) "
                "ORDER BY n ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id "
                "WHERE t.owner = excluded.owner RETURNING id, epoch"
            ).format(s=s),
            auto_creates=sql.SQL(
                "INSERT INTO {s}.sessions (id, parent_id, created_ms, head_seq, head_hash, "
                "owner, epoch, lease_expires_ms) "
                "SELECT id, NULL, %s, 0, %s, %s, 1, " + NOW_MS + " + %s "
                "FROM unnest(%s::text[]) WITH ORDINALITY AS v(id, n) "
                "ORDER BY n ON CONFLICT (id) DO NOTHING RETURNING id, epoch"
            ).format(s=s),
            group_rows=sql.SQL(
                "CREATE TEMPORARY TABLE IF NOT EXISTS broker_group_rows (session_id text NOT "
                "NULL, seq bigint NOT NULL, ts_ms bigint NOT NULL, line text NOT NULL, "
                "prev_hash bytea NOT NULL, hash bytea NOT NULL) ON COMMIT DELETE ROWS"
            ),
            copy_rows=sql.SQL(
                "COPY pg_temp.broker_group_rows (session_id, seq, ts_ms, line, prev_hash, hash) "
                "FROM STDIN"
            ),
            # The fence: one statement, so a writer paused in it holds no lock past it.
            fence=sql.SQL(
                "WITH fence AS ("
                "UPDATE {s}.sessions AS t SET head_seq = coalesce(v.seq, t.head_seq), "
                "head_hash = coalesce(v.hash, t.head_hash) "
                "FROM unnest(%s::text[], %s::int8[], %s::int8[], %s::bytea[]) "
                "AS v(id, epoch, seq, hash) "
                "WHERE t.id = v.id AND t.owner = %s AND t.epoch = v.epoch RETURNING t.id"
                "), moved AS ("
                "INSERT INTO {s}.events (session_id, seq, ts_ms, line, prev_hash, hash) "
                "SELECT session_id, seq, ts_ms, line, prev_hash, hash "
                "FROM pg_temp.broker_group_rows WHERE session_id IN (SELECT id FROM fence)"
                "), kept AS ("
                "INSERT INTO {s}.checkpoints (session_id, seq, state, projection) "
                "SELECT * FROM unnest(%s::text[], %s::int8[], %s::text[], %s::text[]) "
                "AS c(id, seq, state, projection) WHERE c.id IN (SELECT id FROM fence) "
                "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, "
                "state = excluded.state, projection = excluded.projection"
                ") SELECT id FROM fence"
            ).format(s=s),
            schema=schema,
        )

    def table(self, name: str) -> sql.Composed:
        return sql.SQL("{s}.{t}").format(s=sql.Identifier(self.schema), t=sql.Identifier(name))


@attrs.frozen
class GroupArrays:
    """A plan's columns as arrays, made on the trio thread (the worker only sends them)."""

    creates: tuple[list[str], list[str | None]] | None
    auto_creates: list[str] | None
    #: Every session the group writes (fenced), with its new head (None: unmoved).
    touched: tuple[list[str], list[int | None], list[bytes | None]]
    checkpoints: tuple[list[str], list[int], list[str], list[str]]


def group_arrays(plan: Plan) -> GroupArrays:
    """*plan* as column arrays (one create per session: the last one wins, as one by one)."""
    creates = None
    if plan.creates:
        parents = {session_id: parent for session_id, parent, _, _ in plan.creates}
        creates = (list(parents), list(parents.values()))
    moved: dict[str, tuple[int | None, bytes | None]] = {
        session_id: (None, None) for session_id, _, _, _ in (*plan.creates, *plan.auto_creates)
    }
    for seq, digest, session_id in plan.heads:
        moved[session_id] = (seq, digest)
    for checkpoint in plan.checkpoints:
        moved.setdefault(checkpoint[0], (None, None))
    checkpoints = (
        [c[0] for c in plan.checkpoints],
        [c[1] for c in plan.checkpoints],
        [c[2] for c in plan.checkpoints],
        [c[3] for c in plan.checkpoints],
    )
    return GroupArrays(
        creates=creates,
        auto_creates=[c[0] for c in plan.auto_creates] or None,
        touched=(list(moved), [m[0] for m in moved.values()], [m[1] for m in moved.values()]),
        checkpoints=checkpoints,
    )


def write_group(
    conn: Conn,
    statements: Statements,
    plan: Plan,
    arrays: GroupArrays,
    genesis: bytes,
    leases: Leases,
) -> dict[str, StoreError]:
    """Write *plan* as ONE transaction, durable (``synchronous_commit = on``) when this
    returns, except for the sessions this process no longer holds at the epoch *leases*
    records: those are returned, each with its error, and nothing of theirs is written. Any
    error rolls it back; a failed rollback closes *conn* and raises :class:`ConnectionLost`."""
    epochs = leases.epochs
    created: dict[str, int] = {}
    try:
        with conn.cursor() as cur:
            if plan.rows:
                with cur.copy(statements.copy_rows) as copy:
                    for row in plan.rows:
                        copy.write_row(row)
            ttl = leases.ttl_ms
            if arrays.creates is not None:
                cur.execute(
                    statements.creates, (plan.ts_ms, genesis, leases.owner, ttl, *arrays.creates)
                )
                created.update(cur.fetchall())  # type: ignore[arg-type]
            if arrays.auto_creates is not None:
                cur.execute(
                    statements.auto_creates,
                    (plan.ts_ms, genesis, leases.owner, ttl, arrays.auto_creates),
                )
                created.update(cur.fetchall())  # type: ignore[arg-type]
            ids, seqs, hashes = arrays.touched
            held = [created.get(i, epochs.get(i, -1)) for i in ids]
            cur.execute(
                statements.fence, (ids, held, seqs, hashes, leases.owner, *arrays.checkpoints)
            )
            kept = {str(session_id) for (session_id,) in cur.fetchall()}
        if plan.fault is not None and not plan.fault_landed:
            raise plan.fault
        conn.commit()
    except BaseException:
        _rollback(conn)
        raise
    epochs.update(created)
    fenced: dict[str, StoreError] = {}
    if len(kept) != len(ids):
        for session_id in ids:
            if session_id not in kept:
                fenced[session_id] = leases.fenced_error(session_id)
                leases.drop(session_id)
    if plan.fault is not None:
        raise plan.fault  # the test seam: reported as failed, yet committed
    return fenced


def _rollback(conn: Conn) -> None:
    try:
        conn.rollback()
    except psycopg.Error as exc:
        conn.close()
        raise ConnectionLost(f"rollback failed: {exc}") from exc


def _damaged(where: str, session_id: str, what: str) -> StoreOpenError:
    return StoreOpenError(
        f"{where} is damaged: session {session_id!r} {what}; restore the database from a backup"
    )


def _tail(
    conn: Conn, statements: Statements, session_id: str, after: int
) -> Iterable[tuple[int, str, bytes]]:
    rows = conn.execute(
        sql.SQL(
            "SELECT seq, line, hash FROM {t} WHERE session_id = %s AND seq > %s ORDER BY seq"
        ).format(t=statements.table("events")),
        (session_id, after),
    )
    return rows  # type: ignore[return-value]


def load_session(
    conn: Conn,
    statements: Statements,
    where: str,
    session_id: str,
    head_seq: int,
    head_hash: bytes,
    checkpoint: tuple[int, str] | None,
) -> SessionHead:
    """*session_id*'s head, folded from *checkpoint* and the rows after it (read in *conn*'s
    transaction). Raises :class:`StoreOpenError` when its rows do not end at *head_seq*."""
    return fold_session(
        where,
        session_id,
        head_seq,
        head_hash,
        checkpoint,
        functools.partial(_tail, conn, statements, session_id),
        functools.partial(_damaged, where),
    )


def reread_heads(
    conn: Conn, statements: Statements, where: str, known_heads: dict[str, SessionHead | None]
) -> dict[str, SessionHead]:
    """The committed heads of the sessions in *known_heads* (after a failed write: a COMMIT
    that raised may still have landed); a known head that still matches is kept as is."""
    fresh: dict[str, SessionHead] = {}
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for session_id, known in known_heads.items():
            row = conn.execute(
                sql.SQL("SELECT head_seq, head_hash FROM {t} WHERE id = %s").format(
                    t=statements.table("sessions")
                ),
                (session_id,),
            ).fetchone()
            if row is None:
                continue
            head_seq, head_hash = int(row[0]), bytes(row[1])  # type: ignore[call-overload]
            if known is not None and (known.seq, known.hash) == (head_seq, head_hash):
                fresh[session_id] = known
                continue
            checkpoint = conn.execute(
                sql.SQL(
                    "SELECT seq, state FROM {t} WHERE session_id = %s AND projection = %s"
                ).format(t=statements.table("checkpoints")),
                (session_id, PROJECTION_FINGERPRINT),
            ).fetchone()
            fresh[session_id] = load_session(
                conn,
                statements,
                where,
                session_id,
                head_seq,
                head_hash,
                None if checkpoint is None else (int(checkpoint[0]), str(checkpoint[1])),  # type: ignore[call-overload]
            )
    finally:
        conn.rollback()
    return fresh


def read_sessions(
    conn: Conn, statements: Statements, where: str, session_ids: Sequence[str]
) -> list[list[Event] | StoreError]:
    """Each session's events in order, or the :class:`StoreError` of a damaged line."""
    results: list[list[Event] | StoreError] = []
    try:
        for session_id in session_ids:
            events: list[Event] = []
            rows = conn.execute(
                sql.SQL("SELECT seq, line FROM {t} WHERE session_id = %s ORDER BY seq").format(
                    t=statements.table("events")
                ),
                (session_id,),
            ).fetchall()
            try:
                for seq, line in rows:
                    try:
                        events.append(decode_event(str(line)))
                    except EventDecodeError as exc:
                        raise StoreError(
                            f"{where} is damaged: session {session_id!r} seq {seq} is not a "
                            f"valid event ({exc}); restore the database from a backup"
                        ) from exc
            except StoreError as exc:
                results.append(exc)
                continue
            results.append(events)
    finally:
        conn.rollback()
    return results


def pending_in_log_order(
    conn: Conn, statements: Statements, wanted: dict[str, frozenset[str]]
) -> dict[str, list[str]]:
    """For each session of *wanted*, its pending ask ids in the order of their asks."""
    orders: dict[str, list[str]] = {}
    try:
        for session_id, pending in wanted.items():
            # Lines are canonical (encode_event): the type is their first key. Parsed here, not
            # as jsonb, which refuses the \u0000 escape a line may hold.
            rows = conn.execute(
                sql.SQL(
                    "SELECT line FROM {t} WHERE session_id = %s AND line LIKE %s ORDER BY seq"
                ).format(t=statements.table("events")),
                (session_id, '{"type":"approval/asked",%'),
            )
            asked = (json.loads(str(line))["data"]["id"] for (line,) in rows)
            orders[session_id] = order_pending(asked, pending)
    finally:
        conn.rollback()
    return orders


def read_records(
    conn: Conn, statements: Statements, session_ids: Sequence[str]
) -> list[SessionRecord | None]:
    """Each session's record (its parent id), None for one the store does not hold."""
    records: list[SessionRecord | None] = []
    try:
        for session_id in session_ids:
            row = conn.execute(
                sql.SQL("SELECT parent_id FROM {t} WHERE id = %s").format(
                    t=statements.table("sessions")
                ),
                (session_id,),
            ).fetchone()
            parent = None if row is None or row[0] is None else str(row[0])
            records.append(
                None if row is None else SessionRecord(session_id=session_id, parent_id=parent)
            )
    finally:
        conn.rollback()
    return records
