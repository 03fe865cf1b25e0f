"""A session's approval policy and its remembered grants (contract §5, 6, 8.5).

What a question reads of them — the effective policy, whether a tool is granted here or on a
live ancestor — and how they change: ``approval/policy`` (set, seeded by a delegation, or
switched live with a notice to the agent) and ``approval/grant``, each appended through the
session's one append path (:class:`~broker._appends.SessionLog`), so the projection is the
only place either lives.

:class:`PolicyAndGrants` is a part of :class:`~broker._session.Session`, not an object of its
own: a session is its one instance (no second object per session, whose memory an idle
session would pay), and this module needs of it only what :class:`PolicyAndGrants` declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._events import ApprovalGrant, ApprovalPolicy, ApprovalRevoke, Event
from ._grants import grant_allowing

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from ._agent import Agent
    from ._appends import SessionLog
    from ._host import SessionHost
    from ._projection import ApprovalState, Grant
    from ._vocabulary import Policy

__all__ = ["PolicyAndGrants"]


class PolicyAndGrants:
    """The policy and grants of the session that inherits this (no state of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:
        # What the session provides (attributes of Session).
        log: SessionLog
        host: SessionHost
        agent: Agent
        parent: PolicyAndGrants | None

        @property
        def is_open(self) -> bool: ...

        @property
        def delegated(self) -> bool: ...

        @delegated.setter
        def delegated(self, value: bool) -> None: ...

    # -- what a question reads ----------------------------------------------------------

    @property
    def effective_policy(self) -> Policy:
        """The last ``approval/policy`` of this session, else the host's default."""
        override = self.log.state.policy
        return self.host.policy if override is None else override

    def grant_covering(
        self, tool_name: str, arguments: Mapping[str, Any] | None, clock: Callable[[], int]
    ) -> tuple[str | None, tuple[Grant, ...]]:
        """The grant that allows this call here or on a live ancestor — its id, or the tool's
        name for the seed's id-less grant — or None; and this session's grants found expired
        (the caller records their expiry). An expired grant covers nothing. *clock* (ms) is
        read only when a grant with an id is held: an idle question pays nothing for it."""
        expired: tuple[Grant, ...] = ()
        session: PolicyAndGrants | None = self
        while session is not None and (session is self or session.is_open):
            state = session.log.state
            if tool_name in state.grants:
                return tool_name, expired
            if state.granted:
                now_ms = clock()
                live = [g for g in state.granted if not g.expired(now_ms)]
                if session is self and len(live) != len(state.granted):
                    expired = tuple(g for g in state.granted if g.expired(now_ms))
                found = grant_allowing(live, tool_name, arguments)
                if found is not None:
                    return found.id, expired
            session = session.parent
        return None, expired

    def is_granted(self, tool_name: str) -> bool:
        """Whether this session, or a live ancestor, holds a grant for *tool_name*."""
        if tool_name in self.log.state.grants:
            return True
        ancestor = self.parent
        while ancestor is not None and ancestor.is_open:
            if tool_name in ancestor.log.state.grants:
                return True
            ancestor = ancestor.parent
        return False

    # -- how they change ----------------------------------------------------------------

    async def set_approval_policy(self, policy: Policy) -> None:
        """Durably record *policy* (no notice; outside a turn is fine). Cancellation: the event
        may still land."""
        event = ApprovalPolicy(policy=policy)
        await self.log.append(event)

    async def pin_delegated_policy(self, policy: Policy) -> None:
        """Seed the policy a delegation captured: ``approval/policy {policy, source:
        "delegation"}`` (contract §8.5). Cancellation: the event may still land."""
        self.delegated = True
        event = ApprovalPolicy(policy=policy, source="delegation")
        await self.log.append(event)

    async def switch_policy(self, policy: Policy) -> bool:
        """Switch live; True when the effective policy changed (then the agent gets a notice).

        Cancellation: the event may still land, and then the notice is not queued.
        """
        previous: list[Policy] = []

        def switch(state: ApprovalState) -> Event | None:
            current = self.host.policy if state.policy is None else state.policy
            if current is policy:
                return None
            previous.append(current)
            return ApprovalPolicy(policy=policy)

        if await self.log.append(switch) is None:
            return False
        self.agent.queue_switch(previous[0], policy)
        return True

    async def add_grant(self, grant: Grant) -> None:
        """Record *grant* (an ``approval/grant`` with its id). Allowed outside a turn.
        Cancellation: the grant may still land."""
        await self.log.append(grant.event())

    async def revoke(self, grant_id: str, by: str | None) -> bool:
        """Take back the grant *grant_id* (an id, or a tool's name for the seed's id-less
        grant); False when this session holds no such grant. Allowed outside a turn.
        Cancellation: the revocation may still land."""

        def revoke(state: ApprovalState) -> Event | None:
            if any(g.id == grant_id for g in state.granted):
                return ApprovalRevoke(id=grant_id, by=by)
            if grant_id in state.grants:
                return ApprovalRevoke(tool_name=grant_id, by=by)
            return None

        return await self.log.append(revoke) is not None

    async def grant(self, tool_name: str) -> bool:
        """Remember *tool_name* here (and for live descendants); False when already granted.

        Allowed outside a turn. Cancellation: the grant may still land.
        """
        event = ApprovalGrant(tool_name=tool_name)

        def add(state: ApprovalState) -> Event | None:
            return None if tool_name in state.grants else event

        return await self.log.append(add) is not None
