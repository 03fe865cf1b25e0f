"""The :class:`~broker.store.EventStore` facade of a group-commit writer, shared by the durable
stores (:mod:`broker.store.sqlite`, :mod:`broker.store.postgres`).

Every call goes through one writer actor (:mod:`broker.store._writer`), which groups the
appends of all sessions that arrive while a transaction is being written into the next one; a
store adds only how it is opened and what it alone can do (SQLite: its file, a read-only
``lookup``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from .._codec import EventDecodeError, decode_event, encode_event
from .._collapse import collapse_single
from .._events import Event, maker
from ._protocol import Durability, SessionRecord, StoreError, StoreHead
from ._requests import (
    AppendRequest,
    ClaimRequest,
    CreateRequest,
    HeadRequest,
    ImportRequest,
    LookupRequest,
    ReadRequest,
    ReleaseRequest,
    RenewRequest,
)

if TYPE_CHECKING:
    from .._projection import ApprovalState
    from ._recovery import RecoveryReport
    from ._writer import GroupWriter

__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_INBOX_SIZE",
    "GroupStore",
    "check_options",
    "running",
]

DEFAULT_CHECKPOINT_EVERY = 256
DEFAULT_INBOX_SIZE = 1024

# AppendRequest(session_id=..., events=..., lines=..., seq=..., state=...), positionally with
# the fields of an unresolved ticket first: the session's submission, made on every append.
_append_request = maker(
    AppendRequest,
    "done error _waiter _callback deadline _waits session_id events lines seq state",
)

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
class GroupStore:
    """A durable :class:`~broker.store.EventStore` over a :class:`GroupWriter`; made by its
    store's opener (e.g. :func:`~broker.store.open_sqlite_store`), which owns the writer task.

    Appending to a session that was never created creates it (without a parent), like
    :class:`~broker.store.MemoryStore`; ``create_session`` on an existing one updates its parent.
    """

    _writer: GroupWriter
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def where(self) -> str:
        """How errors name where the data lives (``store file '…'``)."""
        return self._writer.backend.where

    @property
    def recovery(self) -> RecoveryReport:
        """What was recovered: at open (a store with one writer), or by each claim so far (a
        shared store closes a session's crash tail when it takes the session)."""
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
        if self._closed:  # _check_open, inline: this runs on every append
            self._check_open()
        frozen, lines = _encode_all(events)
        request = _append_request(
            False, None, None, None, 0.0, None, session_id, frozen, lines, seq, state
        )
        self._writer.submit_nowait(request)
        return request

    @property
    def congested(self) -> bool:
        """The writer's inbox is full (``inbox_size``): :meth:`wait_for_room` first."""
        writer = self._writer  # read here, not through the writer's property: every append asks
        return writer.backlog >= writer.inbox_size

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
        """The head of *session_id* to resume it, once every write queued before is settled.

        A store with one writer (SQLite: its lock) recovered every session at open: there is
        nothing to take over. A shared one (PostgreSQL) takes the session's lease (epoch + 1)
        — :class:`~broker.store.SessionOwnedError` while another process holds a live one —
        loads its head and closes its crash tail (see :attr:`recovery`). Raises
        :class:`StoreError` for a session the store does not hold.

        Cancellation: once queued, the claim (and its recovery) may still be carried out.
        """
        self._check_open()
        request = ClaimRequest(session_id=session_id)
        await self._writer.call(request)
        return request.head

    async def release(self, session_id: str) -> None:
        """Its owner closed *session_id*: returns once the writes queued before are settled; a
        shared store then gives its lease back (a store with one writer holds none). Never
        raises a :class:`StoreError` (a lease left behind just expires).

        Cancellation: safe; a release already queued may still be carried out.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._writer.call(ReleaseRequest(session_id=session_id))
        except StoreError:
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
        """The record of *session_id* (its parent id), or None when the store does not hold it.

        Read by the writer after every write queued before it. Cancellation: safe; nothing is
        changed.
        """
        self._check_open()
        if self._writer.backend.lease_ttl is None and not self._writer.has_session(session_id):
            # One writer: it knows every session. A shared store asks the database.
            await trio.lowlevel.checkpoint()
            return None
        request = LookupRequest(session_id=session_id)
        await self._writer.call(request)
        return request.record

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
        """Every session id this writer holds, in creation order (sync; from the writer's
        memory): all of them in a store with one writer, those created or claimed here in a
        shared one."""
        return self._writer.session_ids()

    async def aclose(self) -> None:
        """Stop accepting calls, write what is queued, checkpoint, close the connection (and
        release what the store holds: SQLite's file lock).

        Later calls raise :class:`StoreError`. Idempotent. Cancellation: shielded — it still
        releases everything; the wait is bounded by the I/O of the queued writes.
        """
        self._closed = True
        self._writer.close_inbox()
        await self._writer.wait_closed()

    def _check_open(self) -> None:
        if self._closed:
            raise self._writer.closed_error()


def check_options(checkpoint_every: int, inbox_size: int) -> None:
    """Refuse a bad ``checkpoint_every`` or ``inbox_size`` (the options every durable store has)."""
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


S = TypeVar("S", bound=GroupStore)


@asynccontextmanager
async def running(store: S, name: str) -> AsyncIterator[S]:
    """Run *store*'s writer (already opened) in a nursery of its own for the block, named
    *name*; close the store on exit — also by cancellation or error — as
    :meth:`GroupStore.aclose` does. The block's own exception is raised as itself (the writer's
    nursery is a detail; see ``broker._collapse``)."""
    with collapse_single():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._writer.run, name=name)
            # A shared store's leases are renewed by a task of the store's own.
            renewing = trio.CancelScope()
            if store._writer.backend.lease_ttl is not None:
                nursery.start_soon(_renew_leases, store._writer, renewing, name=f"{name} leases")
            try:
                yield store
            finally:
                renewing.cancel(reason="the store is closing")
                # Invariant: the writer ends only when its inbox is closed: close it on every
                # path.
                await store.aclose()


async def _renew_leases(writer: GroupWriter, scope: trio.CancelScope) -> None:
    """Renew this process's leases every third of the backend's ``lease_ttl``, until the
    writer is closed or broken or *scope* is cancelled (its owner cancels it before closing the
    writer). A renewal that finds a session taken over fences it: its next submission is
    refused with :class:`~broker.store.SessionFencedError`. A renewal that fails (the server did
    not answer) is retried at the next tick; the leases expire meanwhile. Cancellation: stops
    renewing at once; a renewal queued already may still run."""
    ttl = writer.backend.lease_ttl
    with scope:
        if ttl is None:
            await trio.lowlevel.checkpoint()
            return
        while True:
            await trio.sleep(ttl / 3)
            try:
                await writer.call(RenewRequest(session_id=""))
            except StoreError:
                if not writer.usable:
                    return
