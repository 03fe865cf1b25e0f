"""The SQLite writer's worker thread: one job at a time, plus one chained behind it."""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Callable

import outcome
import pytest
import trio

from broker.store._worker_thread import JobSkipped, WorkerThread


@pytest.fixture
async def thread() -> AsyncIterator[WorkerThread]:
    worker = WorkerThread(name="test-worker")
    worker.start()
    try:
        yield worker
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await worker.stop()


class Results:
    """Delivered results in delivery order; wait() until *count* have arrived."""

    def __init__(self) -> None:
        self.got: list[tuple[str, outcome.Outcome[str]]] = []
        self._changed = trio.Event()

    def on_done(self, name: str) -> Callable[[outcome.Outcome[str]], None]:
        def record(result: outcome.Outcome[str]) -> None:
            self.got.append((name, result))
            self._changed.set()
            self._changed = trio.Event()

        return record

    async def wait(self, count: int) -> None:
        with trio.fail_after(10):
            while len(self.got) < count:
                await self._changed.wait()


def gated(release: threading.Event, value: str) -> Callable[[], str]:
    """A job that holds the thread until *release* is set (so a second can be chained)."""

    def job() -> str:
        if not release.wait(timeout=10):
            raise TimeoutError("the test never released the job")
        return value

    return job


def failing() -> str:
    raise OSError("disk full")


async def test_a_chained_job_runs_right_after_the_one_in_flight(thread: WorkerThread) -> None:
    release = threading.Event()
    ran_on: list[str] = []
    results = Results()
    thread.submit(gated(release, "first"), results.on_done("first"))

    def second() -> str:
        ran_on.append(threading.current_thread().name)
        return "second"

    thread.submit(second, results.on_done("second"), chained=True)
    assert thread.busy
    release.set()
    await results.wait(2)
    assert [(name, result.unwrap()) for name, result in results.got] == [
        ("first", "first"),
        ("second", "second"),
    ]
    assert ran_on == ["test-worker"]
    assert not thread.busy


async def test_a_job_chained_behind_a_failed_one_is_skipped(thread: WorkerThread) -> None:
    results = Results()
    ran: list[str] = []
    release = threading.Event()

    def first() -> str:
        gated(release, "")()
        return failing()

    def second() -> str:
        ran.append("second")
        return "second"

    thread.submit(first, results.on_done("first"))
    thread.submit(second, results.on_done("second"), chained=True)
    release.set()
    await results.wait(2)
    (first_name, first_result), (second_name, second_result) = results.got
    assert (first_name, second_name) == ("first", "second")
    assert isinstance(first_result, outcome.Error)
    assert isinstance(first_result.error, OSError)
    assert isinstance(second_result, outcome.Error)
    assert isinstance(second_result.error, JobSkipped)
    assert ran == []
    # The thread carries on: the next job runs.
    assert await thread.run(lambda: "after") == "after"


async def test_a_dropped_chained_job_is_skipped(thread: WorkerThread) -> None:
    results = Results()
    release = threading.Event()
    ran: list[str] = []
    thread.submit(gated(release, "first"), results.on_done("first"))

    def second() -> str:
        ran.append("second")
        return "second"

    handle = thread.submit(second, results.on_done("second"), chained=True)
    assert handle is not None
    handle.drop()
    release.set()
    await results.wait(2)
    assert results.got[0][1].unwrap() == "first"
    skipped = results.got[1][1]
    assert isinstance(skipped, outcome.Error)
    assert isinstance(skipped.error, JobSkipped)
    assert ran == []


async def test_a_chained_job_needs_exactly_one_in_flight(thread: WorkerThread) -> None:
    busy = re.escape(
        "worker thread 'test-worker' is busy: one job at a time, and a chained job only "
        "behind exactly one in flight"
    )
    results = Results()
    with pytest.raises(RuntimeError, match=f"^{busy}$"):
        thread.submit(lambda: "x", results.on_done("alone"), chained=True)
    release = threading.Event()
    thread.submit(gated(release, "first"), results.on_done("first"))
    with pytest.raises(RuntimeError, match=f"^{busy}$"):
        thread.submit(lambda: "x", results.on_done("second"))
    thread.submit(lambda: "second", results.on_done("second"), chained=True)
    with pytest.raises(RuntimeError, match=f"^{busy}$"):
        thread.submit(lambda: "x", results.on_done("third"), chained=True)
    release.set()
    await results.wait(2)
    assert [result.unwrap() for _, result in results.got] == ["first", "second"]


async def test_submit_on_a_thread_not_started_is_refused() -> None:
    worker = WorkerThread(name="idle")
    with pytest.raises(
        RuntimeError, match=r"^worker thread 'idle' is not running: start it first$"
    ):
        worker.submit(lambda: None, lambda _result: None)
    await trio.lowlevel.checkpoint()
