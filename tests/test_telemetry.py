"""broker.telemetry in process (issue 36, items 1 and 2): each question a span with its
attributes for every source, a child of the caller's span, a child span while answerers are
consulted; the metrics after a scripted run; nothing while it is off; ``import broker`` without
OpenTelemetry at all.

Each test gets its own SDK providers (an in-memory span exporter, an in-memory metric reader),
handed to :func:`broker.telemetry.enable`; no global provider is ever installed in the test
process. The commands' export over OTLP/HTTP: ``tests/test_telemetry_commands.py``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import broker._questions as questions_module
import broker.telemetry
from broker import (
    AbortSignal,
    Answer,
    AnswerNext,
    ApprovalRequest,
    Broker,
    Outcome,
    Session,
    TurnError,
    open_broker,
)
from broker.rules import Layer, Rule, RuleDecision, RuleOrigin
from broker.telemetry import _spans

TIMEOUT = 60


@attrs.frozen
class Otel:
    """One test's SDK: what its spans and metrics went to, and a tracer of the test's own."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer: trace.Tracer

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def question(self) -> ReadableSpan:
        (span,) = [s for s in self.finished() if s.name.startswith("approval ") and not _wait(s)]
        return span

    def points(self, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """The data points of the broker's metric *name*, by their attributes."""
        data = self.metrics.get_metrics_data()
        found: dict[frozenset[tuple[str, Any]], Any] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                if scope.scope.name != broker.telemetry.SCOPE:
                    continue
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[frozenset((point.attributes or {}).items())] = point
        return found


def _wait(span: ReadableSpan) -> bool:
    return span.name.startswith("approval wait ")


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    before = _spans.SWITCH.state()
    broker.telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Otel(spans, reader, tracer_provider.get_tracer("the test"))
    finally:
        _spans.SWITCH.set(*before)
        tracer_provider.shutdown()
        meter_provider.shutdown()


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def origin(index: int = 1) -> RuleOrigin:
    return RuleOrigin(layer=Layer.PROJECT, file="rules.toml", index=index)


RULES = [
    Rule.build(decision=RuleDecision.ALLOW, tools=("read",), origin=origin(1)),
    Rule.build(decision=RuleDecision.DENY, tools=("rm",), origin=origin(2)),
]


@pytest.fixture
async def ruled() -> AsyncIterator[Broker]:
    async with open_broker(rules=RULES) as made:
        yield made


async def ask_once(
    broker_: Broker,
    tool: str,
    answer: Any = None,
    *,
    call_id: str | None = "call-1",
    signal: AbortSignal | None = None,
    session: Session | None = None,
) -> Outcome:
    """Ask one question for *tool* in a new session (or *session*) with *answer* registered."""

    async def ask(session: Session) -> Outcome:
        req = ApprovalRequest(agent=session.agent, tool_name=tool, call_id=call_id, signal=signal)
        if answer is None:
            async with session.turn():
                return await broker_.request(req)
        async with broker_.answerer(answer), session.turn():
            return await broker_.request(req)

    if session is not None:
        return await ask(session)
    async with broker_.open_session() as opened:
        return await ask(opened)


def says(outcome: Outcome, by: str | None = None, *, expired: bool = False) -> Any:
    async def answer(_req: ApprovalRequest, _next: AnswerNext) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(outcome=outcome, by=by, expired=expired)

    return answer


async def test_a_question_is_a_span_named_for_its_tool_with_its_attributes(
    otel: Otel, ruled: Broker
) -> None:
    async with ruled.open_session() as session:
        session.agent.label = "Claude Code session s-1"
        assert await ask_once(ruled, "read", session=session) is Outcome.ALLOWED_ONCE
    span = otel.question()
    assert span.name == "approval read"
    assert span.kind is trace.SpanKind.INTERNAL
    got = attributes(span)
    question_id = got.pop("broker.approval.id")
    assert len(question_id) == 36
    assert got == {
        "gen_ai.tool.name": "read",
        "gen_ai.tool.call.id": "call-1",
        "broker.approval.session.id": session.id,
        "broker.approval.agent": "Claude Code session s-1",
        "broker.approval.outcome": "allowed-once",
        "broker.approval.source": "rule",
        "broker.approval.rule.layer": "project",
        "broker.approval.rule.file": "rules.toml",
        "broker.approval.rule.index": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert [s.name for s in otel.finished()] == ["approval read"]  # no answerer: no wait span


async def test_no_call_id_no_label_no_such_attribute(otel: Otel, ruled: Broker) -> None:
    assert await ask_once(ruled, "read", call_id=None) is Outcome.ALLOWED_ONCE
    got = attributes(otel.question())
    assert "gen_ai.tool.call.id" not in got
    assert "broker.approval.agent" not in got
    assert "broker.approval.answered_by" not in got


async def test_a_deny_rule(otel: Otel, ruled: Broker) -> None:
    assert await ask_once(ruled, "rm", says(Outcome.ALLOWED_ONCE)) is Outcome.REJECTED
    got = attributes(otel.question())
    assert (got["broker.approval.outcome"], got["broker.approval.source"]) == ("rejected", "rule")
    assert got["broker.approval.rule.index"] == 2
    assert not [s for s in otel.finished() if _wait(s)]


async def test_a_grant(otel: Otel) -> None:
    async with open_broker() as made, made.open_session() as session:
        await made.grant(session, "bash")
        assert await ask_once(made, "bash", session=session) is Outcome.ALLOWED_ONCE
    got = attributes(otel.question())
    assert (got["broker.approval.outcome"], got["broker.approval.source"]) == (
        "allowed-once",
        "grant",
    )
    assert "broker.approval.rule.index" not in got
    assert len(otel.finished()) == 1


async def test_the_never_policy(otel: Otel) -> None:
    async with open_broker(policy="never") as made:
        assert await ask_once(made, "bash", says(Outcome.ALLOWED_ONCE)) is Outcome.REJECTED
    got = attributes(otel.question())
    assert (got["broker.approval.outcome"], got["broker.approval.source"]) == (
        "rejected",
        "policy",
    )
    assert len(otel.finished()) == 1


@pytest.mark.parametrize(
    ("answer", "outcome", "source", "by"),
    [
        (says(Outcome.ALLOWED_ONCE, "alice"), "allowed-once", "answerer", "alice"),
        (says(Outcome.REJECTED, "bob"), "rejected", "answerer", "bob"),
        (says(Outcome.REJECTED), "rejected", "answerer", None),
        (says(Outcome.UNAVAILABLE, expired=True), "unavailable", "deadline", None),
        (None, "unavailable", "no-answerer", None),
    ],
    ids=["allow", "reject", "reject-unnamed", "deadline", "no-answerer"],
)
async def test_answerers_decide_under_a_wait_span(
    otel: Otel, answer: Any, outcome: str, source: str, by: str | None
) -> None:
    async with open_broker() as made:
        assert await ask_once(made, "bash", answer) == outcome
    question = otel.question()
    got = attributes(question)
    assert (got["broker.approval.outcome"], got["broker.approval.source"]) == (outcome, source)
    assert got.get("broker.approval.answered_by") == by
    (wait,) = [s for s in otel.finished() if _wait(s)]
    assert wait.name == "approval wait bash"
    assert wait.parent is not None
    assert wait.parent.span_id == question.context.span_id
    assert wait.context.trace_id == question.context.trace_id
    times = (question.start_time, wait.start_time, wait.end_time, question.end_time)
    assert None not in times
    assert list(times) == sorted(times)  # type: ignore[type-var]


async def test_the_wait_span_covers_the_answerers_time_and_is_their_current_span(
    otel: Otel,
) -> None:
    inside: list[trace.SpanContext] = []

    async def slow(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        inside.append(trace.get_current_span().get_span_context())
        await trio.sleep(0.05)
        return Outcome.ALLOWED_ONCE

    async with open_broker() as made:
        assert await ask_once(made, "bash", slow) is Outcome.ALLOWED_ONCE
    (wait,) = [s for s in otel.finished() if _wait(s)]
    assert inside == [wait.context]
    assert wait.start_time is not None
    assert wait.end_time is not None
    assert wait.end_time - wait.start_time >= 40_000_000  # ns: the answerer's 50 ms


async def test_an_abort_while_answerers_work_and_before_the_question(otel: Otel) -> None:
    async def abort_then_wait(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        assert isinstance(req.signal, AbortSignal)
        req.signal.abort("the user pressed escape")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_broker() as made:
        assert await ask_once(made, "bash", abort_then_wait, signal=AbortSignal()) == "cancelled"
        aborted = AbortSignal()
        aborted.abort()
        assert await ask_once(made, "edit", abort_then_wait, signal=aborted) == "cancelled"
    by_name = {s.name: attributes(s) for s in otel.finished()}
    assert set(by_name) == {"approval bash", "approval wait bash", "approval edit"}
    for name in ("approval bash", "approval edit"):
        got = by_name[name]
        assert (got["broker.approval.outcome"], got["broker.approval.source"]) == (
            "cancelled",
            "abort",
        )


async def test_the_callers_cancellation(otel: Otel) -> None:
    async def never(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_broker() as made, made.open_session() as session:
        async with made.answerer(never), session.turn():
            with trio.move_on_after(0.05) as scope:
                await made.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
            assert scope.cancelled_caught
    got = attributes(otel.question())
    assert (got["broker.approval.outcome"], got["broker.approval.source"]) == (
        "cancelled",
        "caller",
    )
    assert "error.type" not in got
    assert len([s for s in otel.finished() if _wait(s)]) == 1
    assert [p.value for p in otel.points(broker.telemetry.PENDING).values()] == [0]


async def test_a_request_that_raises_is_an_error_span(otel: Otel) -> None:
    async with open_broker() as made, made.open_session() as session:
        with pytest.raises(TurnError):
            await made.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
    span = otel.question()
    got = attributes(span)
    assert got["error.type"] == "TurnError"
    assert "broker.approval.outcome" not in got
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None
    assert span.status.description.startswith("TurnError: approval.request() outside an open")
    (point,) = otel.points(broker.telemetry.QUESTIONS).values()
    assert dict(point.attributes) == {"error.type": "TurnError", "gen_ai.tool.name": "bash"}


async def test_the_callers_current_span_is_the_parent(otel: Otel, ruled: Broker) -> None:
    with otel.tracer.start_as_current_span("execute_tool read") as tool_span:
        assert await ask_once(ruled, "read") is Outcome.ALLOWED_ONCE
        assert trace.get_current_span() is tool_span  # the question's span was detached
    question = otel.question()
    assert question.parent is not None
    assert question.parent.span_id == tool_span.get_span_context().span_id
    assert question.context.trace_id == tool_span.get_span_context().trace_id
    # Without a current span, a question is a root span.
    otel.spans.clear()
    assert await ask_once(ruled, "read") is Outcome.ALLOWED_ONCE
    assert otel.question().parent is None


async def test_questions_asked_in_parallel_each_have_their_callers_parent(otel: Otel) -> None:
    async def slow(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.sleep(0.02 if req.tool_name == "a" else 0.01)
        return Outcome.ALLOWED_ONCE

    async with open_broker() as made, made.open_session() as session:
        async with made.answerer(slow), session.turn():

            async def under(tool: str) -> None:
                with otel.tracer.start_as_current_span(f"execute_tool {tool}"):
                    await made.request(ApprovalRequest(agent=session.agent, tool_name=tool))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(under, "a")
                nursery.start_soon(under, "b")
    spans = {s.name: s for s in otel.finished()}
    for tool in ("a", "b"):
        parent = spans[f"approval {tool}"].parent
        assert parent is not None
        assert parent.span_id == spans[f"execute_tool {tool}"].context.span_id
        wait_parent = spans[f"approval wait {tool}"].parent
        assert wait_parent is not None
        assert wait_parent.span_id == spans[f"approval {tool}"].context.span_id


async def test_the_metrics_after_a_scripted_run(otel: Otel, ruled: Broker) -> None:
    pending_seen: list[int] = []

    async def person(req: ApprovalRequest, _next: AnswerNext) -> Answer:
        (point,) = otel.points(broker.telemetry.PENDING).values()
        pending_seen.append(point.value)
        await trio.sleep(0.01)
        return Answer(outcome=Outcome.REJECTED, by="alice")

    async with ruled.open_session() as session:
        async with ruled.answerer(person), session.turn():
            for tool in ("read", "read", "rm", "bash", "bash", "read"):
                await ruled.request(ApprovalRequest(agent=session.agent, tool_name=tool))
    assert pending_seen == [1, 1]  # while each of the two waited: itself

    def key(outcome: str, source: str, **more: str) -> frozenset[tuple[str, Any]]:
        return frozenset(
            {"broker.approval.outcome": outcome, "broker.approval.source": source, **more}.items()
        )

    counted = {k: p.value for k, p in otel.points(broker.telemetry.QUESTIONS).items()}
    tool = "gen_ai.tool.name"
    assert counted == {
        key("allowed-once", "rule", **{tool: "read"}): 3,
        key("rejected", "rule", **{tool: "rm"}): 1,
        key("rejected", "answerer", **{tool: "bash"}): 2,
    }
    durations = otel.points(broker.telemetry.DURATION)
    assert {k: p.count for k, p in durations.items()} == {
        key("allowed-once", "rule"): 3,
        key("rejected", "rule"): 1,
        key("rejected", "answerer"): 2,
    }
    by_person = durations[key("rejected", "answerer")]
    assert by_person.sum >= 0.018  # seconds: two answers of 10 ms
    assert by_person.min >= 0.009
    assert durations[key("allowed-once", "rule")].max < 0.5
    assert tuple(by_person.explicit_bounds) == broker.telemetry.DURATION_BUCKETS
    assert [p.value for p in otel.points(broker.telemetry.PENDING).values()] == [0]


async def test_off_nothing_is_recorded_and_nothing_fails(otel: Otel, ruled: Broker) -> None:
    broker.telemetry.disable()
    assert not broker.telemetry.is_enabled()
    assert await ask_once(ruled, "read") is Outcome.ALLOWED_ONCE
    assert await ask_once(ruled, "bash", says(Outcome.REJECTED, "alice")) is Outcome.REJECTED
    assert otel.finished() == []
    assert otel.points(broker.telemetry.QUESTIONS) == {}


async def test_off_a_question_never_calls_into_telemetry(
    otel: Otel, ruled: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("called while telemetry is off")

    monkeypatch.setattr(questions_module, "observe_question", refuse)
    broker.telemetry.disable()
    assert await ask_once(ruled, "read") is Outcome.ALLOWED_ONCE
    assert await ask_once(ruled, "bash", says(Outcome.REJECTED)) is Outcome.REJECTED


async def test_telemetry_that_fails_never_fails_a_question(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(trace.NoOpTracer):
        def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
            raise RuntimeError("the tracer is broken")

    class BrokenProvider(trace.NoOpTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
            return Broken()

    broker.telemetry.enable(tracer_provider=BrokenProvider())
    _spans._warned = False
    try:
        with caplog.at_level(logging.WARNING, logger="broker.telemetry"):
            async with open_broker() as made:
                for _ in range(2):
                    assert await ask_once(made, "bash", says(Outcome.ALLOWED_ONCE)) == (
                        "allowed-once"
                    )
    finally:
        _spans._warned = False
    warned = [r for r in caplog.records if r.name == "broker.telemetry"]
    assert [r.getMessage() for r in warned] == [
        "broker telemetry: a question's span could not be started; questions go on unobserved"
    ]


def test_enable_refuses_what_is_not_a_provider() -> None:
    with pytest.raises(TypeError, match="tracer_provider must be an opentelemetry TracerProvider"):
        broker.telemetry.enable(tracer_provider=object())
    with pytest.raises(TypeError, match="meter_provider must be an opentelemetry MeterProvider"):
        broker.telemetry.enable(meter_provider="otlp")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


ASK = """
import trio
from broker import ApprovalRequest, Outcome, open_broker

async def ask():
    async with open_broker() as b, b.open_session() as s, s.turn():
        async def yes(req, nxt):
            return Outcome.ALLOWED_ONCE
        async with b.answerer(yes):
            return await b.request(ApprovalRequest(agent=s.agent, tool_name="bash"))
"""


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()[-1]


def test_import_broker_without_opentelemetry_installed() -> None:
    code = (
        "import sys\n"
        "for name in ('opentelemetry', 'opentelemetry.trace', 'opentelemetry.metrics'):\n"
        "    sys.modules[name] = None\n"
        "import broker, broker.telemetry\n"
        + ASK
        + """
print(trio.run(ask))
print(broker.telemetry.is_enabled())
try:
    broker.telemetry.enable()
except ImportError as exc:
    print(exc)
"""
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "allowed-once",
        "False",
        "broker.telemetry needs the opentelemetry api: pip install 'trio-approval-broker[otel]'",
    ]


def test_the_api_without_an_sdk_is_off_and_imports_nothing_more() -> None:
    code = (
        "import sys\nfrom opentelemetry import trace, metrics\nimport broker.telemetry\n"
        + ASK
        + """
with trace.get_tracer("app").start_as_current_span("outer"):
    print(trio.run(ask))
print(broker.telemetry.is_enabled(), "opentelemetry.sdk" in sys.modules)
"""
    )
    assert last_line(run_python(code)) == "False False"


def test_a_global_sdk_installed_before_the_first_question_turns_it_on() -> None:
    code = (
        """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
"""
        + ASK
        + """
print(trio.run(ask))
print(sorted(s.name for s in exporter.get_finished_spans()))
"""
    )
    assert last_line(run_python(code)) == "['approval bash', 'approval wait bash']"
