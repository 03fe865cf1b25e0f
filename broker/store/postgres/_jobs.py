"""The blocking SQL a PostgreSQL writer runs on its worker thread, against its one connection.

Each function takes the connection and runs on the writer's thread only; the writer actor
(:mod:`broker.store._writer`, through :class:`~broker.store.postgres._backend.PostgresBackend`)
decides when, and what their results mean.

A group is ONE transaction of ONE statement (:data:`GROUP_SQL`), sent in autocommit so that the
server commits it as soon as it has run: one round trip per group (it was five — ``BEGIN``,
``COPY`` into a temporary table in two, the fence, ``COMMIT`` — and one more per kind of
create). The statement creates the group's new sessions, fences (it moves the heads of the
sessions this process still holds at its epoch, locking their rows) and, for the sessions it
kept only, inserts the rows and checkpoints from arrays (``unnest`` of binary parameters). A
session it does not keep was taken over: nothing of it is written, the rest of the group is.
The server answers after its COMMIT, and the connection runs with ``synchronous_commit = on``.

A paused writer (SIGSTOP) holds no row a takeover needs: the server runs the statement only
once all of it has arrived, and commits it as soon as it has run — there is no idle
transaction to wait for (the temporary table the ``COPY`` went through existed for that). The
one exception: libpq sends the statement and the ``Sync`` that commits it in one write, and if
the socket took all but that ``Sync`` the moment the writer stopped, the statement holds its
rows until it goes on (a claim meanwhile fails with ``SessionOwnedError``, as for the old
fence's statement; nothing is written out of turn). The test seam's fault (``plan.fault``) runs
the same statement in an explicit transaction instead, so it can be rolled back in place of
COMMIT.
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
from ._binary import ByteaArray, Int8Array, TextArray, bytea_array, int8_array, text_array
from ._leases import NOW_MS

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from psycopg import Connection

    from ..._events import Event
    from .._plan import Plan
    from ._leases import Leases

    Row = tuple[object, ...]
    Conn = Connection[Row]

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


#: A group's write: ONE statement, committed on its own (:func:`_commit_alone`), so a group
#: costs one round trip to the server. Every session the group touches (``v``: the epoch this
#: process holds it at, -1 for none, and its new head, NULL when unmoved) is checked and
#: moved; the rows and checkpoints of the sessions kept (``kept``) are inserted from arrays.
#: Data-modifying CTEs all see the statement's snapshot and must not update one row twice, so
#: a session created here gets its head in its INSERT, and ``fence`` leaves the explicit
#: creates (``made``) alone.
GROUP_SQL = (
    "WITH v AS (SELECT * FROM unnest(%(ids)b::text[], %(epochs)b::int8[], %(seqs)b::int8[], "
    "%(hashes)b::bytea[]) AS v(id, epoch, seq, hash)), "
    # Explicit creates in creation order (ord): a new session is this process's at epoch 1;
    # an existing one is re-parented (and moved) only if this process owns it.
    "made AS (INSERT INTO {s}.sessions AS t (id, parent_id, created_ms, head_seq, head_hash, "
    "owner, epoch, lease_expires_ms) "
    "SELECT c.id, c.parent, %(ts)b, coalesce(v.seq, 0), coalesce(v.hash, %(genesis)b), "
    "%(owner)b, 1, " + NOW_MS + " + %(ttl)b "
    "FROM unnest(%(made)b::text[], %(parents)b::text[]) WITH ORDINALITY AS c(id, parent, n) "
    "LEFT JOIN v ON v.id = c.id ORDER BY c.n "
    "ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id, "
    "head_seq = coalesce((SELECT v.seq FROM v WHERE v.id = t.id), t.head_seq), "
    "head_hash = coalesce((SELECT v.hash FROM v WHERE v.id = t.id), t.head_hash) "
    "WHERE t.owner = excluded.owner RETURNING t.id, t.epoch), "
    # Sessions first written by an append: created unless they exist (then the fence decides,
    # as for any session). After `made` (the count reads it to the end first), so creation
    # order is creates, then these.
    "auto AS (INSERT INTO {s}.sessions (id, parent_id, created_ms, head_seq, head_hash, owner, "
    "epoch, lease_expires_ms) "
    "SELECT a.id, NULL, %(ts)b, coalesce(v.seq, 0), coalesce(v.hash, %(genesis)b), %(owner)b, "
    "1, " + NOW_MS + " + %(ttl)b "
    "FROM unnest(%(auto)b::text[]) WITH ORDINALITY AS a(id, n) LEFT JOIN v ON v.id = a.id "
    "WHERE (SELECT count(*) FROM made) >= 0 ORDER BY a.n "
    "ON CONFLICT (id) DO NOTHING RETURNING id, epoch), "
    # The fence: a session is moved only while this process holds it at the epoch it took.
    # The UPDATE locks the rows it keeps until COMMIT; one a takeover changed meanwhile is
    # re-read after that takeover commits, and dropped.
    "fence AS (UPDATE {s}.sessions AS t SET head_seq = coalesce(v.seq, t.head_seq), "
    "head_hash = coalesce(v.hash, t.head_hash) FROM v "
    "WHERE t.id = v.id AND t.owner = %(owner)b AND t.epoch = v.epoch "
    "AND v.id <> ALL(%(made)b::text[]) RETURNING t.id, t.epoch), "
    "kept AS (SELECT id, epoch FROM fence UNION ALL SELECT id, epoch FROM made "
    "UNION ALL SELECT id, epoch FROM auto), "
    "moved AS (INSERT INTO {s}.events (session_id, seq, ts_ms, line, prev_hash, hash) "
    "SELECT * FROM unnest(%(row_ids)b::text[], %(row_seqs)b::int8[], %(row_ts)b::int8[], "
    "%(row_lines)b::text[], %(row_prevs)b::bytea[], %(row_hashes)b::bytea[]) "
    "AS r(session_id, seq, ts_ms, line, prev_hash, hash) "
    "WHERE r.session_id IN (SELECT id FROM kept)), "
    "saved AS (INSERT INTO {s}.checkpoints (session_id, seq, state, projection) "
    "SELECT * FROM unnest(%(cp_ids)b::text[], %(cp_seqs)b::int8[], %(cp_states)b::text[], "
    "%(cp_projections)b::text[]) AS c(id, seq, state, projection) "
    "WHERE c.id IN (SELECT id FROM kept) "
    "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, "
    "projection = excluded.projection) "
    "SELECT id, epoch FROM kept"
)


@attrs.frozen
class Statements:
    """The SQL of one store schema, composed once (the group's as bytes: composing it again
    for every group cost ~26 us on the writer's thread)."""

    group: bytes
    schema: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        composed = sql.SQL(GROUP_SQL).format(s=sql.Identifier(schema))
        return cls(group=composed.as_bytes(None), schema=schema)

    def table(self, name: str) -> sql.Composed:
        return sql.SQL("{s}.{t}").format(s=sql.Identifier(self.schema), t=sql.Identifier(name))


@attrs.frozen
class GroupArrays:
    """A plan's columns as binary arrays (:mod:`._binary`), made on the trio thread: the worker
    only sends them."""

    #: Explicit creates (one per session: the last one's parent wins, as one by one).
    made: tuple[TextArray, TextArray]
    #: Sessions first written by an append, not also created explicitly.
    auto: TextArray
    #: Every session the group writes (fenced), with its new head (NULL: unmoved).
    touched: tuple[TextArray, Int8Array, ByteaArray]
    #: The rows' columns: session id, seq, ts_ms, line, prev_hash, hash.
    rows: tuple[TextArray, Int8Array, Int8Array, TextArray, ByteaArray, ByteaArray]
    checkpoints: tuple[TextArray, Int8Array, TextArray, TextArray]
    #: The sessions of ``touched``, in its order (their epochs are read on the worker thread).
    session_ids: list[str]


def group_arrays(plan: Plan) -> GroupArrays:
    """*plan* as column arrays."""
    parents = {session_id: parent for session_id, parent, _, _ in plan.creates}
    auto = [c[0] for c in plan.auto_creates if c[0] not in parents]
    moved: dict[str, tuple[int | None, bytes | None]] = dict.fromkeys(
        (*parents, *auto), (None, None)
    )
    for seq, digest, session_id in plan.heads:
        moved[session_id] = (seq, digest)
    for checkpoint in plan.checkpoints:
        moved.setdefault(checkpoint[0], (None, None))
    rows = plan.rows
    checkpoints = plan.checkpoints
    return GroupArrays(
        made=(text_array(list(parents)), text_array(list(parents.values()))),
        auto=text_array(auto),
        touched=(
            text_array(list(moved)),
            int8_array([m[0] for m in moved.values()]),
            bytea_array([m[1] for m in moved.values()]),
        ),
        rows=(
            text_array([r[0] for r in rows]),
            int8_array([r[1] for r in rows]),
            int8_array([r[2] for r in rows]),
            text_array([r[3] for r in rows]),
            bytea_array([r[4] for r in rows]),
            bytea_array([r[5] for r in rows]),
        ),
        checkpoints=(
            text_array([c[0] for c in checkpoints]),
            int8_array([c[1] for c in checkpoints]),
            text_array([c[2] for c in checkpoints]),
            text_array([c[3] for c in checkpoints]),
        ),
        session_ids=list(moved),
    )


def write_group(
    conn: Conn,
    statements: Statements,
    plan: Plan,
    arrays: GroupArrays,
    genesis: bytes,
    leases: Leases,
) -> dict[str, StoreError]:
    """Write *plan* as ONE transaction — one statement (:data:`GROUP_SQL`), one round trip —
    durable (``synchronous_commit = on``) when this returns, except for the sessions this
    process no longer holds at the epoch *leases* records: those are returned, each with its
    error, and nothing of theirs is written. Any error rolls it back; a failed rollback closes
    *conn* and raises :class:`ConnectionLost`."""
    epochs = leases.epochs
    ids, seqs, hashes = arrays.touched
    session_ids = arrays.session_ids
    row_ids, row_seqs, row_ts, row_lines, row_prevs, row_hashes = arrays.rows
    cp_ids, cp_seqs, cp_states, cp_projections = arrays.checkpoints
    params: dict[str, object] = {
        "ids": ids,
        "epochs": int8_array([epochs.get(session_id, -1) for session_id in session_ids]),
        "seqs": seqs,
        "hashes": hashes,
        "made": arrays.made[0],
        "parents": arrays.made[1],
        "auto": arrays.auto,
        "ts": plan.ts_ms,
        "genesis": genesis,
        "owner": leases.owner,
        "ttl": leases.ttl_ms,
        "row_ids": row_ids,
        "row_seqs": row_seqs,
        "row_ts": row_ts,
        "row_lines": row_lines,
        "row_prevs": row_prevs,
        "row_hashes": row_hashes,
        "cp_ids": cp_ids,
        "cp_seqs": cp_seqs,
        "cp_states": cp_states,
        "cp_projections": cp_projections,
    }
    try:
        if plan.fault is None:
            kept = _commit_alone(conn, statements.group, params)
        else:  # the test seam: the same statement in a transaction of its own
            kept = conn.execute(statements.group, params).fetchall()
            if not plan.fault_landed:
                raise plan.fault
            conn.commit()
    except BaseException:
        _rollback(conn)
        raise
    held: dict[str, int] = dict(kept)  # type: ignore[arg-type]
    epochs.update(held)
    fenced: dict[str, StoreError] = {}
    if len(held) != len(session_ids):
        for session_id in session_ids:
            if session_id not in held:
                fenced[session_id] = leases.fenced_error(session_id)
                leases.drop(session_id)
    if plan.fault is not None:
        raise plan.fault  # the test seam: reported as failed, yet committed
    return fenced


def _commit_alone(conn: Conn, statement: bytes, params: dict[str, object]) -> list[Row]:
    """*statement*'s rows, run as a transaction of its own: in autocommit the server commits
    it when it has run — no ``BEGIN``, no ``COMMIT`` round trip — and answers only after that
    COMMIT (``synchronous_commit = on`` is the connection's setting). The connection is back
    out of autocommit after; closed if it was lost on the way (the caller's rollback then
    raises :class:`ConnectionLost`)."""
    conn.autocommit = True
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.autocommit = False
        else:
            conn.close()


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
