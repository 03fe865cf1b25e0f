"""A trio instrument that counts scheduler passes and the tasks still alive."""

from __future__ import annotations

import attrs
import trio
from trio.abc import Instrument

__all__ = ["Watch"]


@attrs.define(eq=False)
class Watch(Instrument):
    """``passes`` counts scheduler batches (one I/O wait each); ``alive`` the tasks spawned
    since installation that have not exited."""

    passes: int = 0
    alive: set[trio.lowlevel.Task] = attrs.field(factory=set)

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.alive.add(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive.discard(task)
