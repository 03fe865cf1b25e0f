"""The frame recorder: every JSON-RPC message as it crossed the wire, for tests and traces.

A connection calls its :data:`FrameHook` with each frame it writes (just before writing it) and
each JSON object it reads (before dispatching it); :class:`FrameRecorder` is the hook that keeps
them all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

__all__ = ["Direction", "Frame", "FrameHook", "FrameRecorder"]


class Direction(enum.Enum):
    """Which way a :class:`Frame` went."""

    SENT = "sent"
    RECEIVED = "received"


@attrs.frozen
class Frame:
    """One JSON-RPC message as it crossed the wire (parsed), for tests and snapshots."""

    direction: Direction
    message: dict[str, Any]


FrameHook: TypeAlias = Callable[[Frame], None]


@attrs.define(eq=False)
class FrameRecorder:
    """A :data:`FrameHook` that keeps every frame, in wire order (for tests: it never forgets).

    Synopsis::

        recorder = FrameRecorder()
        conn = JsonRpcConnection(send_stream=s, receive_stream=r, on_frame=recorder)
        ...
        assert recorder.sent[0] == {"jsonrpc": "2.0", "id": 0, "method": ..., "params": ...}
    """

    frames: list[Frame] = attrs.field(factory=list, init=False)

    def __call__(self, frame: Frame) -> None:
        self.frames.append(frame)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The messages we wrote, in order."""
        return [f.message for f in self.frames if f.direction is Direction.SENT]

    @property
    def received(self) -> list[dict[str, Any]]:
        """The JSON objects we read, in order (lines that were not JSON objects are not frames)."""
        return [f.message for f in self.frames if f.direction is Direction.RECEIVED]
