"""OpenTelemetry: what the telemetry hook costs an in-memory ask (issue 36, Speed).

    python -m bench.otel [--quick]

Three ways of asking the same question (in-memory store, one answerer that answers at once, so
the waterfall runs and, with telemetry on, both spans are made), measured in the same run in
alternating blocks so drift hits all alike:

1. **without telemetry at all**: ``Questions.outcome`` (what ``broker.request`` asks through)
   replaced by the algorithm alone (``_ask``, no hook) — the baseline;
2. **the OpenTelemetry API installed, no SDK configured**: the hook as shipped, its one test
   of an attribute — target p50 <= 1.05x the baseline;
3. **the SDK** (a ``TracerProvider`` with a ``BatchSpanProcessor`` whose exporter drops what
   it gets, a ``MeterProvider`` with an in-memory reader) — reported.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

# The API installed and imported, as in a program that uses it: the probe sees it.
import opentelemetry.metrics
import opentelemetry.trace  # noqa: F401
import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import broker.telemetry
from bench._stats import summary_us
from bench._suite import Figure, Result, standalone
from broker import AnswerNext, ApprovalRequest, MemoryStore, Outcome, open_broker
from broker._questions import Questions
from broker.telemetry import _spans


class _Drop(SpanExporter):
    """A batch exporter that sends nothing: the SDK's own cost, without a network."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def answer_at_once(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


def _without_hook(self: Questions, req: ApprovalRequest) -> Awaitable[Any]:
    return self._ask(req, None, False)


async def measure_asks(rounds: int, blocks: int = 50) -> tuple[Figure, Figure]:
    shipped: Callable[..., Any] = Questions.outcome
    assert not broker.telemetry.is_enabled()  # the API imported, no SDK: the probe says off
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    broker.telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    sdk = _spans.SWITCH.on
    broker.telemetry.disable()
    samples: dict[str, list[int]] = {"bare": [], "off": [], "sdk": []}
    clock = time.perf_counter_ns
    try:
        async with open_broker(store=MemoryStore()) as made:
            async with made.answerer(answer_at_once), made.open_session() as session:
                async with session.turn():
                    req = ApprovalRequest(agent=session.agent, tool_name="bash")
                    per_block = max(1, rounds // blocks)
                    for block in range(blocks + 1):  # block 0: warm-up, not kept
                        for way, out in samples.items():
                            asking = _without_hook if way == "bare" else shipped
                            setattr(Questions, "outcome", asking)  # noqa: B010
                            _spans.SWITCH.set(sdk if way == "sdk" else None)
                            for _ in range(per_block):
                                start = clock()
                                await made.request(req)
                                if block:
                                    out.append(clock() - start)
    finally:
        setattr(Questions, "outcome", shipped)  # noqa: B010
        _spans.SWITCH.set(None)
        tracer_provider.shutdown()
        meter_provider.shutdown()
    bare, off, on = (summary_us(samples[way]) for way in ("bare", "off", "sdk"))
    ratio = off["p50"] / bare["p50"]
    return (
        Figure(
            label="ask p50, OpenTelemetry API installed, no SDK (in-memory store)",
            value=off["p50"],
            unit="µs",
            baseline=bare["p50"],
            baseline_label="the same ask without the telemetry hook p50",
            target="<= 1.05x",
            met=ratio <= 1.05,
        ),
        Figure(
            label="ask p50, SDK with a BatchSpanProcessor and a metric reader",
            value=on["p50"],
            unit="µs",
            baseline=bare["p50"],
            baseline_label="the same ask without the telemetry hook p50",
        ),
    )


def measure(quick: bool) -> Result:
    """The suite's entry: 3 000 asks of each way (quick) or 30 000."""
    figures = trio.run(partial(measure_asks, 3_000 if quick else 30_000))
    return Result(name="otel", figures=figures)


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
