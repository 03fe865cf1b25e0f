"""The upstream MCP server of the gate: a child process over its stdin and stdout, or a
server at a URL over MCP's streamable HTTP.

Synopsis::

    async with open_broker(store="log.sqlite") as broker:
        status = await serve_mcp_gate(broker, ["npx", "-y", "some-mcp-server"],
                                      client_in=stdin, client_out=stdout)
        await serve_mcp_gate(broker, "http://127.0.0.1:8000/mcp",
                             client_in=stdin, client_out=stdout)

The server's standard error is the gate's own (MCP servers log there). Stopping follows MCP's
stdio shutdown: close the server's stdin, wait, then SIGTERM, wait, then SIGKILL, each wait
bounded by :data:`STOP_GRACE`. A server at a URL has its session ended with a ``DELETE``.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio

from .._broker import Broker
from ._gate import ANSWER_GRACE, MAX_LINE_BYTES, relay
from ._http import UpstreamUrl
from ._rules import GateRules
from ._streamable import open_streamable_upstream

__all__ = ["STOP_GRACE", "serve_mcp_gate"]

#: Seconds the server gets to exit after its stdin closed, and again after SIGTERM.
STOP_GRACE: Final = 2.0


async def serve_mcp_gate(
    broker: Broker,
    upstream: Sequence[str] | UpstreamUrl | str,
    *,
    client_in: trio.abc.ReceiveStream,
    client_out: trio.abc.SendStream,
    rules: GateRules | None = None,
    remote_answers: bool = False,
    deadline: float = 300.0,
    server_deadline: float = 600.0,
    answer_grace: float = ANSWER_GRACE,
) -> int | None:
    """Gate the connection between the client and the upstream MCP server
    (:func:`broker.mcp.relay`) until either side closes. *upstream* is the command that starts
    the server (a list: its stdin and stdout are the connection), or its URL (an
    :class:`UpstreamUrl`, or a string: ``http://`` or ``https://``, MCP's streamable-HTTP
    transport, ``broker/mcp/_streamable.py``). Returns the started server's exit status
    (``None`` when it had to be killed and its status is unknown, and for a URL). Once the
    client closed its stream, what it sent before is still decided and answered (the server's
    responses relayed) for up to *answer_grace* seconds.

    Raises :class:`OSError` when the command cannot be started, :class:`ValueError` when
    *upstream* names no server or a URL that is not one (saying what to fix). A server at a URL
    that cannot be reached does not end the gate: each request gets an error. Cancellation: the
    relay's teardown runs, the server is stopped (shielded, bounded) or its POSTs in flight are
    closed, ``Cancelled`` propagates.
    """
    async with _open_upstream(upstream) as server:
        await relay(
            broker,
            client_in=client_in,
            client_out=client_out,
            upstream_in=server.receive_stream,
            upstream_out=server.send_stream,
            rules=rules,
            remote_answers=remote_answers,
            deadline=deadline,
            server_deadline=server_deadline,
            answer_grace=answer_grace,
        )
    return server.status


@attrs.define(eq=False)
class _Upstream:
    """The two byte streams of an upstream server, and the exit status of a started one."""

    receive_stream: trio.abc.ReceiveStream
    send_stream: trio.abc.SendStream
    status: int | None = None


@asynccontextmanager
async def _open_upstream(upstream: Sequence[str] | UpstreamUrl | str) -> AsyncIterator[_Upstream]:
    """The server *upstream* names (:func:`serve_mcp_gate`), started or connected; on exit a
    started one is stopped (shielded, bounded; its status kept) and a session at a URL is
    ended."""
    if isinstance(upstream, str):
        upstream = UpstreamUrl.parse(upstream)
    if isinstance(upstream, UpstreamUrl):
        async with open_streamable_upstream(upstream, max_message_bytes=MAX_LINE_BYTES) as http:
            yield _Upstream(http.receive_stream, http.send_stream)
        return
    if not upstream:
        raise ValueError("command must name the MCP server to start: pass SERVER_CMD ARGS…")
    process = await trio.lowlevel.open_process(
        list(upstream), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    server = _Upstream(process.stdout, process.stdin)
    try:
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)
        server.status = process.returncode


async def _stop(process: trio.Process) -> None:
    """Close stdin, wait; terminate, wait; kill, wait (each bounded)."""
    if process.stdin is not None:
        await process.stdin.aclose()
    with trio.move_on_after(STOP_GRACE):
        await process.wait()
        return
    process.terminate()
    with trio.move_on_after(STOP_GRACE):
        await process.wait()
        return
    process.kill()
    with trio.move_on_after(STOP_GRACE):
        await process.wait()
