"""The SQLite event store, the embedded default: one file, WAL, group commit, hash chains.

Synopsis::

    async with open_sqlite_store("broker.db") as store:     # locks, recovers, starts the writer
        if not store.recovery.clean:
            log.warning(store.recovery.summary())
        await store.create_session("s1", None)
        await store.append("s1", [TurnStart(turn=1)])       # returns once fsync'ed

Every call goes through one writer actor (:mod:`broker.store._writer`, the store-neutral group
commit), which groups the appends of all sessions that arrive while a transaction is being
written into the next one; :mod:`._backend` is what SQLite adds. For the read-only side
(``broker log``) see :mod:`broker.store.sqlite._reader`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs

from .._group_store import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_INBOX_SIZE,
    GroupStore,
    check_options,
    running,
)
from .._requests import wall_clock_ms
from .._writer import GroupWriter
from ._backend import SqliteBackend
from ._board import SqliteBoard

if TYPE_CHECKING:
    import sqlite3

    from ._schema import Synchronous

__all__ = ["SqliteStore", "open_sqlite_store"]

log = logging.getLogger("broker.store")


@attrs.define(eq=False)
class SqliteStore(GroupStore):
    """A durable :class:`~broker.store.EventStore` in one SQLite file; made by
    :func:`open_sqlite_store`, which owns its writer task.

    Appending to a session that was never created creates it (without a parent), like
    :class:`~broker.store.MemoryStore`; ``create_session`` on an existing one updates its parent.
    """

    @property
    def path(self) -> str:
        """The store file."""
        return self._backend().path

    @property
    def synchronous(self) -> str:
        """``PRAGMA synchronous`` as the writer's own connection — the one every commit goes
        through — reported it when the store was opened: ``"FULL"`` (the default) or
        ``"NORMAL"``, as asked. Read back on the writer's thread, not the value asked for; a
        connection that reports less than was asked fails the open."""
        reported = self._backend().reported_synchronous
        assert reported is not None  # the store is made after its backend opened
        return reported

    def answer_board(self) -> SqliteBoard:
        """The answer board in this store's file, shared with every process on it
        (:mod:`._board`)."""
        return SqliteBoard(path=self.path)

    def _backend(self) -> SqliteBackend:
        backend = self._writer.backend
        assert isinstance(backend, SqliteBackend)
        return backend

    def inject_commit_failure(self, error: sqlite3.Error, *, landed: bool = False) -> None:
        """Test seam: the next write transaction raises *error* in place of COMMIT and is rolled
        back, as with a full disk; its appends raise :class:`StoreError`. With *landed* it
        commits and then raises *error*, as an I/O error reported after the WAL frames were
        written would: the appends fail, yet their events are in the file.
        """
        self._writer.inject_commit_failure(error, landed=landed)


def _check_synchronous(synchronous: str) -> None:
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(
            f'synchronous must be "FULL" or "NORMAL", got {synchronous!r}: use "FULL" to '
            'survive power loss, "NORMAL" to survive process crashes only'
        )


@asynccontextmanager
async def open_sqlite_store(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "FULL",
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    inbox_size: int = DEFAULT_INBOX_SIZE,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> AsyncIterator[SqliteStore]:
    """Open (creating if new) the store file *path* for writing, for the ``async with`` block.

    Takes the writer lock (``<path>.lock``; a second writer gets :class:`StoreLockedError`),
    checks the file (a file that is not a broker store, or of a newer schema, raises
    :class:`StoreOpenError` without being changed), rebuilds each session's projection from its
    checkpoint and tail, then runs recovery (see :attr:`SqliteStore.recovery`).

    *synchronous*: ``"FULL"`` fsyncs every commit (an acknowledged append survives power loss);
    ``"NORMAL"`` only at WAL checkpoints (it survives a process crash, not an OS crash). The
    writer's connection is asked what it does once it is set (:attr:`SqliteStore.synchronous`,
    logged at INFO on ``broker.store``): less than asked raises :class:`StoreOpenError`.
    *checkpoint_every*: write a session's projection every N events and at close (0: never).
    *inbox_size*: the bound of the writer's inbox (callers wait for room beyond it) and of a
    commit group. *clock_ms*: the wall clock stored with each row (for tests).

    Cancellation: opening is not interruptible (one blocking job on the writer thread). On
    exit — also by cancellation or error — the store is closed as by :meth:`SqliteStore.aclose`.
    Errors: opening errors and the block's own exception are raised as themselves (the writer's
    nursery is a detail; see ``broker._collapse``).
    """
    _check_synchronous(synchronous)
    check_options(checkpoint_every, inbox_size)
    backend = SqliteBackend(path=os.fspath(path), synchronous=synchronous)
    writer = GroupWriter(
        backend=backend,
        checkpoint_every=checkpoint_every,
        inbox_size=inbox_size,
        clock_ms=clock_ms,
    )
    # Opened before the nursery exists, so an open error is raised as itself, not in a group.
    await writer.open()
    log.info(
        "%s open for writing: synchronous=%s, read back from the writer's connection",
        backend.label,
        backend.reported_synchronous,
    )
    async with running(SqliteStore(writer), f"sqlite store writer {backend.path!r}") as store:
        yield store
