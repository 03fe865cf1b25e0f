"""The asking agent: identity, queued notices, and the ledger of its runtime context."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._context import ContextLedger
from ._texts import policy_switch_notice
from ._vocabulary import Policy

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["Agent", "Notice"]


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

    session: Session
    # Invariant: at most one switch notice is pending — a switch back before the next model step
    # cancels it, a further switch rewrites its target — so this never grows.
    _notice_from: Policy | None = attrs.field(default=None, init=False)
    _notice_to: Policy | None = attrs.field(default=None, init=False)
    #: What the model has been given in its runtime context (fed by the agent loop).
    context: ContextLedger = attrs.field(factory=ContextLedger, init=False)

    def __repr__(self) -> str:
        return f"<Agent of session {self.session.id}>"

    def _queue_switch(self, old: Policy, new: Policy) -> None:
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
