"""Reading a SQLite store's per-session heads at open: checkpoint + tail, folded by the
store-neutral :func:`broker.store._heads.fold_session` (blocking, on the writer thread)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .._checkpoint import PROJECTION_FINGERPRINT
from .._heads import SessionHead, fold_session, order_pending
from .._protocol import StoreOpenError
from ._walk import ASKED_IDS_SQL, TAIL_SQL

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable

__all__ = ["load_heads", "load_session", "pending_in_log_order"]


def _damaged(path: str, session_id: str, what: str) -> StoreOpenError:
    return StoreOpenError(
        f"store file '{path}' is damaged: session {session_id!r} {what}; run "
        f"'broker log verify {path}' to locate the damage and restore the file from a backup"
    )


def _tail(
    conn: sqlite3.Connection, path: str, session_id: str, head_seq: int, after: int
) -> Iterable[tuple[int, str, bytes]]:
    """The rows after *after*, by the session's links. Should they not hold exactly the seqs up
    to *head_seq* (a file damaged behind the store's back), every row of the session by a
    scan: a gap or a bad row is then reported where it is, and rows that are whole but no
    longer linked are refused too (the writer's later reads walk the links)."""
    if after == head_seq:  # checkpointed at its head (a clean close): nothing to walk
        return []
    wanted = list(range(after + 1, head_seq + 1))
    rows: list[tuple[int, str, bytes]] = conn.execute(TAIL_SQL, (session_id, after)).fetchall()
    if [seq for seq, _, _ in rows] == wanted:
        return rows
    scanned: list[tuple[int, str, bytes]] = conn.execute(
        "SELECT seq, line, hash FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
        (session_id, after),
    ).fetchall()
    if [seq for seq, _, _ in scanned] == wanted:
        walked = f"ends at seq {rows[0][0]}" if rows else "finds no row"
        raise _damaged(
            path, session_id, f"has rows its links do not reach (from its head the walk {walked})"
        )
    return scanned


def load_session(
    conn: sqlite3.Connection,
    path: str,
    session_id: str,
    head_seq: int,
    head_hash: bytes,
    checkpoint: tuple[int, str] | None,
) -> SessionHead:
    """Fold *session_id* from its checkpoint (``(seq, state json)`` or None) and its tail."""
    return fold_session(
        f"store file '{path}'",
        session_id,
        head_seq,
        head_hash,
        checkpoint,
        functools.partial(_tail, conn, path, session_id, head_seq),
        functools.partial(_damaged, path),
    )


def load_heads(conn: sqlite3.Connection, path: str) -> dict[str, SessionHead]:
    """Every session's head, in creation order. Raises :class:`StoreOpenError` when damaged."""
    # Checkpoints of another projection version are ignored: those sessions fold from seq 1.
    checkpoints: dict[str, tuple[int, str]] = {
        session_id: (seq, text)
        for session_id, seq, text in conn.execute(
            "SELECT session_id, seq, state FROM checkpoints WHERE projection = ?",
            (PROJECTION_FINGERPRINT,),
        )
    }
    sessions = conn.execute(
        "SELECT id, head_seq, head_hash FROM sessions ORDER BY rowid"
    ).fetchall()
    return {
        session_id: load_session(
            conn, path, session_id, head_seq, head_hash, checkpoints.get(session_id)
        )
        for session_id, head_seq, head_hash in sessions
    }


def pending_in_log_order(
    conn: sqlite3.Connection, session_id: str, pending: frozenset[str]
) -> list[str]:
    """*pending* ask ids ordered by the seq of their ``approval/asked`` (unknown ones last)."""
    rows = conn.execute(ASKED_IDS_SQL, (session_id,))
    return order_pending((ask_id for (ask_id,) in rows), pending)
