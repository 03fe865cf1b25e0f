"""Drive ``broker acp`` with the official ACP Python SDK (PyPI ``agent-client-protocol``).

Usage::

    python tests/interop/py_client.py CASE --cwd DIR [--cwd DIR] -- AGENT_COMMAND [ARG...]

Spawns the agent with the SDK's ``spawn_agent_process`` (a ``ClientSideConnection`` over the
child's stdio; the SDK is asyncio-only, so this runs in its own process, never inside the trio
test suite), runs one case, and prints ONE JSON object to stdout: what the client observed. It
exits non-zero only when it could not run the case at all; ``tests/test_acp_interop_py.py``
asserts on the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from importlib.metadata import version
from typing import Any, cast

import acp
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

CASES = (
    "allow",
    "reject",
    "cancelled",
    "unknown-option",
    "error",
    "session-cancel",
    "two-sessions",
    "never-answers",
)
PROMPT = "write escalated.txt"
# How long the session-cancel handler waits to see the agent's $/cancel_request before it
# answers anyway.
CANCEL_WAIT = 5.0
# How long spawn_agent_process waits for the agent to exit after stdin EOF before SIGTERM.
SHUTDOWN_WAIT = 10.0


def _usage(message: str) -> None:
    print(  # noqa: T201
        f"py_client.py: {message}\n"
        "usage: python py_client.py CASE --cwd DIR [--cwd DIR] -- AGENT...\n"
        f"cases: {', '.join(CASES)}",
        file=sys.stderr,
    )
    sys.exit(2)


def parse_args(argv: list[str]) -> tuple[str, list[str], list[str]]:
    """``(case, cwds, agent argv)``; exits with status 2 on a usage error."""
    if not argv or argv[0] not in CASES:
        _usage(f"unknown case {argv[0] if argv else None!r}")
    name, rest = argv[0], argv[1:]
    cwds: list[str] = []
    i = 0
    while i < len(rest) and rest[i] != "--":
        if rest[i] != "--cwd" or i + 1 >= len(rest):
            _usage(f"unexpected {rest[i]!r}")
        cwds.append(rest[i + 1])
        i += 2
    agent = rest[i + 1 :]
    if not agent:
        _usage("missing the agent command after --")
    if len(cwds) != (2 if name == "two-sessions" else 1):
        _usage("wrong number of --cwd")
    return name, cwds, agent


def _selected(option_id: str) -> RequestPermissionResponse:
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id)
    )


def _dump(value: Any) -> Any:
    """A pydantic model as its wire JSON (camelCase, only the fields that were set)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return value


class _LogRecorder(logging.Handler):
    """Keeps the SDK's logged errors (it logs, rather than raises, failures in notifications)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" [{type(exc).__name__}: {exc}]"
        self.into.append(text)


class InteropClient:
    """The ACP client side: answers ``session/request_permission`` per case, records updates.

    It implements the two methods the SDK's ``Client`` protocol needs here; the SDK answers any
    other client method with "method not found" (the agent calls none).
    """

    def __init__(self, case: str, report: dict[str, Any]) -> None:
        self.case = case
        self.report = report
        self.allowed: set[str] = set()  # two-sessions: the session ids we allow
        self.conn: acp.ClientSideConnection | None = None
        # ids of $/cancel_request notifications seen on the wire (the SDK itself ignores them)
        self.cancel_requests: list[Any] = []
        self.cancel_seen = asyncio.Event()
        # The SDK does not hand the request id to the handler: the observer notes it per session
        # (a session has one permission request at a time) and sees our responses go out.
        self._permission_ids: dict[str, Any] = {}
        self._responses_sent: set[Any] = set()
        self._response_sent = asyncio.Event()

    def on_connect(self, conn: acp.ClientSideConnection) -> None:
        self.conn = conn

    def observe(self, event: StreamEvent) -> None:
        """A stream observer: sees every raw JSON-RPC message in both directions."""
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            if "method" not in message:
                self._responses_sent.add(message.get("id"))
                self._response_sent.set()
        else:
            method = message.get("method")
            if method == "session/request_permission":
                params = message.get("params") or {}
                self._permission_ids[str(params.get("sessionId"))] = message.get("id")
            elif method == "$/cancel_request":
                self.cancel_requests.append((message.get("params") or {}).get("requestId"))
                self.cancel_seen.set()
            elif method == "session/update":
                self.report["rawUpdateCount"] += 1

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.report["updates"].append({"sessionId": session_id, "update": _dump(update)})

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        request_id = self._permission_ids.get(session_id)
        seen: dict[str, Any] = {
            "requestId": request_id,
            "params": {
                "sessionId": session_id,
                "toolCall": _dump(tool_call),
                "options": [_dump(option) for option in options],
            },
            "answer": None,
        }
        self.report["permissionRequests"].append(seen)
        if self.case == "error":
            seen["answer"] = "error"
            raise acp.RequestError(-32603, "no UI attached")
        if self.case == "never-answers":
            seen["answer"] = "never"
            await asyncio.Event().wait()  # until the connection closes and cancels us
        if self.case == "session-cancel":
            answer = await self._cancel_then_answer(session_id)
        elif self.case == "cancelled":
            answer = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        elif self.case == "allow":
            answer = _selected("allow-once")
        elif self.case == "reject":
            answer = _selected("reject-once")
        elif self.case == "unknown-option":
            answer = _selected("maybe-later")
        elif self.case == "two-sessions":
            answer = _selected("allow-once" if session_id in self.allowed else "reject-once")
        else:
            raise AssertionError(f"unhandled case {self.case}")
        seen["answer"] = _dump(answer)
        return answer

    async def _cancel_then_answer(self, session_id: str) -> RequestPermissionResponse:
        """As the ACP spec asks of a client: send ``session/cancel``, then answer the pending
        permission request with the ``cancelled`` outcome. We answer after the agent withdrew
        the request (``$/cancel_request``), so the answer is a late one."""
        assert self.conn is not None
        await self.conn.cancel(session_id=session_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.cancel_seen.wait(), CANCEL_WAIT)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def answers_sent(self) -> None:
        """Wait (bounded) until our answer to every permission request is on the wire, so that
        hanging up next cannot lose one (session-cancel: the prompt can end first)."""
        if self.case == "never-answers":
            return
        async with asyncio.timeout(CANCEL_WAIT):
            while not set(self._permission_ids.values()) <= self._responses_sent:
                self._response_sent.clear()
                await self._response_sent.wait()


async def run(name: str, cwds: list[str], agent: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {
        "sdk": "agent-client-protocol",
        "sdkVersion": version("agent-client-protocol"),
        "case": name,
        "initialize": None,
        "sessions": [],
        "updates": [],
        "rawUpdateCount": 0,
        "permissionRequests": [],
        "cancelRequestsSeen": [],
        "sdkLog": [],
        "errors": [],
        "agentExit": None,
    }
    logging.getLogger().addHandler(_LogRecorder(report["sdkLog"]))
    client = InteropClient(name, report)
    async with acp.spawn_agent_process(
        cast(acp.Client, client),
        agent[0],
        *agent[1:],
        transport_kwargs={"shutdown_timeout": SHUTDOWN_WAIT, "stderr": None},
        observers=[client.observe],
    ) as (conn, process):
        try:
            init = await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                # The SDK's defaults (no fs, no terminal); it serializes them away.
                client_capabilities=ClientCapabilities(fs=FileSystemCapabilities()),
                client_info=Implementation(name="broker-interop-py", version="0.0.0"),
            )
            report["initialize"] = _dump(init)
            for cwd in cwds:
                session = await conn.new_session(cwd=cwd, mcp_servers=[])
                report["sessions"].append(
                    {"sessionId": session.session_id, "cwd": cwd, "stopReason": None}
                )
            if name == "two-sessions":
                client.allowed.add(report["sessions"][0]["sessionId"])

            async def prompt(entry: dict[str, Any]) -> None:
                try:
                    response = await conn.prompt(
                        session_id=entry["sessionId"], prompt=[acp.text_block(PROMPT)]
                    )
                    entry["stopReason"] = response.stop_reason
                except acp.RequestError as exc:
                    entry["error"] = f"{exc.code} {exc}"

            await asyncio.gather(*(prompt(entry) for entry in report["sessions"]))
            await client.answers_sent()
        except Exception as exc:
            report["errors"].append(f"connection: {type(exc).__name__}: {exc}")
    # spawn_agent_process closed the agent's stdin and waited (SIGTERM after SHUTDOWN_WAIT).
    report["agentExit"] = {"code": process.returncode}
    report["cancelRequestsSeen"] = client.cancel_requests
    return report


def main() -> int:
    name, cwds, agent = parse_args(sys.argv[1:])
    report = asyncio.run(run(name, cwds, agent))
    print(json.dumps(report))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
