"""One dedicated OS thread that runs blocking jobs for one trio task, one at a time.

Synopsis::

    thread = WorkerThread(name="broker-sqlite")
    thread.start()
    conn = await thread.run(lambda: sqlite3.connect(path))   # created on the worker thread
    await thread.run(lambda: conn.execute("..."))            # ... and only ever used there
    await thread.stop()

Why not ``trio.to_thread.run_sync``: its thread cache may run consecutive jobs on different
threads, and a ``sqlite3`` connection must stay on the thread that made it. A job is handed over
through a ``queue.Queue`` of size 1 (the owner awaits each job, so it never holds more) and its
result comes back through :meth:`trio.lowlevel.TrioToken.run_sync_soon`, which reschedules the
waiting task directly; no thread is created per job. ``submit(..., handoff=True)`` waits (at most
~1 ms, GIL released) until the thread has taken the job, so that it starts at once instead of
waiting for the GIL while the trio thread is busy. ``submit(..., chained=True)`` queues a second
job behind the one in flight: the thread starts it the moment the first finished — no trip
through the trio thread in between — and skips it (:class:`JobSkipped`) if the first failed.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

import attrs
import outcome
import trio

__all__ = ["Chained", "JobSkipped", "WorkerThread"]

T = TypeVar("T")
# How long submit(handoff=True) blocks the trio thread at most, waiting for the thread to take
# the job (normally a thread wake-up, ~0.05 ms).
_HANDOFF_TIMEOUT = 0.001


class JobSkipped(Exception):
    """A chained job was not run: the job before it failed, or its owner dropped it."""


@attrs.define(eq=False)
class Chained:
    """The handle of a job queued with ``chained=True``: :meth:`drop` it before the thread
    takes it and it is skipped (a flag the thread reads; set on the trio thread)."""

    dropped: bool = False

    def drop(self) -> None:
        """Skip the job if the thread has not started it yet (it may already have)."""
        self.dropped = True


@attrs.define(eq=False)
class WorkerThread:
    """A daemon thread named *name* that runs the jobs given to :meth:`run` in order.

    Invariant: at most two jobs are submitted and not yet delivered — one in flight and, with
    ``chained=True``, one queued behind it (one owner task submits).
    """

    name: str
    _jobs: queue.Queue[Callable[[], None] | None] = attrs.field(
        init=False, factory=lambda: queue.Queue(maxsize=2)
    )
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    # Jobs submitted whose result was not delivered yet (0, 1, or 2 with a chained one).
    _pending: int = attrs.field(default=0, init=False)
    # Whether the last job the thread ran failed. Invariant: only the thread touches it.
    _last_failed: bool = attrs.field(default=False, init=False)
    _stopped: bool = attrs.field(default=False, init=False)

    def start(self) -> None:
        """Start the thread (sync, does not block)."""
        if self._thread is not None:
            raise RuntimeError(f"worker thread {self.name!r} was already started")
        # daemon: a process that dies with a job in flight behaves like a crash, which the
        # store recovers from; it must never hang interpreter exit.
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    @property
    def busy(self) -> bool:
        """True while a job is queued or running (until its result was delivered)."""
        return self._pending > 0

    def submit(
        self,
        fn: Callable[[], T],
        on_done: Callable[[outcome.Outcome[T]], None],
        *,
        handoff: bool = False,
        chained: bool = False,
    ) -> Chained | None:
        """Start ``fn()`` on the thread and return at once; ``on_done(result)`` is called later on
        the trio thread (as a plain sync callback, so it must not raise) once *fn* finished.

        *handoff*: block (at most ~1 ms, the GIL released) until the thread has taken the job.
        Without it, a thread woken while the trio thread runs Python code waits for the GIL —
        up to the interpreter's switch interval (5 ms) — so the job would only start once the
        trio thread idles, serialising the two. With it, the job is under way (and releases the
        GIL inside SQLite) before the trio thread carries on.

        *chained*: queue the job behind the one in flight (exactly one must be) and return its
        :class:`Chained` handle. The thread runs it right after that one — the thread does not
        go idle, nor wait for the trio thread to hand it over — unless that one failed (its
        result was an :class:`outcome.Error`) or the handle was dropped: then ``on_done`` gets
        ``outcome.Error(JobSkipped())`` and *fn* never runs. Results are delivered in order.

        Raises :class:`RuntimeError` if a job is already in flight (two, with *chained*; none
        without). Must be called from the trio thread.
        """
        if self._thread is None or self._stopped:
            raise RuntimeError(f"worker thread {self.name!r} is not running: start it first")
        if self._pending != (1 if chained else 0):
            raise RuntimeError(
                f"worker thread {self.name!r} is busy: one job at a time, and a chained job "
                "only behind exactly one in flight"
            )
        self._pending += 1
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[T]) -> None:
            self._pending -= 1
            on_done(result)

        handle = Chained() if chained else None
        taken = threading.Lock() if handoff and not chained else None

        def job() -> None:
            if taken is not None:
                taken.release()
            result: outcome.Outcome[T]
            if handle is not None and (self._last_failed or handle.dropped):
                result = outcome.Error(JobSkipped())
            else:
                result = outcome.capture(fn)
                self._last_failed = isinstance(result, outcome.Error)
            # RunFinishedError: the run died under us; nobody is left to tell.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(deliver, result)

        if taken is None:
            self._jobs.put_nowait(job)
            return handle
        taken.acquire()
        self._jobs.put_nowait(job)
        # A bounded wait, not blocking I/O: the thread is idle (one job at a time) and only has to
        # wake up; on timeout the job simply starts later.
        taken.acquire(timeout=_HANDOFF_TIMEOUT)
        return None

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the thread; return its result or raise its exception.

        Cancellation: not a cancellation point — it always waits for *fn* to finish, because a
        job that is half done on another thread cannot be abandoned safely (the owner of the
        result, e.g. a committed transaction, must learn about it). Keep jobs short.
        """
        task = trio.lowlevel.current_task()
        self.submit(fn, functools.partial(trio.lowlevel.reschedule, task))

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED

        value: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return value

    async def stop(self) -> None:
        """Let the thread finish and join it. Idempotent.

        Cancellation: shielded; the thread has no job left, so the join is immediate.
        """
        thread = self._thread
        if thread is None or self._stopped:
            await trio.lowlevel.checkpoint()
            return
        self._stopped = True
        self._jobs.put_nowait(None)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(thread.join)
