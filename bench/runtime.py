"""Tool-runtime overheads, each against its baseline in the same run.

    python -m bench.runtime [--quick]

1. a call that needs no approval (one gate that allows) through ``ToolRuntime.execute`` vs
   calling the tool's ``run`` directly;
2. a call whose gate asks, answered at once, through the runtime vs a bare
   ``broker.request()`` of the same question.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from bench._stats import summary_us
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


async def main(rounds: int, blocks: int) -> int:
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
    print(f"tool runtime overheads ({len(series['direct'])} calls each)")
    print(f"{'':34}{'p50 µs':>10}{'p90 µs':>10}")
    labels = {
        "direct": "tool.run() directly",
        "allow": "runtime.execute(), allow gate",
        "request": "bare broker.request()",
        "ask": "runtime.execute(), ask gate",
    }
    for name, label in labels.items():
        print(f"{label:34}{stats[name]['p50']:10.2f}{stats[name]['p90']:10.2f}")
    print(f"ratio p50 runtime(allow)/direct: {stats['allow']['p50'] / stats['direct']['p50']:.2f}x")
    print(f"ratio p50 runtime(ask)/request:  {stats['ask']['p50'] / stats['request']['p50']:.2f}x")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run for CI")
    args = parser.parse_args()
    sys.exit(trio.run(main, 2_000 if args.quick else 20_000, 10))
