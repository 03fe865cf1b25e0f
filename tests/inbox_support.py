"""Helpers of the inbox tests: a small HTTP/1.1 client on trio (h11), an SSE reader, and an
inbox on a free port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import h11
import trio

from broker import Broker
from broker.inbox import serve_inbox
from broker.store.board import AnswerBoard

__all__ = ["TOKEN", "EventStream", "Inbox", "Reply", "http", "open_events", "open_inbox"]

TOKEN = "test-token-0123456789abcdef"


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


async def http(
    port: int,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> Reply:
    """One request on a fresh connection; the whole reply."""
    conn = h11.Connection(h11.CLIENT)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = [("host", f"127.0.0.1:{port}"), ("content-length", str(len(body)))]
        head += list((headers or {}).items())
        await stream.send_all(conn.send(h11.Request(method=method, target=path, headers=head)))
        await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        response: h11.Response | None = None
        chunks = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
    assert response is not None
    found = {k.decode().lower(): v.decode() for k, v in response.headers}
    return Reply(response.status_code, found, b"".join(chunks))


@attrs.frozen
class Inbox:
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def open_inbox(target: Broker | AnswerBoard, **kwargs: object) -> AsyncIterator[Inbox]:
    """An inbox over *target* (a broker's board, or a board) on a free port, stopped on the
    way out."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_inbox, target, token=TOKEN, port=0, **kwargs))  # type: ignore[arg-type]
        yield Inbox(port=port)
        nursery.cancel_scope.cancel(reason="the test is done with the inbox")


@attrs.define
class EventStream:
    """A Server-Sent Events response read event by event (``await stream.next()``)."""

    stream: trio.SocketStream
    conn: h11.Connection
    status: int = 0
    _buffer: bytes = b""

    async def next(self) -> tuple[str, bytes]:
        """The next event (name, data), keep-alive comments skipped."""
        while True:
            await trio.lowlevel.checkpoint()
            while b"\n\n" not in self._buffer:
                event = self.conn.next_event()
                if event is h11.NEED_DATA:
                    data = await self.stream.receive_some(65536)
                    if not data:
                        raise EOFError("the stream ended")
                    self.conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    self._buffer += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    raise EOFError("the stream ended")
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            name, data = "message", b""
            for line in raw.split(b"\n"):
                if line.startswith(b"event: "):
                    name = line.removeprefix(b"event: ").decode()
                elif line.startswith(b"data: "):
                    data = line.removeprefix(b"data: ")
            if data:
                return name, data


@asynccontextmanager
async def open_events(port: int, headers: dict[str, str]) -> AsyncIterator[EventStream]:
    """``GET /events``, the connection closed on the way out."""
    conn = h11.Connection(h11.CLIENT)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = [("host", f"127.0.0.1:{port}"), *headers.items()]
        await stream.send_all(conn.send(h11.Request(method="GET", target="/events", headers=head)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        events = EventStream(stream, conn)
        while not events.status:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                events.status = event.status_code
            await trio.lowlevel.checkpoint()
        yield events
