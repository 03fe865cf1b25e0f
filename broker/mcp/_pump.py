"""The MCP gate's frame pump: the two outboxes of one connection (lines for the client, lines
for the server) and the writers that empty them into the peers' streams.

Synopsis::

    pump = Pump()
    await pump.run(client_out, upstream_out, serve)   # serve() reads and routes; then drain
    await pump.send(pump.to_upstream, line)           # backpressure while serving

While serving, a full outbox makes its sender wait (backpressure: no unbounded buffer). Once
:attr:`Pump.closing` is set, the gate never waits on a peer again: what does not fit is
dropped, and the writers get :data:`DRAIN_GRACE` seconds to hand over what is queued.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

__all__ = ["DRAIN_GRACE", "OUTBOX", "Pump"]

log = logging.getLogger("broker.mcp")

#: Lines queued for one side before the reader of the other side waits (backpressure).
OUTBOX: Final = 64
#: Seconds the writers get to hand over what is queued once the connection ended.
DRAIN_GRACE: Final = 2.0


@attrs.define(eq=False)
class Pump:
    """The outboxes of one connection; their writers live in :meth:`run`'s nursery."""

    to_client: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    to_upstream: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    _client_rx: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    _upstream_rx: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    #: Set once the connection ended: from then on nothing waits on a peer.
    closing: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self.to_client, self._client_rx = trio.open_memory_channel[bytes](OUTBOX)
        self.to_upstream, self._upstream_rx = trio.open_memory_channel[bytes](OUTBOX)

    async def run(
        self,
        client_out: trio.abc.SendStream,
        upstream_out: trio.abc.SendStream,
        serve: Callable[[], Awaitable[None]],
    ) -> None:
        """Write both outboxes to their streams while ``await serve()`` runs; then close both
        outboxes, let the writers drain them within :data:`DRAIN_GRACE` (a peer that stopped
        reading cannot hold the gate open) and close both streams.

        Cancellation: the writers are cancelled, both streams are closed (trio closes a
        stream even when cancelled), ``Cancelled`` propagates.
        """
        async with trio.open_nursery() as io:
            io.start_soon(_write, client_out, self._client_rx, "client")
            io.start_soon(_write, upstream_out, self._upstream_rx, "server")
            async with self.to_client, self.to_upstream:
                await serve()
            io.cancel_scope.deadline = trio.current_time() + DRAIN_GRACE

    @staticmethod
    def send_nowait(channel: trio.MemorySendChannel[bytes], line: bytes) -> None:
        """Queue *line* if there is room; during teardown a peer that stopped reading loses
        what it would not read, and the gate does not wait for it."""
        try:
            channel.send_nowait(line)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.info("dropped a line for a peer that is not reading (teardown)")

    async def send(self, channel: trio.MemorySendChannel[bytes], line: bytes) -> None:
        """Queue *line*: wait for room while serving, never once :attr:`closing`.

        Cancellation: the line is not queued.
        """
        if self.closing:
            self.send_nowait(channel, line)
            await trio.lowlevel.checkpoint()
        else:
            await channel.send(line)


async def _write(
    stream: trio.abc.SendStream, lines: trio.MemoryReceiveChannel[bytes], who: str
) -> None:
    """Write each line to *stream* until the channel closes, then close *stream*. A broken
    stream is logged and what follows is discarded (so senders never block on a dead peer)."""
    broken = False
    try:
        async with lines:
            async for line in lines:
                if broken:
                    continue
                try:
                    await stream.send_all(line)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    log.info("the %s's stream broke; discarding what is sent to it", who)
                    broken = True
    finally:
        # trio closes the stream even when this is cancelled (the drain deadline).
        await stream.aclose()
