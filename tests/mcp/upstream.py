"""The upstream MCP server of the gate tests: the official Python SDK's ``MCPServer`` on stdio
with a read tool and a write tool, one that elicits itself, one that hangs and one that
crashes. Every call that reaches a tool is appended to the record file (argv[1]) as one JSON
line: the tool's name and its arguments as the server decoded them.

    python -m tests.mcp.upstream RECORD_FILE
    python -m tests.mcp.upstream RECORD_FILE --http [--json] [--param-tool] [--resumable]

With ``--http`` it serves MCP's streamable HTTP on ``127.0.0.1`` at a free port instead, at
``/mcp``, and writes ``port N`` as its first line on stdout once it listens; ``--json``
answers requests with JSON bodies instead of event streams; ``--param-tool`` adds
``read_regional``, whose ``region`` is mirrored in an ``Mcp-Param-Region`` header on
2026-07-28 (the SDK's server refuses such a call without it: ``HeaderMismatch``);
``--resumable`` keeps its events (an in-memory event store, ``retry: 100``) and adds
``poll_note``, which closes the call's event stream before it answers, so the answer arrives
only on a ``GET`` with ``Last-Event-ID``.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage
from pydantic import BaseModel, Field

RECORD = pathlib.Path(sys.argv[1])
server = MCPServer("gate-test-upstream")


def _record(tool: str, arguments: dict[str, object]) -> None:
    with RECORD.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"tool": tool, "arguments": arguments}, ensure_ascii=False) + "\n")


@server.tool(description="Read a note by name.")
def read_note(name: str) -> str:
    _record("read_note", {"name": name})
    return f"contents of {name}"


@server.tool(description="Write a note: replaces its text.")
def write_note(name: str, text: str) -> str:
    _record("write_note", {"name": name, "text": text})
    return f"wrote {len(text)} characters to {name}"


class Confirm(BaseModel):
    sure: bool


@server.tool(description="Asks the client's user itself (the server's own elicitation).")
async def ask_user(question: str, ctx: Context) -> str:
    _record("ask_user", {"question": question})
    answer = await ctx.elicit(question, Confirm)
    return f"the user said {answer.action}"


@server.tool(description="Never answers (a hung server).")
async def hang_forever() -> str:
    _record("hang_forever", {})
    await anyio.sleep(3600)
    return "unreachable"


@server.tool(description="Exits the server in the middle of the call (a crash).")
def crash_now() -> str:
    _record("crash_now", {})
    os._exit(3)


if "--param-tool" in sys.argv[2:]:

    @server.tool(description="Read a note in a region (the region is an HTTP header).")
    def read_regional(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], name: str
    ) -> str:
        _record("read_regional", {"region": region, "name": name})
        return f"contents of {name} in {region}"


if "--resumable" in sys.argv[2:]:

    @server.tool(description="Read a note, after closing the call's event stream (polling).")
    async def poll_note(name: str, ctx: Context) -> str:
        _record("poll_note", {"name": name})
        await ctx.close_sse_stream()
        await anyio.sleep(0.3)  # answer after the client reconnected
        return f"polled {name}"


class Events(EventStore):
    """Every event of every stream, in memory, for replay after a ``Last-Event-ID``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = f"{stream_id}:{len(self.events)}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        ids = [event_id for event_id, _, _ in self.events]
        if last_event_id not in ids:
            return None
        at = ids.index(last_event_id)
        stream = self.events[at][1]
        for event_id, stream_id, message in self.events[at + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


async def serve_http(json_response: bool) -> None:
    import uvicorn

    resumable = "--resumable" in sys.argv
    app = server.streamable_http_app(
        json_response=json_response,
        host="127.0.0.1",
        event_store=Events() if resumable else None,
        retry_interval=100 if resumable else None,
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    sys.stdout.write(f"port {listener.getsockname()[1]}\n")
    sys.stdout.flush()
    await http.serve(sockets=[listener])


if __name__ == "__main__":
    RECORD.touch()
    if "--http" in sys.argv[2:]:
        anyio.run(serve_http, "--json" in sys.argv[2:])
    else:
        server.run("stdio")
