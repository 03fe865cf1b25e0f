"""Recovery at open-for-writing: dangling asks closed as cancelled, open turns interrupted.

Includes the real crash test: a subprocess appending through the store is SIGKILLed at random
points, and every append it reported as acknowledged must be there after recovery.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from broker._codec import decode_event, encode_event
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    Event,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker._projection import ApprovalState
from broker._vocabulary import Outcome
from broker.store._logtools import verify_store
from broker.store._recovery import RecoveredSession, RecoveryReport, recovery_events
from broker.store.sqlite import open_sqlite_reader, open_sqlite_store

WORKLOAD = Path(__file__).with_name("crash_workload.py")
INTERRUPTED = TurnEndReason(kind="interrupted")


def _lines(path: Path, session_id: str) -> list[str]:
    with open_sqlite_reader(path) as reader:
        return [row.line for row in reader.rows(session_id)]


async def _write_crash_tail(path: Path) -> None:
    """Leave the store as a crashed writer would: asks without decisions, a turn open.

    Closing the store cleanly looks the same as a crash to the next writer: only the log
    counts, and it has dangling asks.
    """
    async with open_sqlite_store(path, checkpoint_every=3) as store:
        await store.append("a", [TurnStart(turn=1)])
        await store.append("a", [ApprovalAsked(id="a-1", tool_name="bash")])
        await store.append("a", [ApprovalDecided(id="a-1", outcome=Outcome.ALLOWED_ONCE)])
        await store.append("a", [ApprovalAsked(id="a-3", tool_name="bash")])
        await store.append("a", [ApprovalAsked(id="a-2", tool_name="edit")])
        await store.append("b", [TurnStart(turn=4)])
        await store.append("c", [TurnStart(turn=1)])
        await store.append("c", [TurnEnd(turn=1, reason=TurnEndReason(kind="completed"))])


async def test_recovery_closes_dangling_asks_then_the_open_turn(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        await _write_crash_tail(path)
        async with open_sqlite_store(path) as store:
            report = store.recovery
            assert await store.load_state("a") == ApprovalState(turn=1, events=8)
    assert report == RecoveryReport(
        sessions_checked=3,
        sessions=(
            RecoveredSession(session_id="a", cancelled=("a-3", "a-2"), interrupted_turn=1),
            RecoveredSession(session_id="b", cancelled=(), interrupted_turn=4),
        ),
    )
    assert report.summary() == (
        "recovery: 3 sessions checked, closed 2 dangling asks as cancelled and ended 2 open "
        "turns as interrupted in 2 sessions"
    )
    assert _lines(path, "a")[5:] == [
        '{"type":"approval/decided","data":{"id":"a-3","outcome":"cancelled","recovered":true}}',
        '{"type":"approval/decided","data":{"id":"a-2","outcome":"cancelled","recovered":true}}',
        '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"interrupted"}}}',
    ]
    assert _lines(path, "b")[1:] == [encode_event(TurnEnd(turn=4, reason=INTERRUPTED))]
    assert len(_lines(path, "c")) == 2
    verify_store(path)


async def test_recovery_runs_once(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        await _write_crash_tail(path)
        async with open_sqlite_store(path) as store:
            assert not store.recovery.clean
        async with open_sqlite_store(path) as store:
            assert store.recovery.clean
            assert store.recovery.summary() == ("recovery: 3 sessions checked, nothing to recover")


async def test_a_pending_ask_before_the_checkpoint_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        async with open_sqlite_store(path, checkpoint_every=2) as store:
            await store.append("s", [TurnStart(turn=1)])
            await store.append("s", [ApprovalAsked(id="early", tool_name="bash")])
            for n in range(5):
                await store.append("s", [ApprovalGrant(tool_name=f"t{n}")])
        with open_sqlite_reader(path) as reader:
            checkpoint = reader.checkpoint("s")
            assert checkpoint is not None
            assert checkpoint.seq == 7
        async with open_sqlite_store(path, checkpoint_every=2) as store:
            assert store.recovery.cancelled_asks == 1
            assert store.recovery.interrupted_turns == 1
    verify_store(path)


def test_recovery_events_is_pure_and_checks_its_input() -> None:
    state = ApprovalState(turn=2, turn_open=True, pending=frozenset({"x", "y"}), events=9)
    events, entry = recovery_events("s", state, ["y", "x"])
    assert events == (
        ApprovalDecided(id="y", outcome=Outcome.CANCELLED, recovered=True),
        ApprovalDecided(id="x", outcome=Outcome.CANCELLED, recovered=True),
        TurnEnd(turn=2, reason=INTERRUPTED),
    )
    assert entry == RecoveredSession(session_id="s", cancelled=("y", "x"), interrupted_turn=2)
    assert recovery_events("s", ApprovalState(turn=2), []) == ((), None)
    with pytest.raises(
        ValueError, match=r"^pending_in_log_order must hold exactly the state's pending ids$"
    ):
        recovery_events("s", state, ["x"])


# ----------------------------------------------------------------------- the crash test


async def _run_and_kill(path: Path, seed: int) -> list[tuple[str, int, str]]:
    """Run the workload, SIGKILL it a random moment after a random number of acks; return
    every ack it printed (all of them: the pipe is drained after the kill)."""
    rng = random.Random(seed)
    target = rng.randint(20, 600)
    acks: list[tuple[str, int, str]] = []
    pending = b""

    def parse(chunk: bytes | bytearray) -> None:
        nonlocal pending
        *complete, pending = (pending + bytes(chunk)).split(b"\n")
        for line in complete:
            _, session_id, seq, text = line.decode().split(" ", 3)
            acks.append((session_id, int(seq), text))

    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKLOAD), str(path), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        while len(acks) < target and (chunk := await process.stdout.receive_some()):
            parse(chunk)
        with trio.move_on_after(rng.uniform(0, 0.05)):
            while chunk := await process.stdout.receive_some():
                parse(chunk)
        process.send_signal(signal.SIGKILL)
        await process.wait()
        while chunk := await process.stdout.receive_some():
            parse(chunk)
        errors = await process.stderr.receive_some()
        assert errors == b"", errors.decode()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            await process.stdout.aclose()
            await process.stderr.aclose()
    assert process.returncode == -signal.SIGKILL
    return acks


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
async def test_every_acknowledged_append_survives_sigkill(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "crash.db"
    with trio.fail_after(15):
        acks = await _run_and_kill(path, seed)
        assert acks, "the workload acknowledged nothing before it was killed"
        async with open_sqlite_store(path) as store:
            report = store.recovery
            logs: dict[str, list[Event]] = {}
            for session_id in store.session_ids():
                logs[session_id] = await store.read(session_id)
    # After recovery the whole store verifies strictly: chains, turns, every ask paired.
    verify_store(path)
    with open_sqlite_reader(path) as reader:
        stored = {
            session_id: {row.seq: row.line for row in reader.rows(session_id)}
            for session_id in logs
        }
    for session_id, seq, line in acks:
        assert stored[session_id].get(seq) == line, (session_id, seq)
    # Recovery closed exactly the dangling asks, at the tail, as cancelled; it granted nothing.
    recovered = {entry.session_id: entry for entry in report.sessions}
    for session_id, events in logs.items():
        tail = [e for e in events if isinstance(e, ApprovalDecided) and e.recovered]
        entry = recovered.get(session_id)
        assert [e.id for e in tail] == ([] if entry is None else list(entry.cancelled))
        assert all(e.outcome is Outcome.CANCELLED for e in tail)
        closing = len(tail) + (1 if entry is not None and entry.interrupted_turn else 0)
        if closing:
            original = events[: len(events) - closing]
            assert not any(isinstance(e, ApprovalDecided) and e.recovered for e in original)
            if entry is not None and entry.interrupted_turn is not None:
                assert events[-1] == TurnEnd(turn=entry.interrupted_turn, reason=INTERRUPTED)
        asked = [e.id for e in events if isinstance(e, ApprovalAsked)]
        decided = [e.id for e in events if isinstance(e, ApprovalDecided)]
        assert sorted(asked) == sorted(decided)
    # Every acknowledged line decodes, and a second open finds nothing left to recover.
    assert all(decode_event(line) for _, _, line in acks)
    with trio.fail_after(10):
        async with open_sqlite_store(path) as store:
            assert store.recovery.clean
