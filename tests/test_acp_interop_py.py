"""ACP interop: ``broker acp`` driven by the official Python SDK (PyPI ``agent-client-protocol``).

The SDK is asyncio-only, so ``tests/interop/py_client.py`` runs it in its own process: it spawns
the agent and runs one case; :mod:`tests.interop_support` checks the report, the frame trace
(against the ACP schema) and the session log.
"""

from __future__ import annotations

import pathlib

import pytest

from .interop_support import (
    CASES,
    check,
    check_case,
    check_equal,
    python_client_command,
    require_sandbox,
    run_case,
)

pytestmark = pytest.mark.slow

#: What the SDK logs for each ``$/cancel_request`` it gets: it has no handler for the protocol
#: notification, raises "method not found" internally and logs it (it sends nothing back).
CANCEL_NOT_HANDLED = "Unhandled error while handling notification method=$/cancel_request"


@pytest.fixture(scope="module", autouse=True)
def _sandbox() -> None:
    require_sandbox()


@pytest.mark.parametrize("case", CASES)
def test_python_sdk_client(case: str, tmp_path: pathlib.Path) -> None:
    run = run_case(python_client_command(), case, tmp_path)
    check_case(run)
    report = run.report
    # Every session/update frame reached the SDK and passed its pydantic models.
    check_equal(report["rawUpdateCount"], len(report["updates"]), run, "updates parsed")
    # Nothing but the SDK's complaint about $/cancel_request may be logged.
    cancels = len(run.sent_with("$/cancel_request"))
    logged = [line for line in report["sdkLog"] if not line.startswith(CANCEL_NOT_HANDLED)]
    check_equal(logged, [], run, "errors the Python SDK logged")
    check_equal(len(report["sdkLog"]), cancels, run, "one log line per $/cancel_request")
    check(
        all("Method not found" in line for line in report["sdkLog"]),
        run,
        "the SDK's reason for ignoring $/cancel_request",
    )
    # Real-client habit: the SDK drops default clientCapabilities from initialize.
    init = run.received[0]
    check_equal(init["method"], "initialize", run, "first frame")
    check("clientCapabilities" not in init["params"], run, "clientCapabilities omitted")
