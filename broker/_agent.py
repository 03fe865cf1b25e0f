"""The asking agent: identity, queued notices, and the ledger of its runtime context.

The agent knows its session only as an :class:`AgentSession` (what an agent, and whoever holds
one, may read of its session): this module does not import the session module, so the core's
imports go one way, ``_session`` -> ``_agent``. The broker turns an agent's session back into
its ``Session`` by checking it (``Broker._check_agent``).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from ._context import ContextLedger
from ._projection import ApprovalState
from ._texts import policy_switch_notice
from ._vocabulary import Policy

__all__ = ["Agent", "AgentSession", "Notice"]


class AgentSession(Protocol):
    """What an agent's holders may read of its session (``Session`` is the one implementation)."""

    @property
    def id(self) -> str:
        """The session id (the log's key)."""
        ...

    @property
    def state(self) -> ApprovalState:
        """The session's projection: policy, turn, grants, pending questions, sandbox mode."""
        ...


@attrs.frozen(kw_only=True)
class Notice:
    """A sourced user message queued for the agent's next model step."""

    source: str
    text: str


@attrs.define(eq=False, repr=False)
class Agent:
    """The agent of one session. Answerer ownership is by this object's identity, never by id.

    Agents are created by their session; do not construct them yourself.
    """

    session: AgentSession
    # Invariant: at most one switch notice is pending — a switch back before the next model step
    # cancels it, a further switch rewrites its target — so this never grows.
    _notice_from: Policy | None = attrs.field(default=None, init=False)
    _notice_to: Policy | None = attrs.field(default=None, init=False)
    #: What the model has been given in its runtime context (fed by the agent loop).
    context: ContextLedger = attrs.field(factory=ContextLedger, init=False)
    #: How people call this agent where they answer (``Claude Code session 6c48…``); None:
    #: ``agent of session ID``. Presentation only: never logged, never used to decide.
    label: str | None = attrs.field(default=None, init=False)

    def __repr__(self) -> str:
        return f"<Agent of session {self.session.id}>"

    def queue_switch(self, old: Policy, new: Policy) -> None:
        """Queue, for the next model step, the notice of a policy switch from *old* to *new*
        (its session calls this on an effective change). Switches before that step collapse
        to the net change; a switch back cancels the notice (decision 0003)."""
        if self._notice_from is None:
            self._notice_from = old
        self._notice_to = new
        if self._notice_to == self._notice_from:
            self._notice_from = self._notice_to = None

    def take_notices(self) -> list[Notice]:
        """Pop the notices queued for this agent's next model step (each is delivered once)."""
        old, new = self._notice_from, self._notice_to
        self._notice_from = self._notice_to = None
        if old is None or new is None:
            return []
        return [Notice(source="approval/policy", text=policy_switch_notice(old, new))]
