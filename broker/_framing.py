"""Framing: one JSON value per line, UTF-8, ``\n``-terminated — ACP's stdio transport and MCP's
(the ACP connection and the MCP gate both read with it).

This module owns the bytes: splitting a receive stream into lines under a length limit (an
over-long line is skipped up to its newline without being buffered), parsing one line, and
encoding one message as one line. It knows nothing of JSON-RPC.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

__all__ = ["DEFAULT_MAX_LINE_BYTES", "encode_line", "parse_line", "read_lines"]

DEFAULT_MAX_LINE_BYTES: Final = 4 * 1024 * 1024

_RECEIVE_CHUNK = 64 * 1024


async def read_lines(
    stream: trio.abc.ReceiveStream,
    limit: int,
    handle: Callable[[bytes | None], Awaitable[None]],
) -> None:
    """Call ``await handle(line)`` for each line of *stream* (without its ``\\n``), in order.

    A line longer than *limit* bytes is skipped and reported as ``handle(None)``; at most one
    limit (plus one chunk) of a single line is ever held. A last line without its newline is
    handled too, as the TypeScript SDK does. Returns at end of input; a broken stream raises.
    """
    buffer = bytearray()
    scanned = 0  # bytes of *buffer* known to hold no newline
    discarding = False  # skipping the rest of an over-long line
    while True:
        chunk = await stream.receive_some(_RECEIVE_CHUNK)
        if not chunk:
            break
        if discarding:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            discarding = False
            chunk = chunk[newline + 1 :]
        buffer += chunk
        start = 0
        while True:
            newline = buffer.find(b"\n", max(start, scanned))
            if newline < 0:
                break
            line = bytes(buffer[start:newline])
            start = scanned = newline + 1
            await handle(None if len(line) > limit else line)
        del buffer[:start]
        scanned = len(buffer)
        if len(buffer) > limit:
            # Invariant: never hold more than one limit (plus one chunk) of a single line.
            buffer.clear()
            scanned = 0
            discarding = True
            await handle(None)
    if buffer and not discarding:
        await handle(bytes(buffer))


def parse_line(raw: bytes) -> object:
    """The JSON value of one line; :class:`ValueError` (or :class:`RecursionError`) if none.

    ValueError covers bad UTF-8, bad JSON, ``NaN``/``Infinity`` and integers too long to convert.
    """
    return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)


def encode_line(message: dict[str, Any]) -> bytes:
    """One line: compact JSON, UTF-8, newline-terminated. JSON escapes every raw newline."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (legal in a JSON escape we parsed) cannot be UTF-8: escape it.
        text = json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return (text + "\n").encode("ascii")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
