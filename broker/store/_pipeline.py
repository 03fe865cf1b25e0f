"""The group-commit pipeline of a store's writer actor: stage a group, write it on the thread,
resolve its requests after COMMIT.

The actor (:class:`~broker.store._writer.GroupWriter`) hands each group of writes to
:meth:`Pipeline.write`, which stages it (:mod:`._stage`: sequence numbers, hash chain, heads,
checkpoints) on top of the group in flight, if any, and hands it to the worker thread as ONE
transaction (:meth:`Backend.write`) without waiting for it: a group staged while another
commits is queued on the thread behind it (``chained``), so the thread starts it the moment the
first committed; if the first failed, the thread skips it and it is staged again from what is
committed. At most two groups are ever on the thread. Each request is resolved only after its
group's COMMIT returned, by the completion callback on the trio thread (:meth:`_on_written`).

Containment: one of the backend's ``io_errors`` fails exactly that group's requests; a lost
connection, or any other exception (a bug), turns the pipeline *broken* (``broken`` says why):
every later write is refused at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs
import outcome
import trio

from ._backend import ConnectionLost, LeasesLost
from ._checkpoint import PROJECTION_FINGERPRINT, encode_state
from ._plan import Plan
from ._protocol import StoreError
from ._stage import Job, empty_job, stage_group
from ._worker_thread import JobSkipped

if TYPE_CHECKING:
    from ._backend import Backend
    from ._heads import SessionHead
    from ._requests import Request
    from ._worker_thread import WorkerThread

__all__ = ["Pipeline", "Refusals"]

# Hand a job over to the worker (WorkerThread.submit) when the last group woke this many callers.
_HANDOFF_MIN = 8


class Refusals(Protocol):
    """What the pipeline needs of the writer's :class:`~._writer.SubmissionLedger`."""

    @property
    def fenced(self) -> Mapping[str, StoreError]: ...
    def refuse(self, request: Request, error: StoreError) -> None: ...
    def fence(self, fenced: Mapping[str, StoreError]) -> None: ...
    def unfenced(self, writes: Sequence[Request]) -> list[Request]: ...


@attrs.define(eq=False)
class Pipeline:
    """Staging and writing groups for one writer. Only the actor's task (and the completion
    callbacks, on the trio thread) touch it. *heads* are the writer's committed heads: the
    pipeline moves them as groups commit."""

    backend: Backend
    _thread: WorkerThread
    _heads: dict[str, SessionHead]
    _ledger: Refusals
    checkpoint_every: int
    clock_ms: Callable[[], int]
    transactions: int = attrs.field(default=0, init=False)
    failed_transactions: int = attrs.field(default=0, init=False)
    #: The group whose transaction is on the thread now (at most one), staged on top of heads.
    in_flight: Job | None = attrs.field(default=None, init=False)
    #: The group staged on top of ``in_flight`` and queued on the thread behind it (chained).
    queued: Job | None = attrs.field(default=None, init=False)
    #: Why the pipeline is unusable (a lost connection, a bug), or None.
    broken: str | None = attrs.field(default=None, init=False)
    # Each session's chain_prefix, made once (every row's hash starts with it).
    _prefixes: dict[str, bytes] = attrs.field(factory=dict, init=False)
    # The test seam's next fault, and whether the group lands before it is raised.
    _fault: tuple[Exception, bool] | None = attrs.field(default=None, init=False)
    # Sessions a failed group touched: its COMMIT raised but may have landed, so their heads are
    # re-read (settle) before anything is staged for them again.
    _unsure: set[str] = attrs.field(factory=set, init=False)
    # How many requests the last completed group resolved (see _submit).
    _woken: int = attrs.field(default=0, init=False)

    def inject_commit_failure(self, error: Exception, landed: bool) -> None:
        """Test seam: the next group raises *error* instead of committing (with *landed*, after
        committing)."""
        self._fault = (error, landed)

    def broken_error(self) -> StoreError:
        return StoreError(
            f"{self.backend.label} is unusable after an earlier error ({self.broken}): "
            "close it and open it again"
        )

    def _stage(self, writes: Sequence[Request], now: int) -> Job:
        """Stage *writes* on top of the group in flight, if any (hot path); the writes of a
        session another process took over are refused with its fence, not staged."""
        if self._ledger.fenced:
            writes = self._ledger.unfenced(writes)
        return stage_group(
            writes,
            now=now,
            committed=self._heads,
            in_flight={} if self.in_flight is None else self.in_flight.staged,
            prefixes=self._prefixes,
            checkpoint_every=self.checkpoint_every,
            where=self.backend.where,
            location=self.backend.location,
        )

    async def write(self, writes: Sequence[Request]) -> None:
        """Stage *writes* (on top of the group in flight, if any) and start their transaction
        without waiting for it. If a group is in flight, the staged job is queued on the thread
        behind it (chained), so the thread starts it the moment that one committed, without
        waiting for the trio thread to come round to it; this returns once that group is done
        (at most two groups are ever on the thread). If that group failed, the thread skipped
        this one, which is staged again from what is committed. Cancellation: the actor runs
        it shielded (a group handed to the thread is written whatever happens to the caller)."""
        if self.broken is not None:
            for request in writes:
                self._ledger.refuse(request, self.broken_error())
            await trio.lowlevel.checkpoint()
            return
        if self._unsure and self.in_flight is None:
            await self.settle()  # re-read what a failed group touched before staging on it
        now = self.clock_ms()
        base = self.in_flight
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
        await self.settle()
        # Those staging refused were answered already; only the rest is staged again.
        self._submit(self._restage([r for r in writes if not r.done], now))

    def _restage(self, writes: Sequence[Request], now: int) -> Job:
        if self.broken is not None:
            for request in writes:
                self._ledger.refuse(request, self.broken_error())
            return empty_job()
        return self._stage(writes, now)

    def _submit(self, job: Job, *, chained: bool = False) -> None:
        """Answer the requests staging refused and hand the job to the thread: *chained*, queued
        behind the group in flight (then it is :attr:`_queued`), else started at once."""
        for request, error in job.rejected:
            self._ledger.refuse(request, error)
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
            self.queued = job
            job.chained = self._thread.submit(work, on_done, chained=True)
            return
        self.in_flight = job
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
        self.in_flight, self.queued = self.queued, None
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
                self._ledger.fence(fenced)
                for request in job.accepted:
                    error = fenced.get(request.session_id)
                    if error is None:
                        request.succeed()
                    else:
                        self._ledger.refuse(request, error)
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
            self.broken = str(exc)
        lost: Mapping[str, StoreError] = {}
        if isinstance(exc, LeasesLost):
            lost = exc.fenced
            self._ledger.fence(lost)
        io_errors = self.backend.io_errors
        for request in job.accepted:
            if request.session_id in lost:
                error = lost[request.session_id]
            elif isinstance(exc, io_errors):
                error = self.backend.write_error(exc)
                error.__cause__ = exc
            elif isinstance(exc, StoreError):
                error = self.broken_error()
            else:
                error = StoreError(f"write to {self.backend.where} failed: {exc!r}")
                error.__cause__ = exc
            self._ledger.refuse(request, error)
        if not isinstance(exc, (*io_errors, StoreError)):
            # A bug, not an I/O error: stop accepting work rather than guess.
            self.broken = f"unexpected {type(exc).__name__}: {exc}"

    async def settle(self) -> None:
        """Wait for the transaction in flight (if any); after a failed one, re-read the heads
        it touched (a COMMIT that raised may still have landed) — once nothing is in flight.
        Cancellation: the actor runs it shielded; cancelled, it just stops waiting."""
        job = self.in_flight
        if job is not None:
            await job.done.wait()
        if self._unsure and self.in_flight is None and self.broken is None:
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
            self.broken = f"re-reading the store after a failed write failed: {exc}"
            await trio.lowlevel.checkpoint()
            return
        for session_id in session_ids:
            head = fresh.get(session_id)
            if head is None:
                self._heads.pop(session_id, None)
            else:
                self._heads[session_id] = head

    async def write_checkpoints(self, session_ids: Collection[str] | None = None) -> None:
        """Checkpoint every session (or each of *session_ids*) whose head moved past its last
        checkpoint, in one transaction: at close, and for one session when its lease is given
        back. A failure is ignored: checkpoints are a cache of the log. Cancellation: the
        caller shields it."""
        heads = self._heads
        chosen = heads if session_ids is None else {i: heads[i] for i in session_ids if i in heads}
        due = {
            session_id: head
            for session_id, head in chosen.items()
            if head.seq > head.checkpoint_seq
        }
        if not due or not self.checkpoint_every or self.broken is not None:
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
        expected: tuple[type[Exception], ...] = (*self.backend.io_errors, StoreError)
        try:
            await self._thread.run(
                functools.partial(self.backend.write, plan, self.backend.prepare(plan))
            )
        except expected:
            # Checkpoints are a cache of the log; the next open folds a longer tail instead.
            await trio.lowlevel.checkpoint()
            return
        self.transactions += 1
        for session_id, head in due.items():
            self._heads[session_id] = head._replace(checkpoint_seq=head.seq)
