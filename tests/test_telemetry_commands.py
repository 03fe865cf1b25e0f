"""The commands export OpenTelemetry over OTLP/HTTP (issue 36, items 1 and 2): ``broker serve``
as a real process, pointed by the standard ``OTEL_*`` variables at a receiver this test runs
(a tiny HTTP server on 127.0.0.1 that decodes the protobuf with opentelemetry-proto), answers a
hook by a rule and another from elsewhere, is stopped, and the spans and metrics it flushed on
the way out have arrived. Also: the rule for when a command exports (``export_from_env``), a
collector that is down never stops a command, a setting it cannot honour is one warning, and
every long-running command is wired.
"""

from __future__ import annotations

import gzip
import http.server
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from broker.serve import session_id_for
from broker.telemetry import PENDING, QUESTIONS, _spans, disable, export_from_env, is_enabled

from .serve_support import (
    BROKER,
    broker,
    decision,
    finish,
    hook,
    hook_input,
    service,
    start_hook,
    wait_pending,
)

RULES = """\
[[rules]]
decision = "allow"
tool = "Bash"
command = "echo"
"""


class Receiver:
    """An OTLP/HTTP receiver: what was POSTed to /v1/traces and /v1/metrics, decoded."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {"/v1/traces": [], "/v1/metrics": []}
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                known = self.path in receiver.bodies
                if known:
                    assert self.headers.get("Content-Type") == "application/x-protobuf"
                    with receiver.lock:
                        receiver.bodies[self.path].append(body)
                self.send_response(200 if known else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[dict[str, Any]]:
        """Every span received: name, ids, attributes, and its resource's attributes."""
        found = []
        with self.lock:
            bodies = list(self.bodies["/v1/traces"])
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        found.append(
                            {
                                "name": span.name,
                                "scope": scope.scope.name,
                                "id": span.span_id,
                                "trace": span.trace_id,
                                "parent": span.parent_span_id,
                                "attributes": _values(span.attributes),
                                "resource": _values(resource.resource.attributes),
                            }
                        )
        return found

    def sums(self, name: str) -> dict[frozenset[tuple[str, Any]], int]:
        """The last value of the broker's sum metric *name*, by its attributes."""
        found: dict[frozenset[tuple[str, Any]], int] = {}
        with self.lock:
            bodies = list(self.bodies["/v1/metrics"])
        for body in bodies:
            for resource in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if scope.scope.name == "broker" and metric.name == name:
                            for point in metric.sum.data_points:
                                key = frozenset(_values(point.attributes).items())
                                found[key] = point.as_int
        return found


def _values(pairs: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind is not None else None
    return values


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    thread = threading.Thread(target=made.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        made.server.shutdown()
        made.server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No OTEL_* variable of the test process reaches the commands unless a test sets it."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.slow
def test_broker_serve_exports_each_question_as_a_span_and_counts_them(
    tmp_path: pathlib.Path, receiver: Receiver, otel_env: pytest.MonkeyPatch
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    otel_env.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # only what the exit flushes
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    with service(tmp_path, "--rules", str(rules)) as running:
        status, out, err = hook("claude-code", hook_input("echo hi"), running.socket)
        assert (status, decision(out)["permissionDecision"]) == (0, "allow"), err
        asking = start_hook("claude-code", hook_input("touch a.md", call="toolu_2"), running.socket)
        (row,) = wait_pending(running.store)
        answered = broker("answer", str(running.store), row["id"], "allow", "--by", "alice")
        assert answered.returncode == 0, answered.stderr
        assert decision(finish(asking)[1])["permissionDecision"] == "allow"
        assert receiver.spans() == []  # batched: nothing sent yet ...
        stderr = running.stop()
    assert running.process.returncode == 128 + signal.SIGTERM
    assert "telemetry" not in stderr, stderr
    spans = {span["name"]: span for span in receiver.spans()}  # ... all flushed at the end
    assert set(spans) == {"approval Bash", "approval wait Bash"}
    session = session_id_for("claude-code", "sess-1")
    by_call = {span["attributes"].get("gen_ai.tool.call.id"): span for span in receiver.spans()}
    ruled, asked = by_call["toolu_1"], by_call["toolu_2"]
    assert ruled["resource"]["service.name"] == "broker"
    assert ruled["scope"] == "broker"
    assert ruled["attributes"] | {"broker.approval.id": "?"} == {
        "gen_ai.tool.name": "Bash",
        "gen_ai.tool.call.id": "toolu_1",
        "broker.approval.session.id": session,
        "broker.approval.agent": "Claude Code session sess-1",
        "broker.approval.id": "?",
        "broker.approval.outcome": "allowed-once",
        "broker.approval.source": "rule",
        "broker.approval.rule.layer": "project",
        "broker.approval.rule.file": str(rules),
        "broker.approval.rule.index": 1,
    }
    assert asked["attributes"]["broker.approval.id"] == row["id"]
    assert asked["attributes"]["broker.approval.answered_by"] == "alice"
    assert asked["attributes"]["broker.approval.source"] == "answerer"
    wait = spans["approval wait Bash"]
    assert (wait["parent"], wait["trace"]) == (asked["id"], asked["trace"])
    counted = receiver.sums(QUESTIONS)
    assert {dict(k)["broker.approval.source"]: v for k, v in counted.items()} == {
        "rule": 1,
        "answerer": 1,
    }
    assert list(receiver.sums(PENDING).values()) == [0]


@pytest.mark.slow
def test_a_collector_that_is_down_never_stops_a_command(
    tmp_path: pathlib.Path, otel_env: pytest.MonkeyPatch
) -> None:
    closed = Receiver()  # bound, then closed: nothing listens on its port
    closed.server.server_close()
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed.endpoint)
    otel_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    with service(tmp_path, "--rules", str(rules)) as running:
        status, out, err = hook("claude-code", hook_input("echo hi"), running.socket)
        assert (status, decision(out)["permissionDecision"]) == (0, "allow"), err
        started = time.monotonic()
        running.stop()
    assert running.process.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20


@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "acp", "mcp-gate", "inbox"])
def test_every_command_sets_up_from_the_environment_and_warns_once(
    tmp_path: pathlib.Path, otel_env: pytest.MonkeyPatch, command: str
) -> None:
    """A setting the commands cannot honour is one warning, and the command runs on."""
    otel_env.setenv("OTEL_TRACES_EXPORTER", "console")
    otel_env.setenv("OTEL_METRICS_EXPORTER", "none")
    otel_env.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    store = str(tmp_path / "log.sqlite")
    argv = {
        "serve": ["serve", "--store", store, "--socket", str(tmp_path / "s.sock")],
        "acp": ["acp", "--store", ":memory:", "--sandbox", "none"],
        "mcp-gate": ["mcp-gate", "--store", ":memory:", "--", sys.executable, "-c", "pass"],
        "inbox": ["inbox", store, "--port", "0"],
    }[command]
    process = subprocess.Popen(
        [BROKER, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if command in ("serve", "inbox"):
            time.sleep(1.5)  # running: then stopped as a person would
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    warned = [line for line in err.splitlines() if "OTEL_" in line]
    assert len(warned) == 1, err
    assert warned[0].endswith(
        f"broker {command}: OTEL_TRACES_EXPORTER=console: only otlp is supported "
        "(traces not exported)"
    )
    assert "Traceback" not in err


# -- when a command exports: export_from_env's rule, in process ------------------------------


@pytest.fixture
def restored() -> Iterator[None]:
    before = _spans.SWITCH.state()
    try:
        yield
    finally:
        _spans.SWITCH.set(*before)


@pytest.mark.parametrize(
    ("env", "on", "warning"),
    [
        ({}, False, None),
        ({"OTEL_SERVICE_NAME": "x"}, False, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, True, None),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}, True, None),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True, None),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, True, None),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, False, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
            False,
            None,
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            False,
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only http/protobuf is supported "
            "(traces not exported)",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin,otlp"},
            True,
            "OTEL_TRACES_EXPORTER=zipkin,otlp: only otlp is exported",
        ),
    ],
)
def test_the_rule_for_when_a_command_exports(
    restored: None,
    caplog: pytest.LogCaptureFixture,
    env: dict[str, str],
    on: bool,
    warning: str | None,
) -> None:
    disable()
    with caplog.at_level(logging.WARNING, logger="broker.telemetry"):
        with export_from_env("test", env) as exporting:
            assert exporting is on
            assert is_enabled() is on
    assert not is_enabled()  # put back as it was
    warned = [r.getMessage() for r in caplog.records if r.name == "broker.telemetry"]
    assert warned == ([f"broker test: {warning}"] if warning else [])


def test_without_the_sdk_installed_a_command_warns_once_and_runs(
    restored: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n.startswith("opentelemetry.sdk")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if never installed
    disable()
    with caplog.at_level(logging.WARNING, logger="broker.telemetry"):
        with export_from_env("serve", {"OTEL_TRACES_EXPORTER": "otlp"}) as on:
            assert not on
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "broker.telemetry"]
    assert warned.startswith("broker serve: OTEL_* asks for telemetry but opentelemetry.sdk")
    assert warned.endswith(
        "is not installed (pip install 'trio-approval-broker[otel]'): not exported"
    )
