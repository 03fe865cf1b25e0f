"""The blocking jobs a SQLite writer runs on its worker thread, against its one connection.

Each function takes the connection and runs on the writer's thread only (a ``sqlite3``
connection stays on the thread that made it); the writer actor
(:mod:`broker.store._writer`, through :class:`~broker.store.sqlite._backend.SqliteBackend`)
decides when, and what their results mean.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..._codec import EventDecodeError, decode_event
from .._backend import ConnectionLost
from .._checkpoint import PROJECTION_FINGERPRINT
from .._protocol import StoreError
from ._group import (
    AUTO_CREATE_SQL,
    CHECKPOINT_SQL,
    CREATE_SQL,
    GROUP_SQL,
    HEAD_SQL,
    INSERT_SQL,
)
from ._load import load_session
from ._walk import LINES_SQL

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..._events import Event
    from .._heads import SessionHead
    from .._plan import Plan

__all__ = ["next_row_id", "read_sessions", "reread_heads", "write_group"]


def next_row_id(conn: sqlite3.Connection) -> int:
    """The id the next event row gets: one past the largest (the writer assigns them)."""
    (next_id,) = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()
    return int(next_id)


def write_group(
    conn: sqlite3.Connection, plan: Plan, parameters: tuple[object, ...] | None, base: int
) -> None:
    """Write *plan* as ONE transaction, its rows taking the ids from *base* on: as the one
    statement of *parameters* when given (:func:`broker.store.sqlite._group.group_parameters`),
    else statement by statement. Any error rolls it back; a failed rollback closes *conn* and
    raises :class:`ConnectionLost`."""
    if parameters is not None and plan.fault is None:
        # Autocommit: the statement is the transaction; SQLite rolls it back if it fails.
        conn.execute(GROUP_SQL, (*parameters, base))
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if parameters is not None:
            conn.execute(GROUP_SQL, (*parameters, base))
        else:
            _write_statements(conn, plan, base)
        if plan.fault is not None and not plan.fault_landed:
            raise plan.fault
        conn.execute("COMMIT")
        if plan.fault is not None:
            raise plan.fault  # the test seam: reported as failed, yet committed
    except BaseException:
        _rollback(conn)
        raise


def _write_statements(conn: sqlite3.Connection, plan: Plan, base: int) -> None:
    """The group statement by statement (an SQLite without JSON functions, or NUL in an id)."""
    if plan.creates:
        conn.executemany(CREATE_SQL, plan.creates)
    if plan.auto_creates:
        conn.executemany(AUTO_CREATE_SQL, plan.auto_creates)
    last: dict[str, int | None] = {}  # each session's last row, in this group or before it
    rows = []
    for row_id, (session_id, seq, ts_ms, line, prev_hash, digest) in enumerate(plan.rows, base):
        if session_id in last:
            prev_row = last[session_id]
        else:
            found = conn.execute(
                "SELECT head_row FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            prev_row = None if found is None else found[0]
        rows.append((row_id, session_id, seq, ts_ms, line, prev_hash, digest, prev_row))
        last[session_id] = row_id
    if rows:
        conn.executemany(INSERT_SQL, rows)
    if plan.heads:
        conn.executemany(
            HEAD_SQL, [(seq, digest, last[sid], sid) for seq, digest, sid in plan.heads]
        )
    if plan.checkpoints:
        conn.executemany(CHECKPOINT_SQL, plan.checkpoints)


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some errors (SQLITE_FULL at COMMIT, for one).
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        conn.close()
        raise ConnectionLost(f"rollback failed: {exc}") from exc


def reread_heads(
    conn: sqlite3.Connection, path: str, known_heads: dict[str, SessionHead | None]
) -> dict[str, SessionHead]:
    """The committed heads of the sessions in *known_heads* (after a failed write: a COMMIT
    that raised may still have landed); a known head that still matches is kept as is."""
    fresh: dict[str, SessionHead] = {}
    conn.execute("BEGIN")
    try:
        for session_id, known in known_heads.items():
            row = conn.execute(
                "SELECT head_seq, head_hash FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                continue
            if known is not None and (known.seq, known.hash) == (row[0], row[1]):
                fresh[session_id] = known
                continue
            checkpoint = conn.execute(
                "SELECT seq, state FROM checkpoints WHERE session_id = ? AND projection = ?",
                (session_id, PROJECTION_FINGERPRINT),
            ).fetchone()
            fresh[session_id] = load_session(
                conn,
                path,
                session_id,
                row[0],
                row[1],
                None if checkpoint is None else (checkpoint[0], checkpoint[1]),
            )
    finally:
        conn.execute("COMMIT")
    return fresh


def read_sessions(
    conn: sqlite3.Connection, path: str, session_ids: Sequence[str]
) -> list[list[Event] | StoreError]:
    """Each session's events in order, or the :class:`StoreError` of a damaged line."""
    results: list[list[Event] | StoreError] = []
    for session_id in session_ids:
        events: list[Event] = []
        rows = conn.execute(LINES_SQL, (session_id,))
        try:
            for seq, line in rows:
                try:
                    events.append(decode_event(line))
                except EventDecodeError as exc:
                    raise StoreError(
                        f"store file '{path}' is damaged: session {session_id!r} seq "
                        f"{seq} is not a valid event ({exc}); run 'broker log verify'"
                    ) from exc
        except StoreError as exc:
            results.append(exc)
            continue
        results.append(events)
    return results
