"""The SQLite event store, the embedded default: one file, WAL, group commit, hash chains.

Synopsis::

    async with open_sqlite_store("broker.db") as store:     # locks, recovers, starts the writer
        if not store.recovery.clean:
            log.warning(store.recovery.summary())
        await store.create_session("s1", None)
        await store.append("s1", [TurnStart(turn=1)])       # returns once fsync'ed

Every call goes through one writer actor (:mod:`broker.store._sqlite_writer`), which groups the
appends of all sessions that arrive while a transaction is being written into the next one.
For the read-only side (``broker log``) see :mod:`broker.store._sqlite_reader`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs
import trio

from .._codec import EventDecodeError, decode_event, encode_event
from .._collapse import collapse_single
from .._events import Event
from ._protocol import Durability, SessionRecord, StoreError, StoreHead
from ._sqlite_reader import open_sqlite_reader
from ._sqlite_requests import (
    AppendRequest,
    CreateRequest,
    HeadRequest,
    ImportRequest,
    ReadRequest,
    wall_clock_ms,
)
from ._sqlite_writer import SqliteWriter

if TYPE_CHECKING:
    import sqlite3

    from .._projection import ApprovalState
    from ._recovery import RecoveryReport
    from ._sqlite_schema import Synchronous

__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_INBOX_SIZE",
    "SqliteStore",
    "open_sqlite_store",
]

DEFAULT_CHECKPOINT_EVERY = 256
DEFAULT_INBOX_SIZE = 1024

# Event classes whose encoded lines were seen to decode back to the same class.
_DECODABLE: set[type[Event]] = set()


def _encode_all(events: Sequence[Event]) -> tuple[tuple[Event, ...], tuple[str, ...]]:
    """Encode *events*; refuse a class the codec cannot decode again (it would damage the log)."""
    frozen = events if type(events) is tuple else tuple(events)
    lines = []
    for event in frozen:
        line = encode_event(event)
        cls = type(event)
        if cls not in _DECODABLE:
            _check_decodable(cls, line)
        lines.append(line)
    return frozen, tuple(lines)


def _check_decodable(cls: type[Event], line: str) -> None:
    try:
        decodable = type(decode_event(line)) is cls
    except EventDecodeError:
        decodable = False
    if not decodable:
        raise TypeError(
            f"event class {cls.__name__} (type {cls.TYPE!r}) is not registered with the "
            "codec: register it with broker._codec.register_event_type before appending it"
        )
    _DECODABLE.add(cls)


@attrs.define(eq=False)
class SqliteStore:
    """A durable :class:`~broker.store.EventStore` in one SQLite file; made by
    :func:`open_sqlite_store`, which owns its writer task.

    Appending to a session that was never created creates it (without a parent), like
    :class:`~broker.store.MemoryStore`; ``create_session`` on an existing one updates its parent.
    """

    _writer: SqliteWriter
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def path(self) -> str:
        """The store file."""
        return self._writer.path

    @property
    def recovery(self) -> RecoveryReport:
        """What was recovered when this store was opened."""
        return self._writer.recovery

    @property
    def transactions_committed(self) -> int:
        """How many write transactions were committed (group commit makes it < appends)."""
        return self._writer.transactions

    @property
    def transactions_failed(self) -> int:
        """How many write transactions failed and were rolled back."""
        return self._writer.failed_transactions

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """Record *session_id* (child of *parent_id*); durable before it returns.

        Cancellation: if cancelled while waiting for room in the writer's inbox, nothing is
        recorded; once queued, the session may be recorded even though the call was cancelled.
        """
        self._check_open()
        await self._writer.call(CreateRequest(session_id=session_id, parent_id=parent_id))

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Append *events* atomically; return once their transaction is committed (fsync'ed
        with ``synchronous="FULL"``).

        Raises :class:`StoreError` if the transaction failed: then none of the events was
        stored. Raises :class:`TypeError` (before queueing) for an event class the codec does not
        know, since its line could never be read back.
        Cancellation: if cancelled while waiting for room in the writer's inbox, nothing is
        appended; once queued, the events may still be appended after the caller stopped
        waiting (recovery closes what such a crash tail leaves open).
        """
        self._check_open()
        if not events:
            await trio.lowlevel.checkpoint()
            return
        frozen, lines = _encode_all(events)
        await self._writer.call(AppendRequest(session_id=session_id, events=frozen, lines=lines))

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        """The session's append (the one append path): *events* follow its event *seq* and
        *state* is the projection after them. Queued at once, without a scheduling pass; the
        ticket resolves once their group's transaction is committed (fsync'ed with
        ``synchronous="FULL"``). A *seq* that does not follow the session's last event fails
        the ticket; a closed or congested store raises :class:`StoreError` at once.
        """
        self._check_open()
        frozen, lines = _encode_all(events)
        request = AppendRequest(
            session_id=session_id, events=frozen, lines=lines, seq=seq, state=state
        )
        self._writer.submit_nowait(request)
        return request

    @property
    def congested(self) -> bool:
        """The writer's inbox is full (``inbox_size``): :meth:`wait_for_room` first."""
        return self._writer.congested

    async def wait_for_room(self) -> None:
        """Wait until the writer's inbox has room. Cancellation: just stops waiting."""
        await self._writer.wait_for_room()

    async def head(self, session_id: str) -> StoreHead:
        """The committed head of *session_id*, after every write queued before this call
        (and the re-read that follows a failed one). Cancellation: safe; nothing is changed."""
        self._check_open()
        request = HeadRequest(session_id=session_id)
        await self._writer.call(request)
        return request.head

    async def claim(self, session_id: str) -> StoreHead:
        """The head of *session_id* to resume it: one process writes a file (its lock), and
        recovery ran at open, so there is nothing to take over. Raises :class:`StoreError` for
        a session the file does not hold. Cancellation: safe; nothing is changed."""
        self._check_open()
        if not self._writer.has_session(session_id):
            await trio.lowlevel.checkpoint()
            raise StoreError(f"store file '{self.path}' holds no session {session_id!r}")
        return await self.head(session_id)

    async def release(self, session_id: str) -> None:
        """Nothing to release: the file's lock is the store's, not the session's.
        Cancellation: safe."""
        await trio.lowlevel.checkpoint()

    async def import_session(
        self, session_id: str, parent_id: str | None, events: Sequence[Event]
    ) -> None:
        """Create *session_id* and append *events* in ONE transaction (all or nothing).

        Raises :class:`StoreError` if the session already exists or the write failed; then
        nothing was stored. Cancellation: as for :meth:`append`.
        """
        self._check_open()
        frozen, lines = _encode_all(events)
        await self._writer.call(
            ImportRequest(session_id=session_id, parent_id=parent_id, events=frozen, lines=lines)
        )

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """The record of *session_id* (its parent id), or None when the file does not hold it.

        Read through a read-only connection on a worker thread (WAL readers never block the
        writer). Cancellation: safe; nothing is changed.
        """
        self._check_open()
        if not self._writer.has_session(session_id):
            await trio.lowlevel.checkpoint()
            return None
        return await trio.to_thread.run_sync(_read_record, self.path, session_id)

    async def load_state(self, session_id: str) -> ApprovalState:
        """The projection of *session_id*'s committed log (empty for an unknown session).

        The writer folded it at open from the last checkpoint plus the tail of the log, and
        folds every committed append since. Cancellation: safe; nothing is changed.
        """
        self._check_open()
        await trio.lowlevel.checkpoint()
        return self._writer.state_of(session_id)

    async def read(self, session_id: str) -> list[Event]:
        """Every committed event of *session_id*, in append order ([] for an unknown one).

        Runs after every write queued before it. Cancellation: safe; nothing is changed.
        """
        self._check_open()
        request = ReadRequest(session_id=session_id)
        await self._writer.call(request)
        return request.events

    def session_ids(self) -> list[str]:
        """Every session id, in creation order (sync; from the writer's memory)."""
        return self._writer.session_ids()

    def inject_commit_failure(self, error: sqlite3.Error, *, landed: bool = False) -> None:
        """Test seam: the next write transaction raises *error* in place of COMMIT and is rolled
        back, as with a full disk; its appends raise :class:`StoreError`. With *landed* it
        commits and then raises *error*, as an I/O error reported after the WAL frames were
        written would: the appends fail, yet their events are in the file.
        """
        self._writer.inject_commit_failure(error, landed=landed)

    async def aclose(self) -> None:
        """Stop accepting calls, write what is queued, checkpoint, close the file, drop the lock.

        Later calls raise :class:`StoreError`. Idempotent. Cancellation: shielded — it still
        releases everything; the wait is bounded by the I/O of the queued writes.
        """
        self._closed = True
        self._writer.close_inbox()
        await self._writer.wait_closed()

    def _check_open(self) -> None:
        if self._closed:
            raise self._writer.closed_error()


def _read_record(path: str, session_id: str) -> SessionRecord | None:
    with open_sqlite_reader(path) as reader:
        info = reader.session(session_id)
    return None if info is None else SessionRecord(session_id=session_id, parent_id=info.parent_id)


def _check_options(synchronous: str, checkpoint_every: int, inbox_size: int) -> None:
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(
            f'synchronous must be "FULL" or "NORMAL", got {synchronous!r}: use "FULL" to '
            'survive power loss, "NORMAL" to survive process crashes only'
        )
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
        raise TypeError(f"checkpoint_every must be an int, got {type(checkpoint_every).__name__}")
    if checkpoint_every < 0:
        raise ValueError(
            f"checkpoint_every must be >= 0, got {checkpoint_every}: pass 0 to disable checkpoints"
        )
    if isinstance(inbox_size, bool) or not isinstance(inbox_size, int):
        raise TypeError(f"inbox_size must be an int, got {type(inbox_size).__name__}")
    if inbox_size < 1:
        raise ValueError(f"inbox_size must be >= 1, got {inbox_size}: the inbox must be bounded")


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
    ``"NORMAL"`` only at WAL checkpoints (it survives a process crash, not an OS crash).
    *checkpoint_every*: write a session's projection every N events and at close (0: never).
    *inbox_size*: the bound of the writer's inbox (callers wait for room beyond it) and of a
    commit group. *clock_ms*: the wall clock stored with each row (for tests).

    Cancellation: opening is not interruptible (one blocking job on the writer thread). On
    exit — also by cancellation or error — the store is closed as by :meth:`SqliteStore.aclose`.
    Errors: opening errors and the block's own exception are raised as themselves (the writer's
    nursery is a detail; see ``broker._collapse``).
    """
    _check_options(synchronous, checkpoint_every, inbox_size)
    writer = SqliteWriter(
        path=os.fspath(path),
        synchronous=synchronous,
        checkpoint_every=checkpoint_every,
        inbox_size=inbox_size,
        clock_ms=clock_ms,
    )
    # Opened before the nursery exists, so an open error is raised as itself, not in a group.
    await writer.open()
    store = SqliteStore(writer)
    with collapse_single():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run, name=f"sqlite store writer {writer.path!r}")
            try:
                yield store
            finally:
                # Invariant: the writer ends only when its inbox is closed: close it on every
                # path.
                await store.aclose()
