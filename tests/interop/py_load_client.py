"""Drive ``session/load`` of ``broker acp`` with the official ACP Python SDK, across restarts.

Usage::

    python tests/interop/py_load_client.py CASE --cwd DIR -- AGENT_COMMAND [ARG...]

The agent command must name a session store file (``--store``) so that the session outlives
the agent process. Each case spawns the agent several times with the SDK's
``spawn_agent_process`` (one process per "editor attach") and prints ONE JSON object: what the
client observed. Cases:

- ``failed``: prompt once (the escalation scenario: a write the sandbox refuses, then an
  approved escalation), then load the session twice from two new agent processes;
- ``killed``: prompt, and at the permission request kill -9 the agent; load from a new
  process, then prompt again on the loaded session;
- ``conversation``: prompt ``first``; load from a new process and prompt ``second``;
- ``bad-ids``: ``session/load`` with malformed ids, sent as raw JSON (the SDK's models would
  refuse a non-string id before sending it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any, cast

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

CASES = ("failed", "killed", "conversation", "bad-ids")
BAD_IDS: list[Any] = ["", "x" * 10_000, 7, None, {"id": "x"}]
SHUTDOWN_WAIT = 10.0


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return value


class LoadClient:
    """Records updates per attach; allows every permission request, or kills the agent."""

    def __init__(self, *, kill_on_permission: bool = False) -> None:
        self.updates: list[dict[str, Any]] = []
        self.permission_requests = 0
        self.kill_on_permission = kill_on_permission
        self.process: Any = None

    def on_connect(self, conn: acp.ClientSideConnection) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append({"sessionId": session_id, "update": _dump(update)})

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.permission_requests += 1
        if self.kill_on_permission and self.process is not None:
            self.process.kill()  # SIGKILL: the question is pending, nothing settles it
            await asyncio.Event().wait()
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id="allow-once")
        )


@contextlib.asynccontextmanager
async def attach(client: LoadClient, agent: list[str]) -> Any:
    async with acp.spawn_agent_process(
        cast(acp.Client, client),
        agent[0],
        *agent[1:],
        transport_kwargs={"shutdown_timeout": SHUTDOWN_WAIT, "stderr": None},
    ) as (conn, process):
        client.process = process
        await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=FileSystemCapabilities()),
            client_info=Implementation(name="broker-load-py", version="0.0.0"),
        )
        yield conn


async def prompt(conn: Any, session_id: str, text: str) -> str:
    try:
        response = await conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])
    except acp.RequestError as exc:
        return f"error {exc.code} {exc}"
    return str(response.stop_reason)


async def new_and_prompt(client: LoadClient, agent: list[str], cwd: str, text: str) -> Any:
    async with attach(client, agent) as conn:
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        stop = await prompt(conn, session.session_id, text)
    return session.session_id, stop


async def load(agent: list[str], cwd: str, session_id: str, then: str | None = None) -> Any:
    client = LoadClient()
    stop = None
    async with attach(client, agent) as conn:
        await conn.load_session(cwd=cwd, session_id=session_id, mcp_servers=[])
        replayed = list(client.updates)
        if then is not None:
            stop = await prompt(conn, session_id, then)
    return {"replayed": replayed, "after": client.updates[len(replayed) :], "stopReason": stop}


async def run(case: str, cwd: str, agent: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {"case": case}
    if case == "bad-ids":
        errors: list[dict[str, Any] | None] = []
        async with attach(LoadClient(), agent) as conn:
            for bad in BAD_IDS:
                params = {"sessionId": bad, "cwd": cwd, "mcpServers": []}
                try:
                    # The SDK's own models refuse a non-string id: send the raw request.
                    await conn._conn.send_request("session/load", params)
                    errors.append(None)
                except acp.RequestError as exc:
                    errors.append({"code": exc.code, "message": str(exc)})
        report["errors"] = errors
        return report
    live = LoadClient(kill_on_permission=case == "killed")
    first = "first" if case == "conversation" else "write escalated.txt"
    if case == "killed":
        # The agent dies under us: the SDK reports the broken connection in its own way.
        with contextlib.suppress(Exception):
            await new_and_prompt(live, agent, cwd, first)
        sessions = [u["sessionId"] for u in live.updates]
        report["sessionId"] = sessions[0] if sessions else None
    else:
        report["sessionId"], report["firstStop"] = await new_and_prompt(live, agent, cwd, first)
    report["live"] = live.updates
    report["permissionRequests"] = live.permission_requests
    session_id = report["sessionId"]
    if case == "failed":
        report["loads"] = [await load(agent, cwd, session_id) for _ in range(2)]
    elif case == "killed":
        report["loads"] = [await load(agent, cwd, session_id, then="again")]
    else:
        report["loads"] = [await load(agent, cwd, session_id, then="second")]
    return report


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 5 or argv[0] not in CASES or argv[1] != "--cwd" or argv[3] != "--":
        print(  # noqa: T201
            f"usage: python py_load_client.py {{{','.join(CASES)}}} --cwd DIR -- AGENT...",
            file=sys.stderr,
        )
        return 2
    report = asyncio.run(run(argv[0], argv[2], argv[4:]))
    print(json.dumps(report))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
