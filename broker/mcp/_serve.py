"""The upstream MCP server of the gate: a child process over its stdin and stdout, or a
server at a URL over MCP's streamable HTTP.

Synopsis::

    async with open_broker(store="log.sqlite") as broker:
        status = await serve_mcp_gate(broker, ["npx", "-y", "some-mcp-server"],
                                      client_in=stdin, client_out=stdout)
        await serve_mcp_gate_url(broker, "http://127.0.0.1:8000/mcp",
                                 client_in=stdin, client_out=stdout)

The server's standard error is the gate's own (MCP servers log there). Stopping follows MCP's
stdio shutdown: close the server's stdin, wait, then SIGTERM, wait, then SIGKILL, each wait
bounded by :data:`STOP_GRACE`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import trio

from ._gate import MAX_LINE_BYTES, relay
from ._http import UpstreamUrl
from ._rules import GateRules
from ._streamable import open_streamable_upstream

if TYPE_CHECKING:
    from .._broker import Broker

__all__ = ["STOP_GRACE", "serve_mcp_gate", "serve_mcp_gate_url"]

#: Seconds the server gets to exit after its stdin closed, and again after SIGTERM.
STOP_GRACE: Final = 2.0


async def serve_mcp_gate(
    broker: Broker,
    command: Sequence[str],
    *,
    client_in: trio.abc.ReceiveStream,
    client_out: trio.abc.SendStream,
    rules: GateRules | None = None,
    remote_answers: bool = False,
    deadline: float = 300.0,
    server_deadline: float = 600.0,
) -> int | None:
    """Start *command* as the upstream MCP server and gate the connection between it and the
    client (:func:`broker.mcp.relay`) until either side closes; returns the server's exit
    status (``None`` when it had to be killed and its status is unknown).

    Raises :class:`OSError` when *command* cannot be started. Cancellation: the relay's
    teardown runs, the server is stopped (shielded, bounded), ``Cancelled`` propagates.
    """
    if not command:
        raise ValueError("command must name the MCP server to start: pass SERVER_CMD ARGS…")
    process = await trio.lowlevel.open_process(
        list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        await relay(
            broker,
            client_in=client_in,
            client_out=client_out,
            upstream_in=process.stdout,
            upstream_out=process.stdin,
            rules=rules,
            remote_answers=remote_answers,
            deadline=deadline,
            server_deadline=server_deadline,
        )
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)
    return process.returncode


async def serve_mcp_gate_url(
    broker: Broker,
    url: str,
    *,
    client_in: trio.abc.ReceiveStream,
    client_out: trio.abc.SendStream,
    rules: GateRules | None = None,
    remote_answers: bool = False,
    deadline: float = 300.0,
    server_deadline: float = 600.0,
) -> None:
    """Gate the connection between the client and the MCP server at *url* (``http://`` or
    ``https://``, MCP's streamable-HTTP transport; ``broker/mcp/_streamable.py``) until the
    client closes its stream; the server's session is ended with a ``DELETE``.

    Raises :class:`ValueError` when *url* is not one (saying what to fix). A server that
    cannot be reached does not end the gate: each request gets an error. Cancellation: the
    relay's teardown runs, the POSTs in flight are closed, ``Cancelled`` propagates.
    """
    target = UpstreamUrl.parse(url)
    async with open_streamable_upstream(target, max_message_bytes=MAX_LINE_BYTES) as upstream:
        await relay(
            broker,
            client_in=client_in,
            client_out=client_out,
            upstream_in=upstream.receive_stream,
            upstream_out=upstream.send_stream,
            rules=rules,
            remote_answers=remote_answers,
            deadline=deadline,
            server_deadline=server_deadline,
        )


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
