"""Each question a span, its wait on answerers a child span, its decision three instruments.

The request algorithm reads :data:`SWITCH` once per question — ``SWITCH.off``, an attribute
read and a test, is the whole cost while telemetry is off — and otherwise calls
:func:`observe_question`: ``None`` when the first question finds it off. When on,
:meth:`QuestionTrace.observe` runs the question inside its span (the caller's current span is
its parent; the span is current while the question runs, so an answerer's own spans nest under
it) and records the metrics; :meth:`QuestionTrace.waiting` and :meth:`QuestionTrace.waited`
bracket the answerer waterfall with the child span.

On or off: :func:`enable` and :func:`disable` say so; otherwise it is decided once, at the first
question of the process: on when a global OpenTelemetry SDK provider is installed by then
(nothing of OpenTelemetry is imported to find out: no SDK is installed unless its API was
imported). The names written here are listed in ``design/telemetry.md``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
import trio

from .._request import ApprovalRequest
from .._vocabulary import Outcome, Source
from ..rules import Rule
from ._metrics import Instruments, make_instruments

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Status, StatusCode, Tracer

__all__ = [
    "SCOPE",
    "SWITCH",
    "Decided",
    "QuestionTrace",
    "Switch",
    "disable",
    "enable",
    "is_enabled",
    "observe_question",
]

log = logging.getLogger("broker.telemetry")

#: The instrumentation scope (the tracer's and the meter's name).
SCOPE = "broker"

# Attribute names (design/telemetry.md): the GenAI conventions' where they have one.
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
SESSION_ID = "broker.approval.session.id"
AGENT = "broker.approval.agent"
QUESTION_ID = "broker.approval.id"
OUTCOME = "broker.approval.outcome"
SOURCE = "broker.approval.source"
ANSWERED_BY = "broker.approval.answered_by"
RULE_LAYER = "broker.approval.rule.layer"
RULE_FILE = "broker.approval.rule.file"
RULE_INDEX = "broker.approval.rule.index"
ERROR_TYPE = "error.type"

_CANCELLED = {OUTCOME: Outcome.CANCELLED.value, SOURCE: Source.CALLER.value}


class Decided(Protocol):
    """What :meth:`QuestionTrace.observe` reads of a decision (``broker.Decision`` has it)."""

    @property
    def id(self) -> str: ...
    @property
    def outcome(self) -> Outcome: ...
    @property
    def source(self) -> Source | None: ...
    @property
    def answered_by(self) -> str | None: ...
    @property
    def rule(self) -> Rule | None: ...


D = TypeVar("D", bound=Decided)


@attrs.frozen
class _On:
    """What telemetry is while it is on: the tracer, the instruments, the context calls."""

    tracer: Tracer
    instruments: Instruments
    attach: Callable[[Context], object]
    detach: Callable[[Any], None]
    in_context: Callable[[Span], Context]
    status: type[Status]
    error: StatusCode


class Switch:
    """Whether questions are observed: ``on`` (``None``: off), ``decided`` (by :func:`enable`,
    :func:`disable` or the first question's probe) and ``off``, both at once: what the request
    algorithm tests on every question, so it calls into this module only when there is
    something to do."""

    __slots__ = ("decided", "off", "on")

    def __init__(self) -> None:
        self.on: _On | None = None
        self.decided = False
        self.off = False

    def set(self, on: _On | None, decided: bool = True) -> None:
        self.on, self.decided = on, decided
        self.off = decided and on is None

    def state(self) -> tuple[_On | None, bool]:
        return self.on, self.decided


#: The one switch of the process.
SWITCH = Switch()
_warned = False


def _turn_on(tracer_provider: object | None, meter_provider: object | None) -> _On:
    """Telemetry through these providers (``None``: the global one of that signal)."""
    try:
        from opentelemetry import context, metrics, trace
    except ImportError:
        raise ImportError(
            "broker.telemetry needs the opentelemetry api: pip install 'trio-approval-broker[otel]'"
        ) from None
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise TypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, got "
            f"{type(tracer_provider).__name__}"
        )
    if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
        raise TypeError(
            f"meter_provider must be an opentelemetry MeterProvider, got "
            f"{type(meter_provider).__name__}"
        )
    try:
        version = importlib.metadata.version("trio-approval-broker")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    tracer = trace.get_tracer(SCOPE, version, tracer_provider=tracer_provider)
    meter = metrics.get_meter(SCOPE, version, meter_provider=meter_provider)
    return _On(
        tracer=tracer,
        instruments=make_instruments(meter),
        attach=context.attach,
        detach=context.detach,
        in_context=trace.set_span_in_context,
        status=trace.Status,
        error=trace.StatusCode.ERROR,
    )


def enable(*, tracer_provider: object | None = None, meter_provider: object | None = None) -> None:
    """Turn telemetry on: every question from now on is a span and counts in the metrics.

    *tracer_provider* and *meter_provider* are OpenTelemetry providers (an SDK's
    ``TracerProvider`` and ``MeterProvider``); ``None``: the global one of that signal — the
    API's proxy until an SDK provider is installed, which then takes over. Raises
    :class:`ImportError` when the OpenTelemetry API is not installed (the ``otel`` extra),
    :class:`TypeError` for something that is not a provider.

    Without a call to :func:`enable` or :func:`disable`, telemetry is on when a global SDK
    provider is installed by the first question of the process.
    """
    SWITCH.set(_turn_on(tracer_provider, meter_provider))


def disable() -> None:
    """Turn telemetry off: questions from now on are neither spans nor counted (those in
    flight finish their spans). No global provider is consulted again until :func:`enable`."""
    SWITCH.set(None)


def is_enabled() -> bool:
    """Whether questions are observed (deciding it now if nothing did yet)."""
    return (SWITCH.on if SWITCH.decided else _probe()) is not None


def _probe() -> _On | None:
    """Decide on or off once, from the global providers: on when either is an SDK's."""
    SWITCH.set(None)
    try:
        if global_sdk():
            SWITCH.set(_turn_on(None, None))
    except Exception:
        _warn_once("could not turn telemetry on from the global opentelemetry providers")
    return SWITCH.on


def global_sdk() -> bool:
    """Whether a global SDK provider (traces or metrics) is installed. Nothing is imported to
    find out: an SDK provider can be installed only through the API, so without the API
    imported there is none."""
    trace = sys.modules.get("opentelemetry.trace")
    metrics = sys.modules.get("opentelemetry.metrics")
    return (
        trace is not None and _not_the_apis(trace.get_tracer_provider(), "opentelemetry.trace")
    ) or (
        metrics is not None and _not_the_apis(metrics.get_meter_provider(), "opentelemetry.metrics")
    )


def _not_the_apis(provider: object, api: str) -> bool:
    # The API's own providers (no-op, proxy) are defined in its modules; an SDK's elsewhere.
    return not type(provider).__module__.startswith(api)


def _warn_once(what: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("broker telemetry: %s; questions go on unobserved", what, exc_info=True)


def observe_question(req: ApprovalRequest, session_id: str) -> QuestionTrace | None:
    """The request algorithm's hook: ``None`` while telemetry is off, else the question's
    :class:`QuestionTrace`. Called in the asking task, before the question is admitted."""
    on = SWITCH.on
    if on is None:
        if SWITCH.decided:
            return None
        on = _probe()
        if on is None:
            return None
    return QuestionTrace(on, req, session_id)


class QuestionTrace:
    """One question observed: its span (``approval {tool}``), its child span for the wait on
    answerers (``approval wait {tool}``) and its measurements. Made by
    :func:`observe_question`; never raises from OpenTelemetry (a failure is logged once and the
    question goes on unobserved)."""

    __slots__ = ("_attributes", "_on", "_span", "_token", "_tool", "_wait", "_wait_token")

    def __init__(self, on: _On, req: ApprovalRequest, session_id: str) -> None:
        self._on = on
        self._tool = req.tool_name
        attributes = {TOOL_NAME: req.tool_name, SESSION_ID: session_id}
        if req.call_id is not None:
            attributes[TOOL_CALL_ID] = req.call_id
        label = req.agent.label
        if label is not None:
            attributes[AGENT] = label
        self._attributes = attributes
        self._span: Span | None = None
        self._token: object = None
        self._wait: Span | None = None
        self._wait_token: object = None

    async def observe(self, asking: Awaitable[D]) -> D:
        """Await *asking* (the question) inside the question's span, current while it runs;
        record its decision on the span and in the metrics, and return it.

        An error is recorded (``error.type``, status error) and raised. Cancellation: recorded
        as the question settles then (``cancelled``, source ``caller``), then propagates.
        """
        on = self._on
        started = perf_counter()
        try:
            span = self._span = on.tracer.start_span(
                f"approval {self._tool}", attributes=self._attributes
            )
            self._token = on.attach(on.in_context(span))
            on.instruments.pending.add(1)
        except Exception:
            _warn_once("a question's span could not be started")
            self._span = None
            return await asking
        recorded: dict[str, str] = {}
        try:
            decision = await asking
        except trio.Cancelled:
            recorded = _CANCELLED
            raise
        except BaseException as exc:
            recorded = {ERROR_TYPE: type(exc).__qualname__}
            self._failed(span, exc)
            raise
        else:
            recorded = {OUTCOME: decision.outcome.value}
            if decision.source is not None:
                recorded[SOURCE] = decision.source.value
            self._record_decision(span, decision)
            return decision
        finally:
            self._finish(span, recorded, perf_counter() - started)

    def waiting(self) -> None:
        """The answerer waterfall starts: open the child span (current until :meth:`waited`)."""
        on = self._on
        if self._span is None:
            return
        try:
            wait = self._wait = on.tracer.start_span(f"approval wait {self._tool}")
            self._wait_token = on.attach(on.in_context(wait))
        except Exception:
            self._wait = None
            _warn_once("a question's wait span could not be started")

    def waited(self) -> None:
        """The waterfall ended (answered, delegated to the end, withdrawn or cancelled): end
        the child span."""
        wait = self._wait
        if wait is None:
            return
        self._wait = None
        try:
            self._on.detach(self._wait_token)
            wait.end()
        except Exception:
            _warn_once("a question's wait span could not be ended")

    def _record_decision(self, span: Span, decision: Decided) -> None:
        try:
            span.set_attribute(QUESTION_ID, decision.id)
            if decision.answered_by is not None:
                span.set_attribute(ANSWERED_BY, decision.answered_by)
            rule = decision.rule
            if rule is not None:
                origin = rule.origin
                span.set_attribute(RULE_LAYER, origin.layer.value)
                span.set_attribute(RULE_INDEX, origin.index)
                if origin.file is not None:
                    span.set_attribute(RULE_FILE, origin.file)
        except Exception:
            _warn_once("a question's decision could not be recorded on its span")

    def _failed(self, span: Span, exc: BaseException) -> None:
        try:
            span.set_status(self._on.status(self._on.error, f"{type(exc).__name__}: {exc}"))
        except Exception:
            _warn_once("a question's error could not be recorded on its span")

    def _finish(self, span: Span, recorded: dict[str, str], seconds: float) -> None:
        self.waited()  # if the waterfall's end was not seen (an error inside it)
        on = self._on
        try:
            span.set_attributes(recorded)
            on.detach(self._token)
            span.end()
            instruments = on.instruments
            instruments.pending.add(-1)
            instruments.duration.record(seconds, recorded)
            instruments.questions.add(1, {**recorded, TOOL_NAME: self._tool})
        except Exception:
            _warn_once("a question's span or measurements could not be recorded")
