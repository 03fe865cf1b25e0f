"""Rebuilding a writer's per-session heads from checkpoint + tail (blocking, on the writer thread).

Reopening costs one checkpoint decode plus a fold of the events after it per session, so it
grows with the number of sessions (and ``checkpoint_every``), not with the length of the logs.
The hash chain is *not* re-verified here (that is O(events)); ``broker log verify`` does it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from .._codec import EventDecodeError, decode_event
from .._projection import ApprovalState, fold
from ._checkpoint import PROJECTION_FINGERPRINT, CheckpointDecodeError, decode_state
from ._sqlite_schema import StoreOpenError

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SessionHead", "load_heads", "load_session", "pending_in_log_order"]

log = logging.getLogger("broker.store")


@attrs.frozen(kw_only=True)
class SessionHead:
    """A writer's view of one session: chain head, folded state, last checkpoint seq.

    Invariant: ``state.events == seq`` (one fold per stored row).
    """

    seq: int
    hash: bytes
    state: ApprovalState
    checkpoint_seq: int


def _damaged(path: str, session_id: str, what: str) -> StoreOpenError:
    return StoreOpenError(
        f"store file '{path}' is damaged: session {session_id!r} {what}; run "
        f"'broker log verify {path}' to locate the damage and restore the file from a backup"
    )


def load_session(
    conn: sqlite3.Connection,
    path: str,
    session_id: str,
    head_seq: int,
    head_hash: bytes,
    checkpoint: tuple[int, str] | None,
) -> SessionHead:
    """Fold *session_id* from its checkpoint (``(seq, state json)`` or None) and its tail."""
    state = ApprovalState()
    checkpoint_seq = 0
    if checkpoint is not None:
        checkpoint_seq, text = checkpoint
        problem: str | None = None
        try:
            state = decode_state(text)
        except CheckpointDecodeError as exc:
            problem = f"is unreadable ({exc})"
        else:
            if state.events != checkpoint_seq or checkpoint_seq > head_seq:
                problem = (
                    f"does not fit its log (folds {state.events} events, head is seq {head_seq})"
                )
        if problem is not None:
            # The events are authoritative and the checkpoint only a cache: rebuild from them.
            log.warning(
                "store file '%s': session %r: the checkpoint at seq %d %s; rebuilding the "
                "session's projection from its events",
                path,
                session_id,
                checkpoint_seq,
                problem,
            )
            state, checkpoint_seq = ApprovalState(), 0
    last_seq, last_hash = checkpoint_seq, None
    rows = conn.execute(
        "SELECT seq, line, hash FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
        (session_id, checkpoint_seq),
    )
    for seq, line, digest in rows:
        if seq != last_seq + 1:
            raise _damaged(path, session_id, f"has seq {seq} after seq {last_seq}")
        try:
            state = fold(state, decode_event(line))
        except EventDecodeError as exc:
            raise _damaged(path, session_id, f"seq {seq} is not a valid event ({exc})") from exc
        last_seq, last_hash = seq, digest
    if last_seq != head_seq or (last_hash is not None and last_hash != head_hash):
        raise _damaged(
            path, session_id, f"ends at seq {last_seq} but its recorded head is seq {head_seq}"
        )
    return SessionHead(seq=head_seq, hash=head_hash, state=state, checkpoint_seq=checkpoint_seq)


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
    rows = conn.execute(
        "SELECT json_extract(line, '$.data.id') FROM events WHERE session_id = ? "
        "AND json_extract(line, '$.type') = 'approval/asked' ORDER BY seq",
        (session_id,),
    )
    ordered = list(dict.fromkeys(ask_id for (ask_id,) in rows if ask_id in pending))
    return ordered + sorted(pending - set(ordered))
