"""The commands' OpenTelemetry SDK, set up from the standard ``OTEL_*`` environment variables.

``broker serve``, ``acp``, ``mcp-gate`` and ``inbox`` run inside :func:`export_from_env`. The
rule (``design/telemetry.md``): a signal is exported over OTLP/HTTP when the environment asks
for it — ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` name ``otlp``, or, with those
unset, an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or the signal's own) — and
the SDK and the exporter are installed. ``OTEL_SDK_DISABLED=true`` or ``…_EXPORTER=none``
turn a signal off. A process that already has a global SDK provider (started by
``opentelemetry-instrument``, say) keeps it: the broker reports through it and sets up nothing.
Whatever goes wrong is one warning on the command's log, and the command runs on.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping

import attrs

from . import _spans

__all__ = ["export_from_env"]

log = logging.getLogger("broker.telemetry")

_SIGNALS = ("TRACES", "METRICS")
_INSTALL = "pip install 'trio-approval-broker[otel]'"


@contextlib.contextmanager
def export_from_env(command: str, env: Mapping[str, str] | None = None) -> Iterator[bool]:
    """Run the block with the broker's telemetry exported as the ``OTEL_*`` variables of *env*
    (default: ``os.environ``) ask (module doc); yields whether telemetry is on. On leaving,
    the providers it made are shut down, which exports what they still hold (each export is
    bounded by ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default), and telemetry is put back as
    it was. Never raises for telemetry's sake: a problem is one warning naming *command*.
    """
    problems: list[str] = []
    exporting: _Exporting | None = None
    try:
        exporting = _start(os.environ if env is None else env, problems)
    except Exception as exc:
        problems.append(f"the opentelemetry sdk could not be set up ({type(exc).__name__}: {exc})")
    if problems:
        log.warning("broker %s: %s", command, "; ".join(problems))
    try:
        yield exporting is not None
    finally:
        if exporting is not None:
            exporting.stop(command)


@attrs.define
class _Exporting:
    """What :func:`export_from_env` set up, and the state it puts back."""

    previous: tuple[_spans._On | None, bool]
    providers: tuple[object, ...] = ()

    def stop(self, command: str) -> None:
        _spans.SWITCH.set(*self.previous)
        failed = []
        for provider in self.providers:
            try:
                provider.shutdown()  # type: ignore[attr-defined]
            except Exception as exc:
                failed.append(f"{type(exc).__name__}: {exc}")
        if failed:
            log.warning("broker %s: telemetry not flushed: %s", command, "; ".join(failed))


def _start(env: Mapping[str, str], problems: list[str]) -> _Exporting | None:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    previous = _spans.SWITCH.state()
    if _spans.global_sdk():
        _spans.enable()
        return _Exporting(previous)
    traces, metrics = (_wanted(signal, env, problems) for signal in _SIGNALS)
    if not (traces or metrics):
        return None
    try:
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import NoOpTracerProvider

        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # isort: skip
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # isort: skip
            OTLPSpanExporter,
        )
    except ImportError as exc:
        problems.append(
            f"OTEL_* asks for telemetry but {exc.name or 'the opentelemetry sdk'} is not "
            f"installed ({_INSTALL}): not exported"
        )
        return None
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": "broker"})
    owned: list[object] = []
    tracer_provider: object = NoOpTracerProvider()
    meter_provider: object = NoOpMeterProvider()
    if traces:
        tracer_provider = sdk_tracer = TracerProvider(resource=resource, shutdown_on_exit=False)
        sdk_tracer.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        owned.append(sdk_tracer)
    if metrics:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = sdk_meter = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )
        owned.append(sdk_meter)
    _spans.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return _Exporting(previous, tuple(owned))


def _wanted(signal: str, env: Mapping[str, str], problems: list[str]) -> bool:
    """Whether *env* asks for *signal* (``TRACES``, ``METRICS``) over OTLP/HTTP."""
    variable = f"OTEL_{signal}_EXPORTER"
    chosen = {name.strip() for name in env.get(variable, "").lower().split(",") if name.strip()}
    off = f"{signal.lower()} not exported"
    if chosen:
        if "otlp" not in chosen:
            if chosen != {"none"}:
                problems.append(f"{variable}={env[variable]}: only otlp is supported ({off})")
            return False
        if chosen != {"otlp"}:
            problems.append(f"{variable}={env[variable]}: only otlp is exported")
    elif not (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    ):
        return False
    for name in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(name, "").strip()
        if protocol:
            if protocol != "http/protobuf":
                problems.append(f"{name}={protocol}: only http/protobuf is supported ({off})")
                return False
            break
    return True
