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
waiting for the GIL while the trio thread is busy.
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

__all__ = ["WorkerThread"]

T = TypeVar("T")
# How long submit(handoff=True) blocks the trio thread at most, waiting for the thread to take
# the job (normally a thread wake-up, ~0.05 ms).
_HANDOFF_TIMEOUT = 0.001


@attrs.define(eq=False)
class WorkerThread:
    """A daemon thread named *name* that runs the jobs given to :meth:`run` in order.

    Invariant: at most one job is in flight (one owner task calls :meth:`run` at a time).
    """

    name: str
    _jobs: queue.Queue[Callable[[], None] | None] = attrs.field(
        init=False, factory=lambda: queue.Queue(maxsize=1)
    )
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _busy: bool = attrs.field(default=False, init=False)
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
        return self._busy

    def submit(
        self,
        fn: Callable[[], T],
        on_done: Callable[[outcome.Outcome[T]], None],
        *,
        handoff: bool = False,
    ) -> None:
        """Start ``fn()`` on the thread and return at once; ``on_done(result)`` is called later on
        the trio thread (as a plain sync callback, so it must not raise) once *fn* finished.

        *handoff*: block (at most ~1 ms, the GIL released) until the thread has taken the job.
        Without it, a thread woken while the trio thread runs Python code waits for the GIL —
        up to the interpreter's switch interval (5 ms) — so the job would only start once the
        trio thread idles, serialising the two. With it, the job is under way (and releases the
        GIL inside SQLite) before the trio thread carries on.

        Raises :class:`RuntimeError` if a job is already in flight. Must be called from the trio
        thread.
        """
        if self._thread is None or self._stopped:
            raise RuntimeError(f"worker thread {self.name!r} is not running: start it first")
        if self._busy:
            raise RuntimeError(f"worker thread {self.name!r} is busy: one job at a time")
        self._busy = True
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[T]) -> None:
            self._busy = False
            on_done(result)

        taken = threading.Lock() if handoff else None

        def job() -> None:
            if taken is not None:
                taken.release()
            result = outcome.capture(fn)
            # RunFinishedError: the run died under us; nobody is left to tell.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(deliver, result)

        if taken is None:
            self._jobs.put_nowait(job)
            return
        taken.acquire()
        self._jobs.put_nowait(job)
        # A bounded wait, not blocking I/O: the thread is idle (one job at a time) and only has to
        # wake up; on timeout the job simply starts later.
        taken.acquire(timeout=_HANDOFF_TIMEOUT)

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
