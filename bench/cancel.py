"""Cancellation latency: from ``signal.abort()`` to the request settled ``cancelled`` with its
``approval/decided`` appended (in-memory store).

    python -m bench.cancel [--quick]

The answerer hangs; the asking task blocks; a second task aborts the signal and takes the time;
the clock stops when the withdrawn ``request()`` has returned — its decided event durable.
Target: p99 under 1 ms. The baseline, measured in the same run, is the floor of any
cancellation in trio: cancelling a task blocked in ``sleep_forever`` until it has resumed.
"""

from __future__ import annotations

import sys
import time

import trio
import trio.testing

from bench._stats import summary_us
from bench._suite import Figure, Result, standalone
from broker import AbortSignal, AnswerNext, ApprovalRequest, MemoryStore, Outcome, open_broker


async def hang(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def measure_async(rounds: int) -> Result:
    withdrawn: list[int] = []
    floor: list[int] = []
    async with open_broker(store=MemoryStore()) as broker, broker.open_session() as session:
        async with broker.answerer(hang), session.turn():
            for _ in range(rounds):
                signal = AbortSignal()
                finished: list[int] = []

                async def ask(signal: AbortSignal = signal, out: list[int] = finished) -> None:
                    outcome = await broker.request(
                        ApprovalRequest(agent=session.agent, tool_name="bash", signal=signal)
                    )
                    out.append(time.perf_counter_ns())
                    assert outcome is Outcome.CANCELLED

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ask)
                    await trio.testing.wait_all_tasks_blocked()
                    start = time.perf_counter_ns()
                    signal.abort()
                withdrawn.append(finished[0] - start)

                resumed: list[int] = []
                blocked = trio.CancelScope()
                async with trio.open_nursery() as nursery:

                    async def sleeper(
                        out: list[int] = resumed, scope: trio.CancelScope = blocked
                    ) -> None:
                        with scope:
                            await trio.sleep_forever()
                        out.append(time.perf_counter_ns())

                    nursery.start_soon(sleeper)
                    await trio.testing.wait_all_tasks_blocked()
                    start = time.perf_counter_ns()
                    blocked.cancel()
                floor.append(resumed[0] - start)
    w, f = summary_us(withdrawn), summary_us(floor)
    return Result(
        name="cancellation",
        figures=(
            Figure(
                label="abort -> settled cancelled, decided appended, p50",
                value=w["p50"],
                unit="µs",
                baseline=f["p50"],
                baseline_label="cancel a blocked trio task until it resumes, p50",
            ),
            Figure(
                label="abort -> settled cancelled, decided appended, p99",
                value=w["p99"],
                unit="µs",
                baseline=f["p99"],
                baseline_label="same floor, p99",
                target="p99 < 1000 µs",
                met=w["p99"] < 1000,
            ),
        ),
    )


def measure(quick: bool) -> Result:
    """The suite's entry: 500 withdrawals (quick) or 5 000."""
    return trio.run(measure_async, 500 if quick else 5_000)


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
