"""The in-memory event store: durable for as long as the process lives; for tests and benches.

It is the one append path with durability already done: :meth:`MemoryStore.submit` stores the
events and returns a resolved ticket, so a session's append costs no scheduling pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import attrs
import trio

from .._projection import ApprovalState, fold
from ._protocol import Durability, SessionRecord, StoreError, StoreHead
from ._requests import DURABLE

if TYPE_CHECKING:
    from .._events import Event

__all__ = ["MemoryStore"]


@attrs.define(eq=False)
class MemoryStore:
    """Keeps each session's events in a list; a submission is acknowledged at once.

    ``fail_appends`` is a test seam: while it is set, every submission raises it as a
    :class:`StoreError` message and stores nothing (a full disk, a broken connection).
    """

    _logs: dict[str, list[Event]] = attrs.field(factory=dict, init=False)
    _parents: dict[str, str | None] = attrs.field(factory=dict, init=False)
    # The projection after each session's last event (its seq is the length of its log).
    _states: dict[str, ApprovalState] = attrs.field(factory=dict, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    fail_appends: str | None = None

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """Record *session_id*. Cancellation: a plain checkpoint; recorded iff it returns."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        self._logs.setdefault(session_id, [])
        self._parents[session_id] = parent_id

    async def claim(self, session_id: str) -> StoreHead:
        """The head of *session_id* (one process: nothing to take over). Cancellation: safe."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        if session_id not in self._logs:
            raise StoreError(f"memory store holds no session {session_id!r}")
        return self.head_nowait(session_id)

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        """Store *events* (they follow seq *seq*) now; the ticket is already resolved."""
        if self._closed:  # _check_open, inline: this runs on every append
            self._check_open()
        if self.fail_appends is not None:
            raise StoreError(self.fail_appends)
        log = self._logs.get(session_id)
        if log is None:  # not setdefault: that makes a list on every append
            log = self._logs[session_id] = []
        if seq != len(log):
            raise StoreError(
                f"session {session_id!r} submitted events after seq {seq}, but its log ends at "
                f"seq {len(log)}: re-read the head (store.head) before sequencing again"
            )
        log.extend(events)
        self._states[session_id] = state
        return DURABLE

    #: Never: nothing waits to be written (an attribute: read on every append).
    congested: ClassVar[bool] = False

    async def wait_for_room(self) -> None:
        """A checkpoint. Cancellation: safe."""
        await trio.lowlevel.checkpoint()

    async def head(self, session_id: str) -> StoreHead:
        """The head of *session_id*. Cancellation: safe."""
        await trio.lowlevel.checkpoint()
        return self.head_nowait(session_id)

    def head_nowait(self, session_id: str) -> StoreHead:
        """Synchronous twin of :meth:`head`."""
        log = self._logs.get(session_id, ())
        state = self._states.get(session_id)
        if state is None:
            state = ApprovalState()
            for event in log:
                state = fold(state, event)
        return StoreHead(seq=len(log), state=state)

    async def release(self, session_id: str) -> None:
        """Nothing to release in one process. Cancellation: safe."""
        await trio.lowlevel.checkpoint()

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Fold and store *events* after the session's last. Cancellation: a plain checkpoint
        first; appended iff it returns."""
        await trio.lowlevel.checkpoint()
        self.append_nowait(session_id, events)

    def append_nowait(self, session_id: str, events: Sequence[Event]) -> None:
        """Synchronous twin of :meth:`append`."""
        head = self.head_nowait(session_id)
        state = head.state
        for event in events:
            state = fold(state, event)
        self.submit(session_id, head.seq, events, state)

    async def load_state(self, session_id: str) -> ApprovalState:
        """The projection of *session_id*'s log. Cancellation: safe."""
        return (await self.head(session_id)).state

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """The record of *session_id*, or None. Cancellation: safe."""
        self._check_open()
        await trio.lowlevel.checkpoint()
        if session_id not in self._logs:
            return None
        return SessionRecord(session_id=session_id, parent_id=self._parents.get(session_id))

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
