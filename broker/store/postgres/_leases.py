"""Session leases in a PostgreSQL store: which broker process writes which session.

Several broker processes (standing in for hosts) share one database. Each session row carries
a lease — ``owner`` (this process's :func:`owner_id`), ``epoch`` and ``lease_expires_ms`` (the
server's clock, so hosts need not agree on the time). The owner renews it every third of its
ttl; another process takes a session only once its lease has expired, with ``epoch + 1``
(:func:`claim`). Every group a writer commits checks, in the same transaction, that it still
holds each session it writes at the epoch it took (the fence in :mod:`._jobs`): a former owner
that was paused or cut off past its lease cannot land an event after the takeover.

:class:`Leases` is the writer's record of the sessions it owns and their epochs. Every function
here runs on the writer's worker thread (it owns the connection and the record).
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
from typing import TYPE_CHECKING

import attrs
import psycopg
from psycopg import sql

from .._checkpoint import PROJECTION_FINGERPRINT
from .._protocol import SessionFencedError, SessionOwnedError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from psycopg import Connection

    from .._heads import SessionHead

    Conn = Connection[tuple[object, ...]]

__all__ = ["CLAIM_LOCK_WAIT", "NOW_MS", "Leases", "owner_id"]

#: How long a claim waits for a row its former owner's open transaction holds.
CLAIM_LOCK_WAIT = "250ms"
#: The server's clock in milliseconds: every lease time is the server's, never a host's.
NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::int8"


def owner_id() -> str:
    """This process's owner id: ``pid@host#random`` (the random part tells apart two processes
    that reuse a pid, e.g. in two containers with one hostname)."""
    host = socket.gethostname()[:40] or "localhost"
    return f"{os.getpid()}@{host}#{secrets.token_hex(4)}"


@attrs.define(eq=False)
class Leases:
    """The sessions this writer owns, at which epoch, and the SQL that takes, renews and gives
    them back. Invariant: touched only on the writer's worker thread."""

    schema: str
    where: str
    ttl_ms: int
    owner: str = attrs.field(factory=owner_id)
    #: session id → the epoch this process holds it at (committed).
    epochs: dict[str, int] = attrs.field(factory=dict)
    #: session id → the epoch this process held it at when it found it taken over.
    lost: dict[str, int] = attrs.field(factory=dict)

    def _table(self, name: str) -> sql.Composed:
        return sql.SQL("{s}.{t}").format(s=sql.Identifier(self.schema), t=sql.Identifier(name))

    def drop(self, session_id: str) -> None:
        """*session_id* was found taken over: this process no longer holds it."""
        epoch = self.epochs.pop(session_id, None)
        if epoch is not None:
            self.lost[session_id] = epoch

    def fenced_error(self, session_id: str) -> SessionFencedError:
        """The error of a write to *session_id*, which this process does not own (now)."""
        epoch = self.epochs.get(session_id, self.lost.get(session_id))
        if epoch is None:
            return SessionFencedError(
                f"session {session_id!r} in {self.where} is not owned by this process: resume "
                "it (open_session(resume=...)) before writing to it; nothing of this append "
                "was stored"
            )
        return SessionFencedError(
            f"session {session_id!r} in {self.where} was taken over by another broker process "
            f"(this one held it at epoch {epoch}): nothing of this append was stored, and this "
            "process must not write it again"
        )

    def lost_all(self, silent_for: float) -> dict[str, StoreError]:
        """Every session this process held, fenced: its connection is gone after *silent_for*
        seconds without a renewal (a ttl or more), so its leases may have been taken."""
        lost: dict[str, StoreError] = {
            session_id: SessionFencedError(
                f"session {session_id!r} in {self.where} may have been taken over: this "
                f"process lost its connection to the store after renewing no lease for "
                f"{silent_for:.1f}s (it was paused or cut off, past its lease of "
                f"{self.ttl_ms / 1000:g}s); nothing of this append was stored, and this "
                "process must not write it again"
            )
            for session_id in self.epochs
        }
        self.epochs.clear()
        return lost

    def claim(
        self,
        conn: Conn,
        session_id: str,
        load: Callable[[int, bytes, tuple[int, str] | None], SessionHead],
    ) -> SessionHead | None:
        """Take *session_id* (its lease has expired, it has none, or this process holds it) at
        epoch + 1 and return its head, folded by *load* from ``(head_seq, head_hash,
        checkpoint)`` in the same transaction (after any group its former owner committed).
        None when the store does not hold it; :class:`SessionOwnedError` while another process
        holds a live lease, or while its former owner's last write is still open (a writer
        paused inside a transaction holds the row until the server ends that transaction, a
        ttl later): the claim waits at most :data:`CLAIM_LOCK_WAIT` for it, so the writer that
        claims is not held up. Nothing is changed when it raises."""
        try:
            conn.execute(f"SET LOCAL lock_timeout = '{CLAIM_LOCK_WAIT}'")
            try:
                row = self._take(conn, session_id)
            except psycopg.errors.LockNotAvailable:
                conn.rollback()
                raise SessionOwnedError(
                    f"session {session_id!r} in {self.where} is held by an open transaction of "
                    "its former owner (a writer paused inside a write?): resume it again in a "
                    "moment — the server ends such a transaction once it has idled for its "
                    "owner's lease ttl"
                ) from None
            if row is None:
                self._refuse(conn, session_id)
                conn.rollback()
                return None
            epoch, head_seq, head_hash = int(row[0]), int(row[1]), bytes(row[2])  # type: ignore[call-overload]
            checkpoint = conn.execute(
                sql.SQL(
                    "SELECT seq, state FROM {t} WHERE session_id = %s AND projection = %s"
                ).format(t=self._table("checkpoints")),
                (session_id, PROJECTION_FINGERPRINT),
            ).fetchone()
            head = load(
                head_seq,
                head_hash,
                None if checkpoint is None else (int(checkpoint[0]), str(checkpoint[1])),  # type: ignore[call-overload]
            )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        self.epochs[session_id] = epoch
        self.lost.pop(session_id, None)
        return head

    def _take(self, conn: Conn, session_id: str) -> tuple[object, ...] | None:
        """The lease taken (``(epoch, head_seq, head_hash)``), or None when it is live or the
        session does not exist."""
        return conn.execute(
            sql.SQL(
                "UPDATE {t} SET owner = %s, epoch = epoch + 1, "
                "lease_expires_ms = " + NOW_MS + " + %s "
                "WHERE id = %s AND (owner IS NULL OR owner = %s OR lease_expires_ms <= "
                + NOW_MS
                + ") RETURNING epoch, head_seq, head_hash"
            ).format(t=self._table("sessions")),
            (self.owner, self.ttl_ms, session_id, self.owner),
        ).fetchone()

    def _refuse(self, conn: Conn, session_id: str) -> None:
        """Raise :class:`SessionOwnedError` if *session_id* exists (its lease is live)."""
        row = conn.execute(
            sql.SQL(
                "SELECT owner, epoch, lease_expires_ms, " + NOW_MS + " FROM {t} WHERE id = %s"
            ).format(t=self._table("sessions")),
            (session_id,),
        ).fetchone()
        if row is None:
            return
        owner, epoch, expires_ms, now_ms = row
        conn.rollback()
        expires = datetime.datetime.fromtimestamp(int(expires_ms) / 1000, tz=datetime.UTC)  # type: ignore[call-overload]
        left = (int(expires_ms) - int(now_ms)) / 1000  # type: ignore[call-overload]
        raise SessionOwnedError(
            f"session {session_id!r} in {self.where} is owned by {owner} (epoch {epoch}) until "
            f"its lease expires at {expires.isoformat(timespec='milliseconds')} (in {left:.1f}s): "
            "resume it after that, or close it in the process that owns it"
        )

    def release(self, conn: Conn, session_ids: Collection[str] | None = None) -> None:
        """Give back the leases of *session_ids* this process still holds (None: every lease
        it holds, at close), in one statement: the next claim of each takes it at once, with
        the next epoch. A failure leaves them to expire."""
        held = self.epochs
        ids = list(held) if session_ids is None else [i for i in session_ids if i in held]
        if not ids:
            return
        epochs = [self.epochs.pop(i) for i in ids]
        try:
            conn.execute(
                sql.SQL(
                    "UPDATE {t} AS t SET owner = NULL, lease_expires_ms = 0 "
                    "FROM unnest(%s::text[], %s::int8[]) AS v(id, epoch) "
                    "WHERE t.id = v.id AND t.owner = %s AND t.epoch = v.epoch"
                ).format(t=self._table("sessions")),
                (ids, epochs, self.owner),
            )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    def renew(self, conn: Conn) -> dict[str, SessionFencedError]:
        """Renew every lease this process holds; the sessions found taken over are dropped from
        :attr:`epochs` and returned with their error."""
        if not self.epochs:
            return {}
        ids = list(self.epochs)
        try:
            kept = {
                str(session_id)
                for (session_id,) in conn.execute(
                    sql.SQL(
                        "UPDATE {t} AS t SET lease_expires_ms = " + NOW_MS + " + %s "
                        "FROM unnest(%s::text[], %s::int8[]) AS v(id, epoch) "
                        "WHERE t.id = v.id AND t.owner = %s AND t.epoch = v.epoch RETURNING t.id"
                    ).format(t=self._table("sessions")),
                    (self.ttl_ms, ids, [self.epochs[i] for i in ids], self.owner),
                )
            }
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        lost = {
            session_id: self.fenced_error(session_id)
            for session_id in ids
            if session_id not in kept
        }
        for session_id in lost:
            self.drop(session_id)
        return lost
