"""The in-memory event store: durable for as long as the process lives; for tests and benches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from .._projection import ApprovalState, fold_all
from ._protocol import SessionRecord, StoreError

if TYPE_CHECKING:
    from .._events import Event

__all__ = ["MemoryStore"]


@attrs.define(eq=False)
class MemoryStore:
    """Keeps each session's events in a list. Appends are acknowledged at once (after a checkpoint).

    ``fail_appends`` is a test seam: while it is set, every append raises it as a
    :class:`StoreError` message and stores nothing (a full disk, a broken connection).
    """

    _logs: dict[str, list[Event]] = attrs.field(factory=dict, init=False)
    _parents: dict[str, str | None] = attrs.field(factory=dict, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    fail_appends: str | None = None

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """Record *session_id*. Cancellation: a plain checkpoint; recorded iff it returns."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        self._logs.setdefault(session_id, [])
        self._parents[session_id] = parent_id

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Append *events*. Cancellation: a plain checkpoint first; appended iff it returns."""
        await trio.lowlevel.checkpoint()
        self.append_nowait(session_id, events)

    def append_nowait(self, session_id: str, events: Sequence[Event]) -> None:
        """Synchronous twin of :meth:`append`: this store acknowledges at once."""
        self._check_open()
        if self.fail_appends is not None:
            raise StoreError(self.fail_appends)
        self._logs.setdefault(session_id, []).extend(events)

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """The record of *session_id*, or None. Cancellation: safe."""
        self._check_open()
        await trio.lowlevel.checkpoint()
        if session_id not in self._logs:
            return None
        return SessionRecord(session_id=session_id, parent_id=self._parents.get(session_id))

    async def load_state(self, session_id: str) -> ApprovalState:
        """Fold *session_id*'s whole log. Cancellation: safe."""
        await trio.lowlevel.checkpoint()
        return fold_all(self._logs.get(session_id, ()))

    async def read(self, session_id: str) -> list[Event]:
        """A copy of *session_id*'s events. Cancellation: safe."""
        await trio.lowlevel.checkpoint()
        return list(self._logs.get(session_id, ()))

    def read_nowait(self, session_id: str) -> list[Event]:
        """Synchronous twin of :meth:`read`, for tests."""
        return list(self._logs.get(session_id, ()))

    def session_ids(self) -> list[str]:
        """Every session id recorded, in creation order."""
        return list(self._logs)

    async def aclose(self) -> None:
        """Mark the store closed. Cancellation: closes anyway."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("memory store is closed: open a new one")
