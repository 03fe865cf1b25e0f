"""Scale: 1 -> 10 000 live sessions, each with a scoped answerer.

    python -m bench.scale [--quick]

Memory per idle session (tracemalloc, after a full collection; each session holds its actor
task, its nursery, its bounded inbox and a scoped answerer registered with
``session.add_answerer``) — target ≤ 4 KiB — and the p50 latency of an ask on one session when
N sessions are live, as a ratio to N = 1 measured in the same run — target ≤ 1.2×. The memory
floor of the design, measured in the same run: one trio task blocked on a bounded memory channel
inside its own nursery.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc

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
        samples: dict[str, list[int]] = {"crowd": [], "one": []}
        async with target.turn(), alone.turn():
            pairs = (
                ("crowd", crowd, ApprovalRequest(agent=target.agent, tool_name="bash")),
                ("one", one, ApprovalRequest(agent=alone.agent, tool_name="bash")),
            )
            for _, broker, request in pairs:  # warm-up
                for _ in range(200):
                    await broker.request(request)
            block = 100
            for _ in range(max(1, asks // block)):
                for name, broker, request in pairs:
                    for _ in range(block):
                        start = time.perf_counter_ns()
                        await broker.request(request)
                        samples[name].append(time.perf_counter_ns() - start)
    return summary_us(samples["crowd"]), summary_us(samples["one"])


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


def measure(quick: bool) -> Result:
    """The suite's entry."""
    return trio.run(measure_async, quick)


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
