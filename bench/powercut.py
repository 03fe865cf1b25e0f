"""The power-cut loop: the broker on a filesystem that forgets what was not synced.

    python -m bench.powercut [--cuts 500] [--seed S] [--synchronous FULL|NORMAL]
                             [--keep-unsynced] [--scratch DIR]

The store lives on the power-cut filesystem (``tests/powercut``: a FUSE mount that, at a cut,
throws away every byte not fsynced and every directory entry whose directory was not fsynced).
Each round, in this process:

1. arms a cut at a random (seeded) mutating filesystem operation to come, then runs the broker's
   real workload — ``open_broker`` on a SQLite store with *synchronous*, 8 sessions asking
   questions (1–4 per turn) that a scripted answerer allows or rejects, some after a pause —
   recording every question whose ``request()`` returned, with its outcome, as it returns;
   the workload runs until the cut (its next write or sync fails, EIO) or, if the armed cut
   has not come after a few seconds, until a cut made then;
2. unmounts and mounts again: the power comes back, the backing folder holds what was synced;
3. checks, through the new mount: the file opens and ``broker log verify`` (allowing the
   crash tail) is clean; the store reopens for writing — recovery closes each dangling ask
   (``cancelled``) and open turn (``interrupted``) — and verifies strictly; every question
   acknowledged so far (this round's and earlier rounds' on the same file) is in the log
   with its outcome.

A new store file is started every ``--per-store`` cuts (the checks reread the whole file).
Prints the figures; exits 1 when an acknowledged question was lost or a file failed to open
or verify. ``--synchronous NORMAL`` (WAL syncs only at checkpoints) must lose acknowledged
questions: that run shows the harness sees the difference. ``--keep-unsynced`` cuts like a
kill -9 (nothing is dropped): the control case, where NORMAL loses nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from bench.crash import _logged_outcomes
from broker import AnswerNext, ApprovalRequest, Broker, Outcome, Session, open_broker
from broker.store import open_sqlite_store
from broker.store._logtools import verify_store
from broker.store.sqlite._schema import Synchronous
from tests.powercut import PowerCut, powercut_mount

SESSIONS = 8
#: The armed cut falls at a mutating operation drawn from 1..MAX_OPS (a round of the
#: workload makes a few hundred to a few thousand).
MAX_OPS = 1500
#: Seconds a round may run before the harness cuts the power itself.
ROUND_SECONDS = 4.0
#: A bound on everything one round does (open, teardown after the cut, checks).
ROUND_BOUND = 60.0


@dataclass
class Figures:
    """What a run of the loop found."""

    cuts: int = 0
    armed_fired: int = 0  # cuts that fell at the armed operation (the rest: at the time limit)
    acknowledged: int = 0
    lost: int = 0
    failed_files: int = 0
    recovered_asks: int = 0
    interrupted_turns: int = 0
    bytes_dropped: int = 0
    entries_dropped: int = 0
    problems: list[str] = field(default_factory=list)


async def _session(
    broker: Broker, session: Session, rng: random.Random, acked: dict[str, str]
) -> None:
    for turn in range(1_000_000):
        async with session.turn():
            for question in range(rng.randint(1, 4)):
                call_id = f"{session.id}-{turn}-{question}"
                outcome = await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash", call_id=call_id)
                )
                acked[call_id] = outcome.value  # acknowledged: request() returned


async def _workload(
    path: str,
    seed: str,
    synchronous: Synchronous,
    acked: dict[str, str],
    cut_now: Callable[[], object],
) -> None:
    """Run the broker on *path* until the power is cut; *acked* gets each answered question."""
    rng = random.Random(seed)

    async def answerer(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        if rng.random() < 0.3:
            await trio.sleep(rng.uniform(0, 0.01))
        else:
            await trio.lowlevel.checkpoint()
        return rng.choice([Outcome.ALLOWED_ONCE, Outcome.REJECTED])

    async def run() -> None:
        async with open_sqlite_store(path, synchronous=synchronous) as store:
            async with open_broker(store=store) as broker, broker.answerer(answerer):
                async with trio.open_nursery() as nursery:
                    for index in range(SESSIONS):
                        session_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                        session = await broker.start_session(session_id=session_id)
                        nursery.start_soon(
                            _session, broker, session, random.Random(f"{seed}-{index}"), acked
                        )

    async def cut_later() -> None:
        await trio.sleep(ROUND_SECONDS)
        await trio.to_thread.run_sync(cut_now)

    with trio.fail_after(ROUND_BOUND):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut_later)
            # The cut: a write or sync failed (EIO) and the broker stopped with an error.
            with contextlib.suppress(Exception):
                await run()
            nursery.cancel_scope.cancel()


def _dump_tasks() -> None:
    """Print every trio task's await chain (on the trio thread): what a hung round waits on."""

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        print(f"{'  ' * depth}{task.name}", file=sys.stderr)
        coro: object = task.coro
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
            if frame is None:
                frame = getattr(coro, "gi_frame", None)
            if frame is not None:
                where = f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
                print(f"{'  ' * depth}  | {where}", file=sys.stderr)
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child, depth + 1)

    root = trio.lowlevel.current_root_task()
    if root is not None:
        walk(root, 0)


def _run_round(
    path: str,
    seed: str,
    synchronous: Synchronous,
    acked: dict[str, str],
    cut_now: Callable[[], object],
) -> None:
    """:func:`_workload` in a trio run of its own; if it outlives its bound (a wait the
    cancellation cannot reach), the tasks' await chains are printed once, then it waits on."""
    tokens: list[trio.lowlevel.TrioToken] = []

    async def body() -> None:
        tokens.append(trio.lowlevel.current_trio_token())
        await _workload(path, seed, synchronous, acked, cut_now)

    def hung() -> None:
        print(f"a round outlived its bound ({ROUND_BOUND + 30:.0f}s); its tasks:", file=sys.stderr)
        trio.from_thread.run_sync(_dump_tasks, trio_token=tokens[0])

    timer = threading.Timer(ROUND_BOUND + 30, hung)
    timer.daemon = True
    timer.start()
    try:
        trio.run(body)
    finally:
        timer.cancel()


async def _recover(path: str) -> tuple[int, int]:
    async with open_sqlite_store(path) as store:  # FULL, as after a reboot
        report = store.recovery
    return report.cancelled_asks, report.interrupted_turns


def _check(path: str, acked: dict[str, str], figures: Figures, where: str) -> None:
    """The checks after one cut; acknowledged questions found lost leave *acked*."""
    try:
        verify_store(path, allow_pending=True)
    except Exception as exc:
        figures.failed_files += 1
        figures.problems.append(f"{where}: as the cut left it: {type(exc).__name__}: {exc}")
        return
    try:
        asks, turns = trio.run(_recover, path)
        verify_store(path)
    except Exception as exc:
        figures.failed_files += 1
        figures.problems.append(f"{where}: after recovery: {type(exc).__name__}: {exc}")
        return
    figures.recovered_asks += asks
    figures.interrupted_turns += turns
    logged = _logged_outcomes(path)
    for call_id, outcome in list(acked.items()):
        if logged.get(call_id) != outcome:
            figures.lost += 1
            del acked[call_id]
            if figures.lost <= 20:
                figures.problems.append(
                    f"{where}: {call_id} was acknowledged {outcome}, the log says "
                    f"{logged.get(call_id)}"
                )


def run_cuts(
    fs: PowerCut,
    *,
    cuts: int,
    seed: int,
    synchronous: Synchronous = "FULL",
    per_store: int = 25,
    progress: Callable[[int, Figures], None] | None = None,
) -> Figures:
    """*cuts* rounds of the loop on the mounted *fs* (see the module's docstring)."""
    # After a cut the broker warns about every turn it could not close: expected, not shown.
    quiet = logging.getLogger("broker")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    rng = random.Random(seed)
    figures = Figures()
    acked: dict[str, str] = {}
    path = ""
    for round_no in range(cuts):
        if round_no % per_store == 0:
            path = str(fs.mountpoint / f"store-{seed}-{round_no // per_store}.sqlite")
            acked.clear()
            trio.run(_recover, path)  # created and closed cleanly before the first cut
        fs.arm(rng.randint(1, MAX_OPS))
        round_acked: dict[str, str] = {}
        _run_round(path, f"{seed}-{round_no}", synchronous, round_acked, fs.cut)
        fired = fs.is_cut
        fs.cut()
        report = fs.remount()
        figures.cuts += 1
        figures.armed_fired += fired
        figures.acknowledged += len(round_acked)
        figures.bytes_dropped += report.bytes_dropped
        figures.entries_dropped += report.entries_dropped
        acked.update(round_acked)
        _check(path, acked, figures, f"cut {round_no} (op {report.cut_at})")
        if progress is not None:
            progress(round_no, figures)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument(
        "--keep-unsynced",
        action="store_true",
        help="cut like kill -9: keep every unsynced byte (the control case)",
    )
    parser.add_argument("--per-store", type=int, default=25, help="cuts per store file")
    parser.add_argument("--scratch", type=Path, help="folder for the mount (default: a temp)")
    args = parser.parse_args()
    if args.cuts < 1 or args.per_store < 1:
        parser.error("--cuts and --per-store must be at least 1")
    started = time.perf_counter()

    def progress(round_no: int, figures: Figures) -> None:
        if (round_no + 1) % 50 == 0:
            print(
                f"  {round_no + 1} cuts, {figures.acknowledged} acknowledged, "
                f"{figures.lost} lost, {figures.failed_files} files failed "
                f"({time.perf_counter() - started:.0f}s)",
                file=sys.stderr,
                flush=True,
            )

    with tempfile.TemporaryDirectory(prefix="broker-powercut-") as tmp:
        scratch = args.scratch or Path(tmp)
        with powercut_mount(scratch, drop=not args.keep_unsynced) as fs:
            figures = run_cuts(
                fs,
                cuts=args.cuts,
                seed=args.seed,
                synchronous=args.synchronous,
                per_store=args.per_store,
                progress=progress,
            )
    elapsed = time.perf_counter() - started
    mode = "kill -9 (unsynced bytes kept)" if args.keep_unsynced else "power cut"
    print(
        f"power-cut loop: {figures.cuts} cuts ({mode}), synchronous={args.synchronous}, "
        f"seed {args.seed}, {elapsed:.0f}s"
    )
    print(
        f"cuts at the armed operation: {figures.armed_fired}, at the time limit: "
        f"{figures.cuts - figures.armed_fired}"
    )
    print(f"questions acknowledged by request(): {figures.acknowledged}")
    print(f"acknowledged questions lost: {figures.lost}")
    print(f"files that failed to open or verify: {figures.failed_files}")
    print(
        f"recovered: {figures.recovered_asks} dangling asks closed as cancelled, "
        f"{figures.interrupted_turns} open turns ended as interrupted"
    )
    print(
        f"dropped by the cuts: {figures.bytes_dropped:,} unsynced bytes, "
        f"{figures.entries_dropped} unsynced directory entries"
    )
    for problem in figures.problems[:20]:
        print(f"  - {problem}")
    return 1 if figures.lost or figures.failed_files else 0


if __name__ == "__main__":
    sys.exit(main())
