"""The writer actor of a durable store: one trio task, one thread, one connection, group commit.

Store-neutral: everything below but the SQL and the connection, which a
:class:`~broker.store._backend.Backend` supplies (SQLite: :mod:`broker.store.sqlite`).

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

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import outcome
import trio

from .._codec import encode_event
from .._projection import ApprovalState
from ._backend import ConnectionLost, LeasesLost
from ._checkpoint import PROJECTION_FINGERPRINT, encode_state
from ._plan import Plan
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
from ._stage import Job, empty_job, out_of_sequence, stage_group
from ._worker_thread import JobSkipped, WorkerThread

if TYPE_CHECKING:
    from ._backend import Backend
    from ._heads import SessionHead

__all__ = ["GroupWriter"]

# Split a crowd of at least twice this many waiting requests over two transactions.
_SPLIT_MIN = 64
# Hand a job over to the worker (WorkerThread.submit) when the last group woke this many callers.
_HANDOFF_MIN = 8
# What the actor answers after the writes of its group, not as a write.
_NOT_WRITES = (
    ReadRequest,
    HeadRequest,
    LookupRequest,
    ClaimRequest,
    ReleaseRequest,
    RenewRequest,
)


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
    transactions: int = attrs.field(default=0, init=False)
    failed_transactions: int = attrs.field(default=0, init=False)
    _send: trio.MemorySendChannel[Request] = attrs.field(init=False)
    _receive: trio.MemoryReceiveChannel[Request] = attrs.field(init=False)
    _thread: WorkerThread = attrs.field(init=False)
    # Invariant: the backend's connection is only touched by jobs running on _thread.
    # Invariant: _heads reflects exactly what is committed; only the actor task changes it.
    _heads: dict[str, SessionHead] = attrs.field(factory=dict, init=False)
    # Each session's chain_prefix, made once (every row's hash starts with it).
    _prefixes: dict[str, bytes] = attrs.field(factory=dict, init=False)
    # The group whose transaction is on the thread now (at most one), staged on top of _heads.
    _in_flight: Job | None = attrs.field(default=None, init=False)
    # The group staged on top of _in_flight and queued on the thread behind it (chained).
    _queued: Job | None = attrs.field(default=None, init=False)
    # The test seam's next fault, and whether the group lands before it is raised.
    _fault: tuple[Exception, bool] | None = attrs.field(default=None, init=False)
    # Sessions a failed group touched: its COMMIT raised but may have landed, so their heads are
    # re-read (_settle) before anything is staged for them again.
    _unsure: set[str] = attrs.field(factory=set, init=False)
    # How many requests the last completed group resolved (see _submit).
    _woken: int = attrs.field(default=0, init=False)
    _broken: str | None = attrs.field(default=None, init=False)
    _closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    # Submitters waiting for room in the inbox (see congested); woken as the actor takes work.
    _room: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot, init=False)
    # Requests sent to the inbox and not yet taken by the actor (cheaper than statistics()).
    _backlog: int = attrs.field(default=0, init=False)
    # The seq the next submission of a session must follow: what was handed over for it so far
    # (set at every hand-over of an append). Absent: its committed head. Lets submit refuse an
    # out-of-sequence submission at once (the ticket comes back failed, nothing queued).
    _next_seq: dict[str, int] = attrs.field(factory=dict, init=False)
    # Sessions an append of which failed: what was handed over after it may not land, so their
    # next seq is unknown (submissions are queued unchecked; staging refuses those that do not
    # follow the log) until their head is re-read (a HeadRequest answered after the failure).
    _adrift: set[str] = attrs.field(factory=set, init=False)
    # Sessions another process took over (a shared store fenced a write of theirs, or found
    # their lease taken at renewal), with the error every later submission of theirs gets at
    # once. A claim in this process takes one back.
    _fenced: dict[str, StoreError] = attrs.field(factory=dict, init=False)
    _inbox_closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Request](self.inbox_size)
        self._thread = WorkerThread(name=self.backend.thread_name)

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
        try:
            # Fast path without a scheduling round; the wait below is the checkpoint.
            self._send.send_nowait(request)
        except trio.WouldBlock:
            try:
                await self._send.send(request)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise self.closed_error() from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self.closed_error() from None
        self._backlog += 1
        if isinstance(request, AppendRequest):
            self._handed_over(request)
        await request.wait()

    def submit_nowait(self, request: AppendRequest) -> None:
        """Queue *request* without waiting (the session's submit). Raises :class:`StoreError`
        when the writer is closed or its inbox is full (check :attr:`congested` first). A
        submission that does not follow what was handed over for its session is refused at
        once: *request* comes back failed and nothing is queued; so is one of a session another
        process took over (:class:`~broker.store.SessionFencedError`)."""
        if self._fenced:
            fenced = self._fenced.get(request.session_id)
            if fenced is not None:
                request.fail(fenced)
                return
        expected = self._expected_seq(request.session_id)
        if expected is not None and request.seq is not None and request.seq != expected:
            request.fail(out_of_sequence(self.backend.location, request, expected))
            return
        try:
            self._send.send_nowait(request)
            self._backlog += 1
        except trio.WouldBlock:
            raise StoreError(
                f"{self.label} is congested ({self.inbox_size} queued writes): "
                "await store.wait_for_room() before submitting"
            ) from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self.closed_error() from None
        self._handed_over(request)

    def _expected_seq(self, session_id: str) -> int | None:
        """The seq *session_id*'s next submission must follow; None while it is adrift."""
        if session_id in self._adrift:
            return None
        seq = self._next_seq.get(session_id)
        if seq is None:
            head = self._heads.get(session_id)
            seq = 0 if head is None else head.seq
        return seq

    def _handed_over(self, request: AppendRequest) -> None:
        expected = self._expected_seq(request.session_id)
        if expected is not None:
            self._next_seq[request.session_id] = expected + len(request.lines)

    def _refuse(self, request: Request, error: StoreError) -> None:
        """Fail *request*; after a failed append, its session is adrift (see ``_adrift``)."""
        if isinstance(request, AppendRequest):
            self._next_seq.pop(request.session_id, None)
            self._adrift.add(request.session_id)
        request.fail(error)

    @property
    def congested(self) -> bool:
        """The inbox is full: a submission now would be refused."""
        return self._backlog >= self.inbox_size

    async def wait_for_room(self) -> None:
        """Wait until the inbox has room. Cancellation: just stops waiting."""
        while self.congested:
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
        self._fault = (error, landed)

    def close_inbox(self) -> None:
        """Accept no more requests; the actor finishes the queued ones, then closes (sync)."""
        self._inbox_closed = True
        self._send.close()

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
                await self._final_checkpoints()
        finally:
            with trio.CancelScope(shield=True):
                await self._release()

    async def _release(self) -> None:
        """Fail what is still queued, close the connection, stop the thread."""
        self._receive.close()
        self._fail_queued()
        self._room.unpark_all()
        # A group still queued behind the one in flight (only after an error in the actor, whose
        # handler failed its requests) is dropped: the thread skips it unless it already began
        # (then it lands like a COMMIT that raised yet landed; its callers were told it failed).
        queued = self._queued
        if queued is not None and queued.chained is not None:
            queued.chained.drop()
        for job in (self._in_flight, queued):
            if job is not None:
                await job.done.wait()
        await self._thread.run(self.backend.close)
        await self._thread.stop()
        self._closed.set()

    def _fail_queued(self) -> None:
        while True:
            try:
                request = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            self._backlog -= 1
            self._refuse(request, self.closed_error())

    async def _serve(self) -> None:
        async for first in self._receive:
            available = 1 + self._receive.statistics().current_buffer_used
            limit = min(available, self.inbox_size)
            if self._in_flight is None and available >= 2 * _SPLIT_MIN:
                # The thread is idle and a crowd is waiting: commit half now and stage the
                # other half while that half commits (one more fsync, half the idle time).
                limit = available // 2
            group = [first]
            while len(group) < limit:
                try:
                    group.append(self._receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            self._backlog -= len(group)
            if self._room:
                self._room.unpark_all()
            try:
                await self._process(group)
            except BaseException as exc:
                for request in group:
                    self._refuse(request, StoreError(f"{self.label} failed: {exc!r}"))
                raise
        await self._settle()

    async def _process(self, group: Sequence[Request]) -> None:
        writes = [r for r in group if not isinstance(r, _NOT_WRITES)]
        if len(writes) == len(group):
            await self._write(writes)
            return
        # Writes first, so a read sees every write queued before it.
        if writes:
            await self._write(writes)
        await self._settle()
        for request in group:
            if isinstance(request, HeadRequest):
                if request.session_id in self._adrift:
                    # Everything handed over before this request is settled: its owner
                    # sequences from the head it is about to get.
                    self._adrift.discard(request.session_id)
                    self._next_seq.pop(request.session_id, None)
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
        for request in group:
            if isinstance(request, ClaimRequest):
                await self._claim(request)
            elif isinstance(request, ReleaseRequest):
                await self._release_lease(request)
            elif isinstance(request, RenewRequest):
                await self._renew(request)

    def _broken_error(self) -> StoreError:
        return StoreError(
            f"{self.label} is unusable after an earlier error ({self._broken}): "
            "close it and open it again"
        )

    # ----------------------------------------------------------------- writing a group

    def _stage(self, writes: Sequence[Request], now: int) -> Job:
        """Stage *writes* on top of the group in flight, if any (hot path); the writes of a
        session another process took over are refused with its fence, not staged."""
        if self._fenced:
            writes = self._unfenced(writes)
        return stage_group(
            writes,
            now=now,
            committed=self._heads,
            in_flight={} if self._in_flight is None else self._in_flight.staged,
            prefixes=self._prefixes,
            checkpoint_every=self.checkpoint_every,
            where=self.backend.where,
            location=self.backend.location,
        )

    async def _write(self, writes: Sequence[Request]) -> None:
        """Stage *writes* (on top of the group in flight, if any) and start their transaction
        without waiting for it. If a group is in flight, the staged job is queued on the thread
        behind it (chained), so the thread starts it the moment that one committed, without
        waiting for the trio thread to come round to it; this returns once that group is done
        (at most two groups are ever on the thread). If that group failed, the thread skipped
        this one, which is staged again from what is committed."""
        if self._broken is not None:
            for request in writes:
                self._refuse(request, self._broken_error())
            await trio.lowlevel.checkpoint()
            return
        if self._unsure and self._in_flight is None:
            await self._settle()  # re-read what a failed group touched before staging on it
        now = self.clock_ms()
        base = self._in_flight
        # Staged while *base* commits: this overlap is the point of the pipeline.
        job = self._stage(writes, now)
        if base is None:
            await trio.lowlevel.checkpoint()
            self._submit(job)
            return
        self._submit(job, chained=True)
        await base.done.wait()
        if not base.failed:
            return
        if job.chained is None:
            return  # nothing was queued: staging refused every request
        # *base* failed, so the thread skips this job: stage it again from what is committed.
        await job.done.wait()
        if not job.skipped:
            return  # written after all (its requests are answered): nothing to stage again
        await self._settle()
        # Those staging refused were answered already; only the rest is staged again.
        self._submit(self._restage([r for r in writes if not r.done], now))

    def _restage(self, writes: Sequence[Request], now: int) -> Job:
        if self._broken is not None:
            for request in writes:
                self._refuse(request, self._broken_error())
            return empty_job()
        return self._stage(writes, now)

    def _submit(self, job: Job, *, chained: bool = False) -> None:
        """Answer the requests staging refused and hand the job to the thread: *chained*, queued
        behind the group in flight (then it is :attr:`_queued`), else started at once."""
        for request, error in job.rejected:
            self._refuse(request, error)
        if not job.accepted:
            return
        fault, self._fault = self._fault, None
        plan = (
            job.plan
            if fault is None
            else attrs.evolve(job.plan, fault=fault[0], fault_landed=fault[1])
        )
        on_done = functools.partial(self._on_written, job)
        work = functools.partial(self.backend.write, plan, self.backend.prepare(plan))
        if chained:
            self._queued = job
            job.chained = self._thread.submit(work, on_done, chained=True)
            return
        self._in_flight = job
        self._thread.submit(
            work,
            on_done,
            # Only when the last commit woke a crowd of callers: running them would keep the GIL
            # from the worker. For a few, handing off only adds thread wake-ups.
            handoff=self._woken >= _HANDOFF_MIN,
        )

    def _on_written(self, job: Job, result: outcome.Outcome[Mapping[str, StoreError]]) -> None:
        """The thread finished *job*'s transaction, or skipped it (runs on the trio thread, in
        the thread's order; must not raise). A group chained behind *job* is in flight now."""
        self._in_flight, self._queued = self._queued, None
        if isinstance(result, outcome.Error) and isinstance(result.error, JobSkipped):
            # Nothing written, nobody answered: the actor stages it again (see _write).
            job.skipped = True
            job.done.set()
            return
        self._woken = len(job.accepted)
        if not isinstance(result, outcome.Error):
            self._heads.update(job.staged)
            self.transactions += 1
            job.done.set()
            fenced = result.unwrap()
            if fenced:
                # Nothing of these sessions was written (the rest of the group was).
                self._fence(fenced)
                for request in job.accepted:
                    error = fenced.get(request.session_id)
                    if error is None:
                        request.succeed()
                    else:
                        self._refuse(request, error)
                return
            for request in job.accepted:
                request.succeed()
            return
        job.done.set()
        self.failed_transactions += 1
        exc = result.error
        # The group chained on top of this one is skipped by the thread and staged again, after
        # the heads this one touched are re-read (a COMMIT that raised may have landed).
        job.failed = True
        self._unsure.update(job.staged)
        if isinstance(exc, ConnectionLost):
            self._broken = str(exc)
        lost: Mapping[str, StoreError] = {}
        if isinstance(exc, LeasesLost):
            lost = exc.fenced
            self._fence(lost)
        io_errors = self.backend.io_errors
        for request in job.accepted:
            if request.session_id in lost:
                error = lost[request.session_id]
            elif isinstance(exc, io_errors):
                error = self.backend.write_error(exc)
                error.__cause__ = exc
            elif isinstance(exc, StoreError):
                error = self._broken_error()
            else:
                error = StoreError(f"write to {self.backend.where} failed: {exc!r}")
                error.__cause__ = exc
            self._refuse(request, error)
        if not isinstance(exc, (*io_errors, StoreError)):
            # A bug, not an I/O error: stop accepting work rather than guess.
            self._broken = f"unexpected {type(exc).__name__}: {exc}"

    def _unfenced(self, writes: Sequence[Request]) -> list[Request]:
        """*writes* but those of fenced sessions (queued before the fence was known), which are
        refused with their session's fence."""
        kept = []
        for request in writes:
            fenced = self._fenced.get(request.session_id)
            if fenced is None:
                kept.append(request)
            else:
                self._refuse(request, fenced)
        return kept

    def _fence(self, fenced: Mapping[str, StoreError]) -> None:
        """Another process owns *fenced* now: forget their heads, refuse their writes."""
        for session_id, error in fenced.items():
            self._heads.pop(session_id, None)
            self._fenced[session_id] = error

    async def _settle(self) -> None:
        """Wait for the transaction in flight (if any); after a failed one, re-read the heads
        it touched (a COMMIT that raised may still have landed) — once nothing is in flight."""
        job = self._in_flight
        if job is not None:
            await job.done.wait()
        if self._unsure and self._in_flight is None and self._broken is None:
            session_ids = sorted(self._unsure)
            self._unsure.clear()
            await self._resync(session_ids)
            return
        await trio.lowlevel.checkpoint()

    async def _resync(self, session_ids: list[str]) -> None:
        """After a failed group, re-read the touched heads: a COMMIT that raised may have landed."""
        try:
            known = {session_id: self._heads.get(session_id) for session_id in session_ids}
            fresh = await self._thread.run(functools.partial(self.backend.reread_heads, known))
        except self.backend.io_errors:
            # Not read (a server that is away, a store that reconnects): still unsure, re-read
            # at the next settle; what is staged meanwhile on a stale head fails on its seq.
            self._unsure.update(session_ids)
            await trio.lowlevel.checkpoint()
            return
        except StoreError as exc:
            self._broken = f"re-reading the store after a failed write failed: {exc}"
            await trio.lowlevel.checkpoint()
            return
        for session_id in session_ids:
            head = fresh.get(session_id)
            if head is None:
                self._heads.pop(session_id, None)
            else:
                self._heads[session_id] = head

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
        self._fenced.pop(session_id, None)
        self._next_seq.pop(session_id, None)
        self._adrift.discard(session_id)
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

    async def _release_lease(self, request: ReleaseRequest) -> None:
        """Give the lease of *request*'s session back (its writes are settled)."""
        try:
            await self._thread.run(functools.partial(self.backend.release, request.session_id))
        except self._expected as exc:
            # A lease left behind just expires.
            request.fail(StoreError(f"release in {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        request.succeed()

    async def _renew(self, request: RenewRequest) -> None:
        try:
            lost = await self._thread.run(self.backend.renew)
        except LeasesLost as exc:
            self._broken = str(exc)
            self._fence(exc.fenced)
            request.fail(exc)
            await trio.lowlevel.checkpoint()
            return
        except self._expected as exc:
            request.fail(StoreError(f"renewing leases in {self.backend.where} failed: {exc}"))
            await trio.lowlevel.checkpoint()
            return
        self._fence(lost)
        request.succeed()

    async def renew_leases(self) -> None:
        """Renew this process's leases every third of the backend's ``lease_ttl``, until the
        writer is closed or this task is cancelled (its owner cancels it before closing the
        writer). A renewal that finds a session taken over fences it: its next submission is
        refused with :class:`~broker.store.SessionFencedError`. A renewal that fails (the
        server did not answer) is retried at the next tick; the leases expire meanwhile.

        Cancellation: stops renewing at once; a renewal queued already may still run.
        """
        ttl = self.backend.lease_ttl
        if ttl is None:
            await trio.lowlevel.checkpoint()
            return
        while True:
            await trio.sleep(ttl / 3)
            try:
                await self.call(RenewRequest(session_id=""))
            except StoreError:
                if self._broken is not None or self._inbox_closed:
                    return

    # ----------------------------------------------------------------- open, recover, close

    def _open_job(self) -> None:
        self._heads = self.backend.open()

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
            await self._write(requests)
            await self._settle()
            for request in requests:
                await request.wait()
        return tuple(entries)

    async def _final_checkpoints(self) -> None:
        due = {
            session_id: head
            for session_id, head in self._heads.items()
            if head.seq > head.checkpoint_seq
        }
        if not due or not self.checkpoint_every or self._broken is not None:
            await trio.lowlevel.checkpoint()
            return
        plan = Plan(
            creates=[],
            auto_creates=[],
            rows=[],
            heads=[],
            checkpoints=[
                (session_id, head.seq, encode_state(head.state), PROJECTION_FINGERPRINT)
                for session_id, head in due.items()
            ],
            fault=None,
        )
        try:
            await self._thread.run(
                functools.partial(self.backend.write, plan, self.backend.prepare(plan))
            )
        except self._expected:
            # Checkpoints are a cache of the log; the next open folds a longer tail instead.
            await trio.lowlevel.checkpoint()
            return
        self.transactions += 1
        for session_id, head in due.items():
            self._heads[session_id] = attrs.evolve(head, checkpoint_seq=head.seq)
