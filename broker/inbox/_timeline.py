"""The session view: one session's log as ``broker log show STORE SESSION`` prints it — asked
and decided paired, with who answered — for the page.

Synopsis::

    log = session_log_of(board)            # None: this store has no reader here
    body = await log.view(session_id)      # JSON bytes of a SessionView

Only SQLite stores are read here (the store file the board lives in); the read runs on a worker
thread, one at a time per inbox (a burst of clicks queues, it does not open a reader each), and
the view holds the newest ``limit`` events of the session, with the total.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs
import trio

from .._display import printable
from ..stats import stats_page
from ..store import GrantRow, describe_entry, list_grants, show_session
from ..store.sqlite import SqliteBoard
from ._wire import SessionView, TimelineRow, dumps

if TYPE_CHECKING:
    from ..store import AnswerBoard, Timeline

__all__ = ["SessionLog", "session_log_of"]


def _view(timeline: Timeline, limit: int) -> SessionView:
    entries = timeline.entries[-limit:]
    return SessionView(
        session_id=printable(timeline.session.session_id),
        parent_id=None
        if timeline.session.parent_id is None
        else printable(timeline.session.parent_id),
        total=len(timeline.entries),
        rows=[
            TimelineRow(
                seq=entry.seq,
                ts_ms=entry.ts_ms,
                type=entry.event.TYPE,
                text=printable(describe_entry(entry)),
            )
            for entry in entries
        ],
    )


@attrs.define(eq=False)
class SessionLog:
    """The session views of the store *path* names (a file, or a ``postgresql://`` URL)."""

    path: str | os.PathLike[str]
    limit: int = 1000
    _limiter: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(1))

    async def view(self, session_id: str) -> bytes:
        """The view of *session_id* as JSON. Raises :class:`~broker.store.LogToolError` for an
        unknown session, :class:`~broker.store.StoreError` when the file cannot be read.
        Cancellation: waits for a read in progress (a short one), then stops."""
        timeline = await trio.to_thread.run_sync(
            show_session, self.path, session_id, limiter=self._limiter
        )
        return dumps(_view(timeline, self.limit))

    async def grants(self) -> list[GrantRow]:
        """Every grant the store's sessions hold or held (:func:`list_grants`). Raises
        :class:`~broker.store.StoreError` when the store cannot be read. Cancellation: waits
        for a read in progress, then stops."""
        return await trio.to_thread.run_sync(list_grants, self.path, limiter=self._limiter)

    async def stats_page(self) -> bytes:
        """What ``broker stats --html`` writes for this store (:mod:`broker.stats`). Raises
        :class:`~broker.store.StoreError` when the store cannot be read. Cancellation: waits
        for a read in progress, then stops."""
        return (await stats_page(self.path, limiter=self._limiter)).encode()


def session_log_of(board: AnswerBoard) -> SessionLog | None:
    """The session log beside *board*, where this inbox can read it: an SQLite store's file,
    or a PostgreSQL store in its default schema (a board in another schema has no view)."""
    if isinstance(board, SqliteBoard):
        return SessionLog(board.path)
    # Duck-typed: naming PostgresBoard here would import psycopg with the inbox.
    dsn, schema = getattr(board, "dsn", None), getattr(board, "schema", None)
    if isinstance(dsn, str) and schema == "broker":
        return SessionLog(dsn)
    return None
