"""Takeover between real broker processes on one PostgreSQL database (issue 22 step 4).

Each broker is a process of its own (``tests/takeover_workload.py``), standing in for a host:
it opens a broker on the database, creates or resumes a session and asks questions, printing
each acknowledged one. The tests kill -9 the owner mid-question, pause it (SIGSTOP) past its
lease and continue it (SIGCONT) after another process took its session over, and try to take a
live owner's session; then they read the database themselves: the chain verifies, every
acknowledged question is there with its outcome, and nothing of a fenced owner landed after
the takeover. Every wait is bounded; a worker left running is killed.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from broker.store._logtools import verify_reader

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._reader import open_postgres_reader  # noqa: E402

pytestmark = pytest.mark.slow

WORKLOAD = Path(__file__).with_name("takeover_workload.py")
TTL = 1.0
#: Bound of any one wait on a worker.
WAIT = 30.0


@attrs.define(eq=False)
class Worker:
    """One broker process and the lines it printed (read by a thread, so no wait blocks)."""

    tag: str
    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = attrs.field(factory=queue.Queue)
    seen: list[str] = attrs.field(factory=list)

    @classmethod
    def start(
        cls, dsn: str, tag: str, which: str, questions: int | None = None, ttl: float = TTL
    ) -> Worker:
        argv = [sys.executable, str(WORKLOAD), dsn, str(ttl), tag, which]
        if questions is not None:
            argv.append(str(questions))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        worker = cls(tag=tag, proc=proc)
        threading.Thread(target=worker._pump, daemon=True).start()
        return worker

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, deadline: float) -> str | None:
        """The next line printed (None at EOF); fails the test at *deadline*."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"worker {self.tag} printed nothing in time; last: {self.seen[-10:]}")
        if line is not None:
            self.seen.append(line)
        return line

    def expect(self, prefix: str) -> str:
        deadline = time.monotonic() + WAIT
        while True:
            line = self.next_line(deadline)
            if line is None:
                pytest.fail(f"worker {self.tag} ended before {prefix!r}: {self.seen[-10:]}")
            if line.startswith(prefix):
                return line

    def session(self) -> tuple[str, int]:
        _, session_id, seq = self.expect("session ").split()
        return session_id, int(seq)

    def wait_acks(self, count: int) -> None:
        while len(self.acks()) < count:
            self.expect("ack ")

    def finish(self) -> int:
        """Read everything it prints until it exits; its exit status."""
        deadline = time.monotonic() + WAIT
        while self.next_line(deadline) is not None:
            pass
        return self.proc.wait(timeout=WAIT)

    def acks(self) -> dict[str, str]:
        """call id → outcome of every question it acknowledged."""
        return {line.split()[1]: line.split()[2] for line in self.seen if line.startswith("ack ")}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=WAIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The workers a test starts: killed at the end whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def _log(dsn: str, session_id: str) -> list[dict[str, Any]]:
    """The session's events as stored (verifying the whole store first: chains, pairing)."""
    with open_postgres_reader(dsn) as reader:
        verify_reader(reader)
        return [json.loads(row.line) for row in reader.rows(session_id)]


def _lease(dsn: str, session_id: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT owner, epoch FROM broker.sessions WHERE id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return tuple(row)


def _outcomes(log: list[dict[str, Any]]) -> dict[str, str]:
    """call id → recorded outcome, for every question of *log* that was decided."""
    calls = {e["data"]["id"]: e["data"].get("callId") for e in log if e["type"] == "approval/asked"}
    return {
        calls[e["data"]["id"]]: e["data"]["outcome"] for e in log if e["type"] == "approval/decided"
    }


def test_kill_9_mid_question_another_process_takes_over(
    postgres_dsn: str, workers: list[Worker]
) -> None:
    a = Worker.start(postgres_dsn, "A", "new")
    workers.append(a)
    session_id, _ = a.session()
    a.wait_acks(30)
    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.finish()
    acked = a.acks()
    assert len(acked) >= 30

    b = Worker.start(postgres_dsn, "B", session_id, questions=6)
    workers.append(b)
    _, taken_at = b.session()
    took = time.monotonic() - killed
    assert b.finish() == 0
    assert b.seen[-1] == "done"

    log = _log(postgres_dsn, session_id)  # verifies
    recorded = _outcomes(log)
    # Every question A acknowledged before the kill is there, with its outcome.
    assert {call: recorded.get(call) for call in acked} == acked
    # What A left open was closed by B's claim, at the end of A's part of the log: its open
    # question (if any) cancelled with recovered: true, its open turn (if any) interrupted.
    mine = log[:taken_at]
    recovery = [
        n
        for n, e in enumerate(mine)
        if e["data"].get("recovered") or e["data"].get("reason", {}) == {"kind": "interrupted"}
    ]
    assert recovery == list(range(taken_at - len(recovery), taken_at))
    assert all(mine[n]["data"].get("outcome", "cancelled") == "cancelled" for n in recovery)
    assert not {_call(log, mine[n]) for n in recovery} & set(acked)
    # B went on after the takeover: its questions follow, with their outcomes.
    assert {call: recorded.get(call) for call in b.acks()} == b.acks()
    assert len(b.acks()) == 6
    assert _lease(postgres_dsn, session_id) == (None, 2)  # B gave it back at exit
    # The takeover waited for the lease (at most a ttl after the last renewal) and no longer
    # than it took B's process to start and retry.
    assert took < TTL + 10


def _call(log: list[dict[str, Any]], event: dict[str, Any]) -> str | None:
    """The call id of the question *event* decides (None for any other event)."""
    if event["type"] != "approval/decided":
        return None
    for e in log:
        if e["type"] == "approval/asked" and e["data"]["id"] == event["data"]["id"]:
            return str(e["data"].get("callId"))
    return None


def test_a_paused_owner_lands_nothing_after_the_takeover(
    postgres_dsn: str, workers: list[Worker]
) -> None:
    """SIGSTOP A past its lease, B takes the session over, SIGCONT A: A's next append is
    fenced (its question fails closed and its session ends) and zero events of A land after
    the takeover — the log after B's claim holds B's events only."""
    a = Worker.start(postgres_dsn, "A", "new")
    workers.append(a)
    session_id, _ = a.session()
    a.wait_acks(30)
    a.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()

    b = Worker.start(postgres_dsn, "B", session_id, questions=6)
    workers.append(b)
    _, taken_at = b.session()  # B owns it now (epoch 2); its claim closed A's tail
    assert time.monotonic() - stopped >= TTL * 0.5  # it waited for A's lease
    a.proc.send_signal(signal.SIGCONT)
    _check_fenced_and_nothing_landed(postgres_dsn, session_id, a, b, taken_at)


def test_a_paused_owners_next_write_is_fenced_before_its_next_renewal(
    postgres_dsn: str, workers: list[Worker]
) -> None:
    """The same with a long lease (10 s, renewed every 3.3 s) that runs out on the server's
    clock while A is paused for a moment (set in the past by SQL, as a partition would leave
    it): when A continues, its next renewal is seconds away, so what stops its writes is the
    epoch check inside each group's transaction."""
    a = Worker.start(postgres_dsn, "A", "new", ttl=10.0)
    workers.append(a)
    session_id, _ = a.session()
    a.wait_acks(30)
    a.proc.send_signal(signal.SIGSTOP)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE broker.sessions SET lease_expires_ms = 0 WHERE id = %s", (session_id,))
    b = Worker.start(postgres_dsn, "B", session_id, questions=6)
    workers.append(b)
    _, taken_at = b.session()
    a.proc.send_signal(signal.SIGCONT)
    _check_fenced_and_nothing_landed(postgres_dsn, session_id, a, b, taken_at)


def _check_fenced_and_nothing_landed(
    dsn: str, session_id: str, a: Worker, b: Worker, taken_at: int
) -> None:
    """A (continued after B took over at seq *taken_at*) failed closed with the fence, and
    the log after *taken_at* holds B's events only."""
    status = a.finish()
    assert b.finish() == 0, b.seen[-5:]

    failed = [line for line in a.seen if line.startswith("failed ")]
    assert status == 3, a.seen[-5:]
    assert len(failed) == 1, a.seen[-5:]
    assert "SessionFencedError" in failed[0] or "taken over" in failed[0], failed

    log = _log(dsn, session_id)  # verifies
    after = log[taken_at:]
    calls = {e["data"]["id"]: e["data"].get("callId") for e in log if e["type"] == "approval/asked"}
    # Zero events of A after the takeover: every question there is B's, and B's turn frames them.
    asked_after = [e for e in after if e["type"] == "approval/asked"]
    decided_after = [e for e in after if e["type"] == "approval/decided"]
    assert [calls[e["data"]["id"]] for e in asked_after] == [f"B-{n}" for n in range(6)]
    assert {calls[e["data"]["id"]] for e in decided_after} == {f"B-{n}" for n in range(6)}
    assert len(after) == 6 * 2 + 2 * 2  # 6 questions in 2 turns of 3
    # Every question either process acknowledged is in the log with its outcome.
    recorded = _outcomes(log)
    for worker in (a, b):
        assert {call: recorded.get(call) for call in worker.acks()} == worker.acks()
    # A's acknowledged questions all landed before the takeover.
    before = _outcomes(log[:taken_at])
    assert set(a.acks()) <= set(before)


def test_a_live_owners_session_cannot_be_taken(postgres_dsn: str, workers: list[Worker]) -> None:
    a = Worker.start(postgres_dsn, "A", "new")
    workers.append(a)
    session_id, _ = a.session()
    a.wait_acks(3)
    time.sleep(TTL * 2)  # two ttls: A renews its lease meanwhile
    b = Worker.start(postgres_dsn, "B", f"try:{session_id}")
    workers.append(b)
    assert b.finish() == 4
    [owned] = [line for line in b.seen if line.startswith("owned ")]
    assert f"session {session_id!r} in postgresql store" in owned
    assert "is owned by " in owned
    assert "until its lease expires at" in owned
    acks = len(a.acks())
    a.wait_acks(acks + 3)  # A is untouched and goes on
    assert a.proc.poll() is None
    owner, epoch = _lease(postgres_dsn, session_id)
    assert epoch == 1
    assert owner is not None
    assert owner in owned
