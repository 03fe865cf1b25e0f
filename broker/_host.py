"""What a session needs from the service that hosts it — and nothing more.

A :class:`Session` owns its questions (the request algorithm of contract §3 is
:meth:`Questions.ask`), its log order and its projection. It reaches its host only through this
narrow, typed interface: the store to append to, the deployment settings, a bounded shielded
wait for durability, the unscoped answerers, registering a scoped answerer, and being forgotten
when it ends. :class:`Broker`
implements it; the session module never imports the broker module, so the core has no import
cycle (imports go downward: broker → session → host, answerers, values).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import trio

    from ._agent import Agent
    from ._answerers import AnswererHandle, AnswerFn
    from ._bounded_waits import BoundedWaits
    from ._vocabulary import Delegation, Policy
    from .rules import RuleSet
    from .store import EventStore, GrantRevocation

__all__ = ["SessionHost"]


class SessionHost(Protocol):
    """The host of a session: read-only settings, the store, and the answerer registry."""

    @property
    def store(self) -> EventStore:
        """The event store every session of this host appends to."""
        ...

    @property
    def policy(self) -> Policy:
        """The deployment's default approval policy (a session's own override wins)."""
        ...

    @property
    def rules(self) -> RuleSet:
        """The deployment's rules (managed, user, project layers): every question reads them
        after the policy and before grants and answerers."""
        ...

    def now_ms(self) -> int:
        """Wall-clock time in ms since the epoch, read through trio's clock (so a test's
        ``autojump_clock`` moves it): what grants' expiries are judged by."""
        ...

    def revoked_elsewhere(self, grant_id: str) -> Awaitable[GrantRevocation | None] | None:
        """How to learn whether grant *grant_id* was revoked from another process (the
        store's board), or None when no other process can revoke (an in-memory store)."""
        ...

    @property
    def delegation(self) -> Delegation:
        """How delegated children are seeded and whose answerers they may reach."""
        ...

    @property
    def settle_grace(self) -> float:
        """The bound, in seconds, of every teardown wait."""
        ...

    @property
    def sessions_ended(self) -> int:
        """How many of its sessions have ended so far: the progress a closing session watches
        before it calls its own actor stuck (:meth:`Session.aclose`)."""
        ...

    @property
    def shielded_waits(self) -> BoundedWaits:
        """Waits for durability that the caller's cancellation cannot interrupt, each bounded
        by ``settle_grace`` (:meth:`BoundedWaits.wait`)."""
        ...

    @property
    def unscoped_answerers(self) -> Sequence[AnswererHandle]:
        """The answerers that see every session's questions, in registration order."""
        ...

    def register_answerer(self, fn: AnswerFn, scope: Agent | None, prepend: bool) -> AnswererHandle:
        """Register *fn* (scoped to *scope*'s session when given); the caller owns the handle."""
        ...

    async def serve_answerer(
        self,
        fn: AnswerFn,
        *,
        scope: Agent | None = None,
        prepend: bool = False,
        task_status: trio.TaskStatus[AnswererHandle] = ...,
    ) -> None:
        """An answerer held by the task running this (``nursery.start``)."""
        ...

    def forget(self, session_id: str) -> None:
        """The session *session_id* has ended: drop it from the host's registry (sync)."""
        ...
