"""The outbox: the one writer of a connection's send stream, fed by a small bounded queue.

Every task that sends (callers of ``request``/``notify``, handler tasks answering, the reader
answering garbage) queues a whole line here; the writer task writes lines one at a time, so
frames never interleave and a cancelled sender never leaves half a line behind. The queue is
small on purpose: a peer that stops reading pushes back on the tasks that write, instead of
growing a buffer.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs
import trio

from ._errors import ConnectionClosed
from ._frames import Direction, Frame, FrameHook

__all__ = ["Outbox"]

# Frames queued for the writer (see the module docstring).
_OUTBOX_CAPACITY = 16


@attrs.define(eq=False)
class Outbox:
    """Owns the write queue and, while :meth:`write_loop` runs, the send stream."""

    _send: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    _receive: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    _close_reason: str | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[bytes](_OUTBOX_CAPACITY)

    def close(self, reason: str) -> None:
        """Drop queued lines; blocked and later senders fail (``ConnectionClosed(reason)``)."""
        if self._close_reason is None:
            self._close_reason = reason
        self._receive.close()

    async def send_line(self, line: bytes) -> None:
        """Queue *line* for the writer, or raise :class:`ConnectionClosed`."""
        if not await self.send_quietly(line):
            raise ConnectionClosed(self._close_reason or "the write queue is closed")

    async def send_quietly(self, line: bytes) -> bool:
        """Queue *line* for the writer; False when the connection is closed. Checkpoints."""
        try:
            await self._send.send(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # send() only checked for cancellation before failing: make this a checkpoint.
            await trio.lowlevel.checkpoint()
            return False
        return True

    async def write_loop(
        self,
        stream: trio.abc.SendStream,
        on_frame: FrameHook | None,
        on_broken: Callable[[str], None],
    ) -> None:
        """Write queued lines to *stream* until the queue closes; *on_broken(why)* if it breaks."""
        # Invariant: the only task that touches the send stream, and it writes whole lines.
        try:
            async for line in self._receive:
                if on_frame is not None:
                    on_frame(Frame(Direction.SENT, json.loads(line)))
                await stream.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # A no-op when close() closed the queue; otherwise the peer's end went away.
            on_broken(f"the send stream broke ({type(exc).__name__}): the peer stopped reading")
        await trio.lowlevel.checkpoint()
