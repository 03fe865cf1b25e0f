"""Server-sent events as the MCP gate reads them from a streamable-HTTP server: the data of
each ``message`` event, one JSON-RPC message each, within a size bound.

Synopsis::

    events = SseParser(limit=4 * 1024 * 1024)
    for data in events.feed(chunk):       # TooLong: an event (or a line) over the limit
        handle(data)

Lines end with CRLF, LF or CR; ``data:`` lines of one event are joined with a newline;
comments (``:``) and events of another type are skipped. The stream's cursor is kept for
resuming it (``GET`` with ``Last-Event-ID``): :attr:`SseParser.last_id`, the ``id`` of the last
event dispatched (``None`` until one names a non-empty one; an empty ``id`` clears it), and
:attr:`SseParser.retry`, the seconds the server asked a reconnection to wait. After a break,
:meth:`SseParser.reconnected` drops the half-read event and keeps the cursor. At most *limit*
bytes of one event are ever held.
"""

from __future__ import annotations

import attrs

__all__ = ["SseParser", "TooLong"]


class TooLong(ValueError):
    """An event, or one line of it, longer than the parser's limit."""


@attrs.define(eq=False)
class SseParser:
    """An incremental parser of one event stream (one per HTTP response)."""

    limit: int
    _buffer: bytearray = attrs.field(init=False, factory=bytearray)
    _scanned: int = attrs.field(init=False, default=0)
    _data: list[bytes] = attrs.field(init=False, factory=list)
    _size: int = attrs.field(init=False, default=0)
    _event: bytes = attrs.field(init=False, default=b"")
    #: The last chunk ended with CR: an LF starting the next one ends no new line.
    _after_cr: bool = attrs.field(init=False, default=False)
    #: The ``id`` of the last event dispatched (module doc), and the one being read.
    last_id: bytes | None = attrs.field(init=False, default=None)
    _next_id: bytes | None = attrs.field(init=False, default=None)
    #: Seconds a reconnection waits, when the server said (``retry:``, in milliseconds).
    retry: float | None = attrs.field(init=False, default=None)

    def reconnected(self) -> None:
        """A new connection of the same stream: forget the half-read event, keep the cursor."""
        self._buffer.clear()
        self._scanned = self._size = 0
        self._data, self._event, self._after_cr = [], b"", False
        self._next_id = self.last_id

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every ``message`` event *chunk* completes, in order."""
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        self._buffer += chunk
        events: list[bytes] = []
        start = 0
        buffer = self._buffer
        while True:
            end = _line_end(buffer, max(start, self._scanned))
            if end < 0:
                break
            line = bytes(buffer[start:end])
            if buffer[end] == ord("\r"):
                if end + 1 == len(buffer):
                    self._after_cr = True
                elif buffer[end + 1] == ord("\n"):
                    end += 1
            start = end + 1
            self._scanned = start
            data = self._line(line)
            if data is not None:
                events.append(data)
        del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) + self._size > self.limit:
            raise TooLong(f"an event of the server's stream is longer than {self.limit} bytes")
        return events

    def _line(self, line: bytes) -> bytes | None:
        if not line:
            data, event = self._data, self._event
            self._data, self._size, self._event = [], 0, b""
            self.last_id = self._next_id  # dispatched, even without data (a priming event)
            if data and event in (b"", b"message"):
                return b"\n".join(data)
            return None
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self.limit:
                raise TooLong(f"an event of the server's stream is longer than {self.limit} bytes")
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id" and b"\0" not in value:
            self._next_id = value or None
        elif name == b"retry" and value.isdigit() and len(value) <= 9:
            self.retry = int(value) / 1000
        return None


def _line_end(buffer: bytearray, start: int) -> int:
    """The index of the first CR or LF at or after *start*, or -1."""
    lf = buffer.find(b"\n", start)
    cr = buffer.find(b"\r", start, lf if lf >= 0 else len(buffer))
    return cr if cr >= 0 else lf
