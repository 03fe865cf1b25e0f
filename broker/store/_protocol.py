"""The event-store contract the service is written against.

A store keeps, per session id, an ordered log of events. The only promise that matters to the
seam: :meth:`EventStore.append` returns only once every event it was given is durable, in order,
after everything previously appended to that session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from .._errors import BrokerError

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState

__all__ = ["EventStore", "SessionRecord", "StoreError"]


class StoreError(BrokerError):
    """An append or read could not be completed; nothing about it was acknowledged."""


@attrs.frozen(kw_only=True)
class SessionRecord:
    """What a store knows of a session besides its events: its id and its parent's id."""

    session_id: str
    parent_id: str | None


class EventStore(Protocol):
    """Durable, per-session, append-only event logs.

    Concurrency: the service never calls :meth:`append` for one session while an earlier append
    for that session is outstanding (each session actor serialises its own appends), but appends
    for different sessions arrive concurrently — a store may commit them together.
    """

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        """Record that *session_id* exists (child of *parent_id*); durable before it returns.

        Cancellation: if cancelled, the session may or may not have been recorded.
        """

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Append *events* to *session_id*'s log atomically; return once they are durable.

        Raises :class:`StoreError` (or the underlying error) when they could not be made durable;
        then none of them counts as appended. Cancellation: the caller must not assume either
        way; the service shields this call.
        """

    # Optional: a store that can acknowledge synchronously may also define
    # ``append_nowait(session_id, events) -> None`` with the same contract as :meth:`append`;
    # session actors then append without a scheduling pass.

    async def lookup(self, session_id: str) -> SessionRecord | None:
        """The record of *session_id*, or None when the store does not hold it.

        Used to resume a session. Cancellation: safe; nothing is changed.
        """
        ...

    async def load_state(self, session_id: str) -> ApprovalState:
        """The folded projection of *session_id*'s log (a store may start from a checkpoint).

        Cancellation: safe; nothing is changed.
        """

    async def read(self, session_id: str) -> list[Event]:
        """Every durable event of *session_id*, in append order.

        Cancellation: safe; nothing is changed.
        """

    async def aclose(self) -> None:
        """Release the store; later calls raise. Cancellation: still releases what it holds."""
