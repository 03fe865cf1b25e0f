"""The writer actor of a durable store: one trio task, one thread, one connection, group commit.

Store-neutral: everything below but the SQL and the connection, which a
:class:`~broker.store._backend.Backend` supplies (SQLite: :mod:`broker.store.sqlite`). The actor
owns the inbox and the loop; staging and writing groups is its :class:`~._pipeline.Pipeline`,
what each session's next submission must follow its :class:`SubmissionLedger` (below).

Synopsis (what :func:`broker.store.open_sqlite_store` does)::

    writer = GroupWriter(backend=SqliteBackend(...), checkpoint_every=256, inbox_size=1024)
    await writer.open()                      # connects, loads heads, recovers (StoreOpenError)
    nursery.start_soon(writer.run)           # the actor
    await writer.call(AppendRequest(...))    # from any task; returns once committed
    writer.close_inbox(); await writer.wait_closed()

Group commit: the actor takes one request from its bounded inbox, then everything else already
queued (up to ``inbox_size``), stages all of it on the trio thread (:mod:`._stage`:
sequence numbers, hash chain, heads, checkpoints) and hands it to its worker thread as ONE
transaction (:meth:`Backend.write`). It does not wait for that transaction: it goes on
receiving and staging the next group on top of it (pipelining) and queues that group on the
thread behind it (``chained``), so the thread starts it the moment the first committed, with no
trip through the trio thread (busy waking that group's callers) in between; if the first failed,
the thread skips it. Requests that arrive while a transaction is being written therefore join
the next one. When the thread is idle and at
least ``2 * _SPLIT_MIN`` requests wait, the actor commits half of them first, so that staging
the other half overlaps that commit. Each request is resolved only after its group's COMMIT
returned — durable by then (SQLite ``synchronous=FULL``: after fsync) — by the completion
callback on the trio thread. If a group fails, a group staged on top of it is staged again from
what is committed, before it is written.

What the worker thread needs is made on the trio thread (:meth:`Backend.prepare`), so the
worker holds the GIL only briefly while the driver writes the group in C; the actor hands each
job over with a brief GIL-released wait (:meth:`WorkerThread.submit`, ``handoff``).

Containment: one of the backend's ``io_errors`` in a group (a full disk, an I/O error) rolls
the group back,
fails exactly that group's requests with :class:`StoreError`, and the actor carries on with the
next group. If the connection cannot even be rolled back or re-read, the writer turns *broken*:
every later request fails at once with :class:`StoreError` (it never hangs a caller). Any other
exception from a transaction is a bug: its group fails and the writer turns broken. An exception
in the actor itself fails its group and everything queued, then propagates to the nursery.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from .._codec import encode_event
from .._projection import ApprovalState
from ._backend import LeasesLost
from ._pipeline import Pipeline
from ._protocol import StoreError, StoreHead, StoreOpenError
from ._recovery import RecoveredSession, RecoveryReport, recovery_events
from ._requests import (
    AppendRequest,
    ClaimRequest,
    HeadRequest,
    LookupRequest,
    ReadRequest,
    ReleaseRequest,
    RenewRequest,
    Request,
    wall_clock_ms,
)
from ._stage import out_of_sequence
from ._worker_thread import WorkerThread

if TYPE_CHECKING:
    from ._backend import Backend
    from ._heads import SessionHead

__all__ = ["GroupWriter", "SubmissionLedger"]

# Split a crowd of at least twice this many waiting requests over two transactions.
_SPLIT_MIN = 64
# What the actor answers after the writes of its group, not as a write.
_NOT_WRITES = (
    ReadRequest,
    HeadRequest,
    LookupRequest,
    ClaimRequest,
    ReleaseRequest,
    RenewRequest,
)


def _refuse_abort(_raise_cancel: object) -> trio.lowlevel.Abort:
    # The idle actor is woken only by a request or the inbox closing (it runs shielded).
    return trio.lowlevel.Abort.FAILED


@attrs.define(eq=False)
class SubmissionLedger:
    """What each session's next submission must follow, kept by the writer.

    A session's submission (the one append path) carries the seq its events follow. The writer
    refuses at once, without queueing, one that cannot land: a session another process took
    over (fenced), or a seq that does not follow what was already handed over for the session.
    After a failed append a session is *adrift*: what was handed over after the failure may not
    land, so its next seq is unknown until its owner re-reads the head; meanwhile submissions
    are queued unchecked and staging refuses those that do not follow the log.

    Only the trio thread touches it. *heads* is the writer's committed heads (the ledger drops a
    fenced session's). It lives in the writer's module: the check runs on every submission,
    from the submitting task.
    """

    heads: dict[str, SessionHead]
    #: Where the store is, as refusals name it.
    location: str
    # The seq the next submission of a session must follow: what was handed over for it so far
    # (set at every hand-over of an append). Absent: its committed head.
    _next_seq: dict[str, int] = attrs.field(factory=dict, init=False)
    # Sessions an append of which failed (module docstring).
    _adrift: set[str] = attrs.field(factory=set, init=False)
    #: Sessions another process took over (a shared store fenced a write of theirs, or found
    #: their lease taken at renewal), with the error every later submission of theirs gets at
    #: once. A claim in this process takes one back. Empty on the hot path: test it first.
    fenced: dict[str, StoreError] = attrs.field(factory=dict, init=False)

    def refusal(self, request: AppendRequest) -> StoreError | None:
        """Why *request* must be refused before it is queued, or None."""
        if self.fenced:
            fenced = self.fenced.get(request.session_id)
            if fenced is not None:
                return fenced
        expected = self._expected_seq(request.session_id)
        if expected is not None and request.seq is not None and request.seq != expected:
            return out_of_sequence(self.location, request, expected)
        return None

    def handed_over(self, request: AppendRequest) -> None:
        """*request* was queued: the session's next submission follows it."""
        session_id = request.session_id
        if request.seq is not None and session_id not in self._adrift:
            # refusal() found that it follows what was handed over: no need to look again.
            self._next_seq[session_id] = request.seq + len(request.lines)
            return
        expected = self._expected_seq(session_id)
        if expected is not None:
            self._next_seq[session_id] = expected + len(request.lines)

    def _expected_seq(self, session_id: str) -> int | None:
        """The seq *session_id*'s next submission must follow; None while it is adrift."""
        if session_id in self._adrift:
            return None
        seq = self._next_seq.get(session_id)
        if seq is None:
            head = self.heads.get(session_id)
            seq = 0 if head is None else head.seq
        return seq

    def refuse(self, request: Request, error: StoreError) -> None:
        """Fail *request*; after a failed append, its session is adrift."""
        if isinstance(request, AppendRequest):
            self._next_seq.pop(request.session_id, None)
            self._adrift.add(request.session_id)
        request.fail(error)

    def head_read(self, session_id: str) -> None:
        """Everything handed over before a head request is settled and its owner sequences
        from the head it is about to get: *session_id* is no longer adrift."""
        if session_id in self._adrift:
            self._adrift.discard(session_id)
            self._next_seq.pop(session_id, None)

    def claimed(self, session_id: str) -> None:
        """This process took *session_id* (back): it follows its freshly read head."""
        self.fenced.pop(session_id, None)
        self._next_seq.pop(session_id, None)
        self._adrift.discard(session_id)

    def fence(self, fenced: Mapping[str, StoreError]) -> None:
        """Another process owns *fenced* now: forget their heads, refuse their writes."""
        for session_id, error in fenced.items():
            self.heads.pop(session_id, None)
            self.fenced[session_id] = error

    def unfenced(self, writes: Sequence[Request]) -> list[Request]:
        """*writes* but those of fenced sessions (queued before the fence was known), which are
        refused with their session's fence."""
        kept = []
        for request in writes:
            fenced = self.fenced.get(request.session_id)
            if fenced is None:
                kept.append(request)
            else:
                self.refuse(request, fenced)
        return kept


@attrs.define(eq=False)
class GroupWriter:
    """The actor that owns one store: its backend's connection (on its thread), its inbox.

    Teardown order: :meth:`close_inbox` → the actor writes every request already queued →
    writes final checkpoints → closes the connection on its thread (releasing what the backend
    holds, e.g. SQLite's file lock) → stops the thread → :meth:`wait_closed` returns.
    """

    backend: Backend
    checkpoint_every: int
    inbox_size: int
    clock_ms: Callable[[], int] = wall_clock_ms
    recovery: RecoveryReport = attrs.field(factory=RecoveryReport, init=False)
    # The inbox: requests queued and not yet taken by the actor, at most inbox_size. A plain
    # deque, not a memory channel: every durable append passes here, and the actor is its one
    # reader, parked (``_idle``) only while it is empty, woken once by the first request.
    _inbox: collections.deque[Request] = attrs.field(factory=collections.deque, init=False)
    _idle: trio.lowlevel.Task | None = attrs.field(default=None, init=False)
    _thread: WorkerThread = attrs.field(init=False)
    # Invariant: the backend's connection is only touched by jobs running on _thread.
    # Invariant: _heads reflects exactly what is committed; only the actor task changes it.
    _heads: dict[str, SessionHead] = attrs.field(factory=dict, init=False)
    _closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    # Submitters waiting for room in the inbox (see congested); woken as the actor takes work.
    _room: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot, init=False)
    # Requests in the inbox (its length, kept as a plain attribute: every append reads it).
    backlog: int = attrs.field(default=0, init=False)
    # What each session's next submission must follow; its fences (SubmissionLedger, above).
    _ledger: SubmissionLedger = attrs.field(init=False)
    # Staging and writing groups (module _pipeline).
    _pipeline: Pipeline = attrs.field(init=False)
    _inbox_closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._thread = WorkerThread(name=self.backend.thread_name)
        self._ledger = SubmissionLedger(self._heads, self.backend.location)
        self._pipeline = Pipeline(
            self.backend,
            self._thread,
            self._heads,
            self._ledger,
            self.checkpoint_every,
            self.clock_ms,
        )

    @property
    def transactions(self) -> int:
        """Transactions committed so far."""
        return self._pipeline.transactions

    @property
    def failed_transactions(self) -> int:
        """Transactions that failed so far."""
        return self._pipeline.failed_transactions

    @property
    def label(self) -> str:
        """How errors name the store (``sqlite store '…'``)."""
        return self.backend.label

    @property
    def _expected(self) -> tuple[type[Exception], ...]:
        """What a job may fail with that is not a bug: the backend's I/O errors, ours."""
        return (*self.backend.io_errors, StoreError)

    # ----------------------------------------------------------------- the caller side

    async def call(self, request: Request) -> None:
        """Queue *request* and wait until the actor resolved it.

        Raises :class:`StoreError` when the writer is closed or the request failed.
        Cancellation: while waiting for room in a full inbox, the request is not queued; once
        queued it may still be carried out (an append may land) — the caller just stops waiting.
        """
        # Fast path without a scheduling round; the wait below is the checkpoint.
        while self.backlog >= self.inbox_size and not self._inbox_closed:
            await self._room.park()
        self._enqueue(request)
        if isinstance(request, AppendRequest):
            self._ledger.handed_over(request)
        await request.wait()

    def submit_nowait(self, request: AppendRequest) -> None:
        """Queue *request* without waiting (the session's submit). Raises :class:`StoreError`
        when the writer is closed or its inbox is full (check :attr:`congested` first). A
        submission that does not follow what was handed over for its session is refused at
        once: *request* comes back failed and nothing is queued; so is one of a session another
        process took over (:class:`~broker.store.SessionFencedError`)."""
        refusal = self._ledger.refusal(request)
        if refusal is not None:
            request.fail(refusal)
            return
        if self.backlog >= self.inbox_size and not self._inbox_closed:
            raise StoreError(
                f"{self.label} is congested ({self.inbox_size} queued writes): "
                "await store.wait_for_room() before submitting"
            )
        self._enqueue(request)
        self._ledger.handed_over(request)

    def _enqueue(self, request: Request) -> None:
        """Put *request* in the inbox (there is room) and wake the actor if it is idle; raises
        :class:`StoreError` once the inbox is closed."""
        if self._inbox_closed:
            raise self.closed_error()
        self._inbox.append(request)
        self.backlog += 1
        if self._idle is not None:
            self._wake_actor()

    def _wake_actor(self) -> None:
        """Reschedule the actor parked on an empty inbox (once: it is no longer idle)."""
        idle, self._idle = self._idle, None
        if idle is not None:
            trio.lowlevel.reschedule(idle)

    def _refuse(self, request: Request, error: StoreError) -> None:
        self._ledger.refuse(request, error)

    @property
    def congested(self) -> bool:
        """The inbox is full: a submission now would be refused."""
        return self.backlog >= self.inbox_size

    async def wait_for_room(self) -> None:
        """Wait until the inbox has room. Cancellation: just stops waiting."""
        while self.congested and not self._inbox_closed:
            await self._room.park()
        await trio.lowlevel.checkpoint()

    def closed_error(self) -> StoreError:
        """The error for a call on a closed writer."""
        return StoreError(f"{self.label} is closed: open it again")

    def state_of(self, session_id: str) -> ApprovalState:
        """The committed projection of *session_id* (the empty state for an unknown one)."""
        head = self._heads.get(session_id)
        return ApprovalState() if head is None else head.state

    def session_ids(self) -> list[str]:
        """Every session id, in creation order."""
        return list(self._heads)

    def has_session(self, session_id: str) -> bool:
        """Whether *session_id* exists (committed), without copying the id list."""
        return session_id in self._heads

    def inject_commit_failure(self, error: Exception, *, landed: bool = False) -> None:
        """Test seam: the next group raises *error* instead of committing, as a full disk would;
        with *landed*, after committing (see :meth:`SqliteStore.inject_commit_failure`)."""
        self._pipeline.inject_commit_failure(error, landed)

    def close_inbox(self) -> None:
        """Accept no more requests; the actor finishes the queued ones, then closes (sync)."""
        self._inbox_closed = True
        self._room.unpark_all()
        self._wake_actor()

    async def wait_closed(self) -> None:
        """Wait until the actor released everything. Cancellation: shielded (bounded by I/O)."""
        with trio.CancelScope(shield=True):
            await self._closed.wait()

    # ----------------------------------------------------------------- the actor

    async def open(self) -> None:
        """Open the backend (SQLite: lock and open the file), rebuild every session's head,
        run recovery.

        Raises :class:`StoreOpenError` (and releases the thread and what the backend took)
        when the store cannot be opened or recovered. Cancellation: not interruptible — opening
        and recovery are blocking jobs on the writer thread.
        """
        self._thread.start()
        try:
            await self._thread.run(self._open_job)
            await self._recover()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._release()
            raise

    async def run(self) -> None:
        """The actor loop (after :meth:`open`): serve the inbox until it is closed, then write
        final checkpoints and release everything.

        Cancellation: ignored — the actor ends only when its inbox is closed
        (:meth:`close_inbox`), after writing every request it accepted, so an append shielded
        by its caller still lands during shutdown. Its owner must close the inbox on every path.
        """
        try:
            with trio.CancelScope(shield=True):
                await self._serve()
                await self._pipeline.write_checkpoints()
        finally:
            with trio.CancelScope(shield=True):
                await self._release()

    async def _release(self) -> None:
        """Fail what is still queued, close the connection, stop the thread."""
        self._inbox_closed = True
        self._fail_queued()
        self._room.unpark_all()
        # A group still queued behind the one in flight (only after an error in the actor, whose
        # handler failed its requests) is dropped: the thread skips it unless it already began
        # (then it lands like a COMMIT that raised yet landed; its callers were told it failed).
        queued = self._pipeline.queued
        if queued is not None and queued.chained is not None:
            queued.chained.drop()
        for job in (self._pipeline.in_flight, queued):
            if job is not None:
                await job.done.wait()
        await self._thread.run(self.backend.close)
        await self._thread.stop()
        self._closed.set()

    def _fail_queued(self) -> None:
        inbox = self._inbox
        while inbox:
            request = inbox.popleft()
            self.backlog -= 1
            self._refuse(request, self.closed_error())

    async def _next_group(self) -> list[Request] | None:
        """Wait until the inbox holds requests and take them (None: closed and empty).
        Cancellation: the actor runs shielded; its park refuses to be aborted."""
        inbox = self._inbox
        if not inbox:
            if self._inbox_closed:
                await trio.lowlevel.checkpoint()
                return None
            self._idle = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_refuse_abort)
            if not inbox:
                return None  # woken by close_inbox
        else:
            # A schedule point per group, as receiving from a channel made.
            await trio.lowlevel.cancel_shielded_checkpoint()
        available = len(inbox)
        if self._pipeline.in_flight is None and available >= 2 * _SPLIT_MIN:
            # The thread is idle and a crowd is waiting: commit half now and stage the
            # other half while that half commits (one more fsync, half the idle time).
            group = [inbox.popleft() for _ in range(available // 2)]
        else:
            group = list(inbox)
            inbox.clear()
        self.backlog -= len(group)
        return group

    async def _serve(self) -> None:
        while (group := await self._next_group()) is not None:
            if self._room:
                self._room.unpark_all()
            try:
                await self._process(group)
            except BaseException as exc:
                for request in group:
                    self._refuse(request, StoreError(f"{self.label} failed: {exc!r}"))
                raise
        await self._pipeline.settle()

    async def _process(self, group: Sequence[Request]) -> None:
        writes = [r for r in group if not isinstance(r, _NOT_WRITES)]
        if len(writes) == len(group):
            await self._pipeline.write(writes)
            return
        # Writes first, so a read sees every write queued before it.
        if writes:
            await self._pipeline.write(writes)
        await self._pipeline.settle()
        for request in group:
            if isinstance(request, HeadRequest):
                self._ledger.head_read(request.session_id)
                head = self._heads.get(request.session_id)
                if head is not None:
                    request.head = StoreHead(seq=head.seq, state=head.state)
                request.succeed()
        reads = [request for request in group if isinstance(request, ReadRequest)]
        if reads:
            await self._read(reads)
        lookups = [request for request in group if isinstance(request, LookupRequest)]
        if lookups:
            await self._lookup(lookups)
        # In order; the releases between two other requests go as one batch.
        releases: list[ReleaseRequest] = []
        for request in group:
            if isinstance(request, ReleaseRequest):
                releases.append(request)
                continue
            if not isinstance(request, ClaimRequest | RenewRequest):
                continue
            if releases:
                await self._release_leases(releases)
                releases = []
            if isinstance(request, ClaimRequest):
                await self._claim(request)
            else:
                await self._renew(request)
        if releases:
            await self._release_leases(releases)

    # ----------------------------------------------------------------- reading

    async def _read(self, reads: Sequence[ReadRequest]) -> None:
        session_ids = [request.session_id for request in reads]
        try:
            results = await self._thread.run(
                functools.partial(self.backend.read_sessions, session_ids)
            )
        except self._expected as exc:
            for request in reads:
                request.fail(StoreError(f"read from {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        for request, result in zip(reads, results, strict=True):
            if isinstance(result, StoreError):
                request.fail(result)
            else:
                request.events = result
                request.succeed()

    async def _lookup(self, lookups: Sequence[LookupRequest]) -> None:
        session_ids = [request.session_id for request in lookups]
        try:
            records = await self._thread.run(
                functools.partial(self.backend.read_records, session_ids)
            )
        except self._expected as exc:
            for request in lookups:
                request.fail(StoreError(f"read from {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        for request, record in zip(lookups, records, strict=True):
            request.record = record
            request.succeed()

    # ----------------------------------------------------------------- leases

    async def _claim(self, request: ClaimRequest) -> None:
        """Take *request*'s session (its lease, in a shared store), close its crash tail."""
        session_id = request.session_id
        try:
            head = await self._thread.run(
                functools.partial(self.backend.claim, session_id, self._heads.get(session_id))
            )
        except StoreError as exc:  # SessionOwnedError, a damaged session: as they are
            request.fail(exc)
            await trio.lowlevel.checkpoint()
            return
        except self.backend.io_errors as exc:
            request.fail(StoreError(f"claim in {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        if head is None:
            request.fail(StoreError(f"{self.backend.where} holds no session {session_id!r}"))
            return
        self._heads[session_id] = head
        self._ledger.claimed(session_id)
        try:
            # A store with one writer recovered every session at open: a pending ask here
            # belongs to a live question of this process, not to a crash tail.
            shared = self.backend.lease_ttl is not None
            entries = await self._recover_heads({session_id: head} if shared else {})
        except StoreError as exc:
            request.fail(exc)
            return
        if entries:
            self.recovery = attrs.evolve(
                self.recovery, sessions=(*self.recovery.sessions, *entries)
            )
        head = self._heads[session_id]
        request.head = StoreHead(seq=head.seq, state=head.state)
        request.succeed()

    async def _release_leases(self, releases: Sequence[ReleaseRequest]) -> None:
        """Give the leases of *releases*' sessions back (their writes are settled), all in one
        job: a broker that closes many sessions at once releases them in one statement, not
        one round trip each. In a shared store their checkpoints are written first, while the
        leases are still ours: the final checkpoints at close cover only what this process
        still owns. A store with one writer holds no leases: nothing to do."""
        if self.backend.lease_ttl is None:
            for request in releases:
                request.succeed()
            await trio.lowlevel.checkpoint()
            return
        session_ids = [request.session_id for request in releases]
        await self._pipeline.write_checkpoints(session_ids)
        try:
            await self._thread.run(functools.partial(self.backend.release, session_ids))
        except self._expected as exc:
            # A lease left behind just expires.
            for request in releases:
                request.fail(StoreError(f"release in {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        for request in releases:
            request.succeed()

    async def _renew(self, request: RenewRequest) -> None:
        try:
            lost = await self._thread.run(self.backend.renew)
        except LeasesLost as exc:
            self._pipeline.broken = str(exc)
            self._ledger.fence(exc.fenced)
            request.fail(exc)
            await trio.lowlevel.checkpoint()
            return
        except self._expected as exc:
            request.fail(StoreError(f"renewing leases in {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        self._ledger.fence(lost)
        request.succeed()

    @property
    def usable(self) -> bool:
        """Neither closed nor broken: a failed call may be worth trying again."""
        return self._pipeline.broken is None and not self._inbox_closed

    # ----------------------------------------------------------------- open, recover, close

    def _open_job(self) -> None:
        self._heads.update(self.backend.open())

    async def _recover(self) -> None:
        try:
            entries = await self._recover_heads(self._heads)
        except StoreError as exc:
            raise StoreOpenError(f"cannot recover {self.backend.where}: {exc}") from exc
        self.recovery = RecoveryReport(sessions_checked=len(self._heads), sessions=entries)

    async def _recover_heads(
        self, heads: Mapping[str, SessionHead]
    ) -> tuple[RecoveredSession, ...]:
        """Close the crash tails of *heads*' sessions (pending asks ``cancelled``, an open turn
        ``interrupted``) in one group; raises :class:`StoreError` when it could not be written."""
        wanted = {
            session_id: head.state.pending
            for session_id, head in heads.items()
            if head.state.pending or head.state.turn_open
        }
        if not wanted:
            await trio.lowlevel.checkpoint()
            return ()
        orders = await self._thread.run(
            functools.partial(self.backend.pending_in_log_order, wanted)
        )
        requests: list[AppendRequest] = []
        entries: list[RecoveredSession] = []
        for session_id, order in orders.items():
            events, entry = recovery_events(session_id, self._heads[session_id].state, order)
            if entry is None:
                continue
            requests.append(
                AppendRequest(
                    session_id=session_id,
                    events=events,
                    lines=tuple(encode_event(event) for event in events),
                )
            )
            entries.append(entry)
        if requests:
            await self._pipeline.write(requests)
            await self._pipeline.settle()
            for request in requests:
                await request.wait()
        return tuple(entries)
