"""Scale: 1 -> 10 000 live sessions, each with a scoped answerer; then 1 000 -> 1 000 000.

    python -m bench.scale [--quick]

Memory per idle session (tracemalloc, after a full collection; each session holds its actor
task, its nursery, its bounded inbox and a scoped answerer registered with
``session.add_answerer``) — target ≤ 4 KiB — and the p50 latency of an ask on one session when
N sessions are live, as a ratio to N = 1 measured in the same run — target ≤ 1.2×. The memory
floor of the design, measured in the same run: one trio task blocked on a bounded memory channel
inside its own nursery.

At mass scale (1 000, 100 000 and 1 000 000 idle sessions; 1 000 and 10 000 with ``--quick``),
in memory and on a SQLite file, each count in a process of its own (``--child``): resident
memory per session (RSS, from ``/proc``) and for the whole million (target ≤ 8 GiB), the open
rate (256 tasks open sessions side by side, as a runtime's agents would), the ask p50 on one
session of the crowd against the same ask on a broker with one session (≤ 1.2×), the close time
of the crowd's broker against its open time (≤ 1×), and the lines a clean close logged at
WARNING or above (0).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import TypedDict

import trio

from bench._stats import summary_us
from bench._suite import Figure, Progress, Result, standalone
from broker import (
    AnswerNext,
    ApprovalRequest,
    Broker,
    MemoryStore,
    Outcome,
    Session,
    open_broker,
)


async def allow(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


async def _open(broker: Broker, count: int, progress: Progress | None = None) -> list[Session]:
    sessions = []
    for _ in range(count):
        session = await broker.start_session()
        session.add_answerer(allow)
        sessions.append(session)
        if progress is not None:
            progress.step()
    return sessions


async def memory_per_session(count: int) -> float:
    async with open_broker(store=MemoryStore()) as broker:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = await _open(broker, count, Progress(f"memory: {count} sessions", count))
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(kept) == count
    return (after - before) / count


async def floor_per_actor(count: int) -> float:
    async def actor(
        receive: trio.MemoryReceiveChannel[int],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with trio.open_nursery():
            task_status.started()
            async for _ in receive:
                pass

    async with trio.open_nursery() as root:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            senders = []
            for _ in range(count):
                send, receive = trio.open_memory_channel[int](64)
                await root.start(actor, receive)
                senders.append(send)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        for send in senders:
            await send.aclose()
    return (after - before) / count


async def latency_pair(count: int, asks: int) -> tuple[dict[str, float], dict[str, float]]:
    """Ask latency summaries (:func:`summary_us`) with *count* live sessions, and with 1, in
    alternating blocks of one run (both brokers alive at once), so drift hits both alike."""
    async with open_broker(store=MemoryStore()) as crowd, open_broker(store=MemoryStore()) as one:
        sessions = await _open(crowd, count, Progress(f"latency: {count} sessions", count))
        alone = (await _open(one, 1))[0]
        target = sessions[len(sessions) // 2]
        samples = await _alternate(crowd, target, one, alone, asks, warmup=200, block=100)
    return summary_us(samples["crowd"]), summary_us(samples["one"])


async def _alternate(
    crowd: Broker, target: Session, one: Broker, alone: Session, asks: int, warmup: int, block: int
) -> dict[str, list[int]]:
    """Ask latencies (ns) on *target* among the crowd and on *alone*, in alternating blocks of
    one run (both brokers alive at once), so drift hits both alike."""
    samples: dict[str, list[int]] = {"crowd": [], "one": []}
    async with target.turn(), alone.turn():
        pairs = (
            ("crowd", crowd, ApprovalRequest(agent=target.agent, tool_name="bash")),
            ("one", one, ApprovalRequest(agent=alone.agent, tool_name="bash")),
        )
        for _, broker, request in pairs:  # warm-up
            for _ in range(warmup):
                await broker.request(request)
        for _ in range(max(1, asks // block)):
            for name, broker, request in pairs:
                for _ in range(block):
                    start = time.perf_counter_ns()
                    await broker.request(request)
                    samples[name].append(time.perf_counter_ns() - start)
    return samples


async def measure_async(quick: bool) -> Result:
    counts = [1, 10, 100, 1_000, 10_000]
    asks = 1_000 if quick else 5_000
    memory_n = 2_000 if quick else 10_000
    per_session = await memory_per_session(memory_n)
    floor = await floor_per_actor(memory_n)
    measured = [(n, *await latency_pair(n, asks)) for n in counts]
    latencies: list[tuple[float, ...]] = [
        (float(n), c["p50"], c["p10"], c["p90"]) for n, c, _ in measured
    ]
    _, crowd, alone = measured[-1]
    most, one = crowd["p50"], alone["p50"]
    return Result(
        name="scale",
        figures=(
            Figure(
                label=f"memory per idle session with a scoped answerer ({memory_n} sessions)",
                value=per_session / 1024,
                unit="KiB",
                baseline=floor / 1024,
                baseline_label="floor: one trio task + nursery + bounded channel",
                target="<= 4 KiB",
                met=per_session <= 4096,
            ),
            Figure(
                label="ask latency p50 with 10 000 live sessions",
                value=most,
                unit="µs",
                baseline=one,
                baseline_label="with 1 live session",
                target="<= 1.2x",
                met=most <= 1.2 * one,
            ),
        ),
        series={
            "ask latency p50 (µs) vs live sessions": {
                "broker.request(), in-memory store": latencies
            }
        },
    )


# -- mass scale: one process per (count, store) ------------------------------------------------

MASS_OPENERS = 256
MASS_ASKS = 2_000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _open_side_by_side(broker: Broker, count: int) -> Session:
    """Open *count* sessions with a scoped answerer, MASS_OPENERS at a time; one of them."""
    left = iter(range(count))
    kept: list[Session] = []

    async def opener() -> None:
        for index in left:
            session = await broker.start_session()
            session.add_answerer(allow)
            if index == count // 2:
                kept.append(session)

    async with trio.open_nursery() as openers:
        for _ in range(min(MASS_OPENERS, count)):
            openers.start_soon(opener)
    return kept[0]


async def _p50_pair(
    crowd: Broker, target: Session, one: Broker, alone: Session
) -> tuple[float, float]:
    samples = await _alternate(crowd, target, one, alone, MASS_ASKS, warmup=50, block=50)
    return summary_us(samples["crowd"])["p50"], summary_us(samples["one"])["p50"]


async def _child(count: int, kind: str, folder: str) -> dict[str, float | str]:
    counting = _Counting()
    logging.getLogger().addHandler(counting)

    def store(name: str) -> MemoryStore | Path:
        return MemoryStore() if kind == "memory" else Path(folder) / f"{name}.sqlite"

    async with open_broker(store=store("one")) as one:
        alone = await one.start_session()
        alone.add_answerer(allow)
        gc.collect()
        before = _rss_bytes()
        opened = time.perf_counter()
        async with open_broker(store=store("crowd")) as crowd:
            target = await _open_side_by_side(crowd, count)
            open_s = time.perf_counter() - opened
            gc.collect()
            rss = _rss_bytes() - before
            crowd_p50, one_p50 = await _p50_pair(crowd, target, one, alone)
            closing = time.perf_counter()
        close_s = time.perf_counter() - closing
    return {
        "count": count,
        "rss_bytes": rss,
        "open_s": open_s,
        "close_s": close_s,
        "ask_p50_us": crowd_p50,
        "ask_p50_one_us": one_p50,
        "log_lines": len(counting.lines),
        "first_line": counting.lines[0] if counting.lines else "",
    }


class _Measured(TypedDict):
    count: int
    rss_bytes: int
    open_s: float
    close_s: float
    ask_p50_us: float
    ask_p50_one_us: float
    log_lines: int
    first_line: str


def _run_child(count: int, kind: str) -> _Measured:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        done = subprocess.run(
            [
                sys.executable,
                "-W",
                "error",
                "-m",
                "bench.scale",
                "--child",
                str(count),
                kind,
                folder,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    data: _Measured = json.loads(done.stdout)
    return data


def mass_figures(quick: bool) -> tuple[list[Figure], dict[str, list[tuple[float, ...]]]]:
    counts = [1_000, 10_000] if quick else [1_000, 100_000, 1_000_000]
    figures: list[Figure] = []
    close_series: dict[str, list[tuple[float, ...]]] = {}
    for kind in ("memory", "sqlite"):
        where = "in memory" if kind == "memory" else "on SQLite"
        points = close_series.setdefault(f"close time / open time, {where}", [])
        for count in counts:
            print(f"      scale: {count:,} sessions {where} ...", file=sys.stderr, flush=True)
            got = _run_child(count, kind)
            n = f"{count:,}".replace(",", " ")
            per = got["rss_bytes"] / count
            figures.append(
                Figure(
                    label=f"resident memory per idle session, {n} sessions {where}",
                    value=per / 1024,
                    unit="KiB",
                    target="1 000 000 in <= 8 GiB" if count == 1_000_000 else None,
                    met=got["rss_bytes"] <= 8 * 2**30 if count == 1_000_000 else None,
                )
            )
            figures.append(
                Figure(
                    label=f"open rate, {n} sessions {where}",
                    value=count / got["open_s"],
                    unit="sessions/s",
                )
            )
            figures.append(
                Figure(
                    label=f"ask p50 with {n} live sessions {where}",
                    value=got["ask_p50_us"],
                    unit="µs",
                    baseline=got["ask_p50_one_us"],
                    baseline_label="with 1 live session",
                    target="<= 1.2x",
                    met=got["ask_p50_us"] <= 1.2 * got["ask_p50_one_us"],
                )
            )
            figures.append(
                Figure(
                    label=f"close time of {n} sessions {where}",
                    value=got["close_s"],
                    unit="s",
                    baseline=got["open_s"],
                    baseline_label="their open time",
                    target="<= 1x, 0 lines logged",
                    met=got["close_s"] <= got["open_s"] and got["log_lines"] == 0,
                )
            )
            if got["log_lines"]:
                print(
                    f"      logged {got['log_lines']} lines, first: {got['first_line']}",
                    file=sys.stderr,
                )
            points.append((float(count), got["close_s"] / got["open_s"]))
    return figures, close_series


def measure(quick: bool) -> Result:
    """The suite's entry."""
    result = trio.run(measure_async, quick)
    figures, series = mass_figures(quick)
    return Result(
        name=result.name,
        figures=(*result.figures, *figures),
        series={**result.series, "close time / open time vs live sessions": series},
        notes=result.notes,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        count, kind, folder = int(sys.argv[2]), sys.argv[3], sys.argv[4]
        print(json.dumps(trio.run(_child, count, kind, folder)))
        sys.exit(0)
    sys.exit(standalone(measure, __doc__))
