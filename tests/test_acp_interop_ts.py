"""ACP interop: ``broker acp`` driven by the official TypeScript SDK (``@agentclientprotocol/sdk``).

``tests/interop/ts/client.mjs`` spawns the agent and runs one case with the SDK's client app;
:mod:`tests.interop_support` checks the report, the frame trace (against the ACP schema) and
the session log. Needs Node.js >= 20 and ``npm ci --prefix tests/interop/ts``: without the SDK
these tests fail (they never skip), saying how to install it.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from .interop_support import (
    CASES,
    INTEROP_DIR,
    check_case,
    check_equal,
    node_client_command,
    require_sandbox,
    run_case,
)

pytestmark = pytest.mark.slow

PINNED = json.loads((INTEROP_DIR / "ts" / "package.json").read_text(encoding="utf-8"))[
    "dependencies"
]["@agentclientprotocol/sdk"]


@pytest.fixture(scope="module", autouse=True)
def _sandbox() -> None:
    require_sandbox()


@pytest.mark.parametrize("case", CASES)
def test_typescript_sdk_client(case: str, tmp_path: pathlib.Path) -> None:
    run = run_case(node_client_command(), case, tmp_path)
    check_case(run)
    report = run.report
    check_equal(report["sdkVersion"], PINNED, run, "installed SDK version vs package.json")
    # The SDK logs (console.error) what it could not handle: a session/update or a request that
    # failed its zod schema, a response to an unknown id. Nothing of ours may land there.
    check_equal(report["sdkLog"], [], run, "errors the TypeScript SDK logged")
    # The SDK turns the agent's $/cancel_request into an abort of the handler's signal.
    withdrawn = case in ("session-cancel", "never-answers")
    check_equal(
        [p["cancelSignalled"] for p in report["permissionRequests"]],
        [withdrawn] * len(report["permissionRequests"]),
        run,
        "handler signals aborted by $/cancel_request",
    )
    # This client advertises its capabilities explicitly (the agent accepts both forms).
    init = run.received[0]
    check_equal(init["method"], "initialize", run, "first frame")
    check_equal(
        init["params"]["clientCapabilities"],
        {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
        run,
        "clientCapabilities sent",
    )
