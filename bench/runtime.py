"""Tool-runtime overheads, each against its baseline in the same run.

    python -m bench.runtime [--quick]

1. a call that needs no approval (one gate that allows) through ``ToolRuntime.execute`` vs
   calling the tool's ``run`` directly;
2. a call whose gate asks, answered at once, through the runtime vs a bare
   ``broker.request()`` of the same question.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable

import trio

from bench._stats import summary_us
from bench._suite import Figure, Result, standalone
from broker import AnswerNext, ApprovalRequest, MemoryStore, Outcome, open_broker
from broker.tools import (
    Allow,
    Ask,
    CallContext,
    GateDecision,
    GateNext,
    ToolCall,
    ToolResult,
    ToolRuntime,
    ToolSpec,
)


class Nop:
    name = "nop"

    def spec(self) -> ToolSpec:
        return ToolSpec(name="nop", description="does nothing", input_schema={"type": "object"})

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        await trio.lowlevel.checkpoint()
        return ToolResult(output="ok")


async def allow(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
    return Allow()


async def ask(call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
    return Ask(reason="bench")


async def answer_at_once(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


async def timed(rounds: int, fn: Callable[[], Awaitable[object]], out: list[int]) -> None:
    for _ in range(rounds):
        start = time.perf_counter_ns()
        await fn()
        out.append(time.perf_counter_ns() - start)


async def measure_async(rounds: int, blocks: int = 10) -> Result:
    tool = Nop()
    call = ToolCall(id="c", name="nop")
    series: dict[str, list[int]] = {k: [] for k in ("direct", "allow", "request", "ask")}
    async with open_broker(store=MemoryStore()) as broker, broker.open_session() as session:
        ctx = CallContext(agent=session.agent, approval=broker)
        allowed = ToolRuntime(tools=[tool], gates=[allow], approval=broker)
        asking = ToolRuntime(tools=[tool], gates=[ask], approval=broker)
        question = ApprovalRequest(
            agent=session.agent, tool_name="nop", call_id="c", reason="bench"
        )
        runs: dict[str, Callable[[], Awaitable[object]]] = {
            "direct": lambda: tool.run(call, ctx),
            "allow": lambda: allowed.execute(call, agent=session.agent),
            "request": lambda: broker.request(question),
            "ask": lambda: asking.execute(call, agent=session.agent),
        }
        async with broker.answerer(answer_at_once), session.turn():
            for fn in runs.values():  # warm-up
                await timed(200, fn, [])
            per_block = max(1, rounds // blocks)
            for _ in range(blocks):
                for name, fn in runs.items():
                    await timed(per_block, fn, series[name])
    stats = {name: summary_us(values) for name, values in series.items()}
    return Result(
        name="tool runtime",
        figures=(
            Figure(
                label="runtime.execute(), allow gate, p50",
                value=stats["allow"]["p50"],
                unit="µs",
                baseline=stats["direct"]["p50"],
                baseline_label="tool.run() directly, p50",
            ),
            Figure(
                label="runtime.execute(), ask gate, p50",
                value=stats["ask"]["p50"],
                unit="µs",
                baseline=stats["request"]["p50"],
                baseline_label="bare broker.request(), p50",
            ),
        ),
    )


def measure(quick: bool) -> Result:
    """The suite's entry."""
    return trio.run(measure_async, 2_000 if quick else 20_000)


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
