"""``broker mcp-gate`` driven by the official MCP TypeScript SDK client
(``@modelcontextprotocol/sdk``, pinned by ``tests/mcp/ts/package-lock.json``), in front of the
Python SDK's ``MCPServer`` (``tests/mcp/upstream.py``). Needs Node.js >= 20; the SDK is
installed with ``npm ci --prefix tests/mcp/ts`` on first use (these tests fail, never skip,
when it cannot be)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from broker import Outcome
from broker.mcp import refusal_text

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
TS = ROOT / "tests" / "mcp" / "ts"
TIMEOUT = 60


@pytest.fixture(scope="module", autouse=True)
def _sdk() -> None:
    if (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        return
    installed = subprocess.run(
        ["npm", "ci", "--prefix", str(TS), "--no-audit", "--no-fund", "--loglevel=error"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if installed.returncode != 0:
        pytest.fail(
            f"the MCP TypeScript SDK is not installed and npm ci failed: {installed.stderr}; "
            "run npm ci --prefix tests/mcp/ts (Node.js >= 20)"
        )


def run_client(tmp_path: pathlib.Path, elicit: str, *gate_args: str) -> dict[str, Any]:
    record = tmp_path / "record.jsonl"
    gate = [sys.executable, "-m", "broker.cli", "mcp-gate", *gate_args, "--"]
    upstream = [sys.executable, "-m", "tests.mcp.upstream", str(record)]
    done = subprocess.run(
        ["node", str(TS / "client.mjs"), elicit, "--", *gate, *upstream],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    report["recorded"] = [json.loads(line)["tool"] for line in record.read_text().splitlines()]
    return report


def refusal(outcome: Outcome) -> dict[str, Any]:
    text = refusal_text("write_note", outcome)
    return {"content": [{"type": "text", "text": text}], "isError": True}


@pytest.mark.parametrize(
    ("elicit", "outcome"),
    [
        ("accept", Outcome.ALLOWED_ONCE),
        ("decline", Outcome.REJECTED),
        ("cancel", Outcome.CANCELLED),
        ("none", Outcome.UNAVAILABLE),
    ],
)
def test_typescript_sdk_client_through_the_gate(
    tmp_path: pathlib.Path, elicit: str, outcome: Outcome
) -> None:
    rules = tmp_path / "gate.toml"
    rules.write_text('allow = ["read_*"]\n')
    report = run_client(tmp_path, elicit, "--store", ":memory:", "--rules", str(rules))
    assert report["tools"] == ["read_note", "write_note", "ask_user", "hang_forever", "crash_now"]
    assert report["read"]["isError"] is False
    if outcome is Outcome.ALLOWED_ONCE:
        assert report["write"]["isError"] is False
        assert report["recorded"] == ["read_note", "write_note"]
    else:
        assert report["write"] == refusal(outcome)
        assert report["recorded"] == ["read_note"]
    if elicit == "none":
        assert report["seen"] == []
    else:
        (message,) = report["seen"]
        assert message.startswith(
            'MCP tool call: write_note, arguments: {"name":"a","text":"x"}\n\n'
        )
