"""A store that forwards every call to an inner store: the base of store wrappers (fault
injection in :mod:`broker.chaos`, test doubles) that change one or two calls and pass the rest
through unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState
    from ._protocol import Durability, EventStore, SessionRecord, StoreHead

__all__ = ["ForwardingStore"]


@attrs.define(eq=False)
class ForwardingStore:
    """Every :class:`~broker.store.EventStore` call goes to *inner*, with the inner store's
    results, errors and cancellation semantics. Subclasses override what they change."""

    inner: EventStore

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """As the inner store. Cancellation: as the inner store."""
        await self.inner.create_session(session_id, parent_id)

    async def claim(self, session_id: str) -> StoreHead:
        """As the inner store. Cancellation: as the inner store."""
        return await self.inner.claim(session_id)

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        """As the inner store."""
        return self.inner.submit(session_id, seq, events, state)

    @property
    def congested(self) -> bool:
        """As the inner store."""
        return self.inner.congested

    async def wait_for_room(self) -> None:
        """As the inner store. Cancellation: just stops waiting."""
        await self.inner.wait_for_room()

    async def head(self, session_id: str) -> StoreHead:
        """As the inner store. Cancellation: as the inner store."""
        return await self.inner.head(session_id)

    async def release(self, session_id: str) -> None:
        """As the inner store. Cancellation: as the inner store."""
        await self.inner.release(session_id)

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """As the inner store. Cancellation: as the inner store."""
        await self.inner.append(session_id, events)

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """As the inner store. Cancellation: as the inner store."""
        return await self.inner.lookup(session_id)

    async def read(self, session_id: str) -> list[Event]:
        """As the inner store. Cancellation: as the inner store."""
        return await self.inner.read(session_id)

    async def aclose(self) -> None:
        """As the inner store."""
        await self.inner.aclose()
